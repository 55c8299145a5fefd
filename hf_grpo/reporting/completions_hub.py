"""TRL's ``log_completions_hub_repo``: the completions tables, pushed to a Hugging Face dataset repo while training.

What is pushed is TRL's: the ``<output_dir>/completions/completions_<step>.parquet`` files written at every logged step
(`hf_grpo.reporting.completions`), committed by a background `huggingface_hub.CommitScheduler` every 2 minutes and once
more when the process exits, plus a dataset card. Departure from TRL: the repo's reachability is checked when the
trainer is built (offline mode, no token, a Hub that cannot be reached or refuses the token): a run that cannot push
fails before it trains, with an error naming the field, the repo and the fix, rather than when the first commit fails in
the background. The local parquet files are written either way.
"""

from __future__ import annotations

from huggingface_hub import CommitScheduler, DatasetCard, HfApi, constants, create_repo, get_token, is_offline_mode
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..errors import InputError

PUSH_EVERY_MINUTES = 2  # TRL's cadence
LOCAL_ONLY = "or unset log_completions_hub_repo (completions are still written to <output_dir>/completions)"


class HubCompletionsError(InputError):
    """``log_completions_hub_repo`` is set but the run could not push to it."""


def check_hub_access(repo_id: str, token: str | None) -> str:
    """The token to push ``repo_id`` with; raises `HubCompletionsError` if pushing cannot work from here."""
    field = f"log_completions_hub_repo={repo_id!r}"
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise HubCompletionsError(
            f"GRPOConfig (checked by {__name__}): {field} is not a Hub repo id ('<user or org>/<name>'): {e}"
        ) from None
    if is_offline_mode():
        raise HubCompletionsError(
            f"GRPOConfig (checked by {__name__}): {field}, but HF_HUB_OFFLINE is set, so completions cannot be pushed "
            f"to the dataset repo {repo_id}; unset HF_HUB_OFFLINE, {LOCAL_ONLY}"
        )
    token = token or get_token()
    if token is None:
        raise HubCompletionsError(
            f"GRPOConfig (checked by {__name__}): "
            f"{field}, but no Hugging Face token was found to push the dataset repo "
            f"{repo_id}; run `hf auth login`, set HF_TOKEN or hub_token, {LOCAL_ONLY}"
        )
    try:
        HfApi(token=token).whoami()
    except Exception as e:  # unreachable endpoint, refused token, proxy...: all mean the pushes would fail
        raise HubCompletionsError(
            f"GRPOConfig (checked by {__name__}): {field}, but the Hub at {constants.ENDPOINT} cannot be used to push "
            f"the dataset repo {repo_id} ({type(e).__name__}: {e}); check the network and the "
            f"token (`hf auth whoami`), {LOCAL_ONLY}"
        ) from e
    return token


def card_text(repo_id: str, model_id: str | None) -> str:
    trained = f" while training [{model_id}](https://huggingface.co/{model_id})" if model_id else ""
    return (
        f"---\npretty_name: hf_grpo completion logs\ntags:\n- hf_grpo\n- completions\n---\n\n# {repo_id}\n\n"
        f"Prompts, completions, per-function rewards and advantages logged by hf_grpo{trained}: one "
        f"`completions_<step>.parquet` file per logged step (columns `step`, `prompt`, `completion`, one per "
        f"reward function, `advantage`).\n"
    )


def start_hub_upload(
    repo_id: str, folder: str, token: str, private: bool | None = None, model_id: str | None = None
) -> CommitScheduler:
    """Create the dataset repo, push its card and start committing ``folder``'s parquet files (main process only)."""
    create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True, token=token)
    DatasetCard(card_text(repo_id, model_id)).push_to_hub(repo_id, repo_type="dataset", token=token)
    return CommitScheduler(
        repo_id=repo_id,
        repo_type="dataset",
        folder_path=folder,
        every=PUSH_EVERY_MINUTES,
        allow_patterns=["*.parquet"],
        private=private,
        token=token,
    )
