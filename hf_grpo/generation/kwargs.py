"""TRL's ``generation_kwargs``: sampling arguments for the generation backend, with TRL's meaning.

TRL passes the dict on top of its own sampling arguments: to ``vllm.SamplingParams`` with vLLM, to
``transformers.GenerationConfig`` with ``generate``. Here a key with a config field of the same meaning overrides that
field (`MAPPED`, so the trainer's log-probs and evaluation see the value too); ``do_sample: false`` means greedy
decoding (as ``GenerationConfig`` reads it; every completion of a group is then the same); a key that would break
what the trainer reads back (`RESERVED`: the number of samples, the log-probs, the stop tokens) is an error saying
why; any other key must be an argument of the configured backend (a ``vllm.SamplingParams`` field, or a
``GenerationConfig`` attribute for ``generation_backend: hf``) and is passed to it unchanged.

Departure from TRL: a key the backend does not know is an error naming it (TRL passes it on: vLLM then raises a
TypeError at the first generation, ``GenerationConfig`` keeps it as an attribute nobody reads). Keys that change the
sampling distribution beyond temperature / top-k / top-p / min-p (penalties, ``logit_bias``, ...) are not modelled by
the trainer's log-probs, as in TRL; `vllm_importance_sampling_correction` then reweights by the sampler's own.
"""

from __future__ import annotations

import importlib.util
from typing import Any

# Keys with a config field of the same meaning (they override it, as TRL's generation_kwargs override its fields).
MAPPED = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "stop": "stop",
    "stop_strings": "stop",
    "max_tokens": "max_completion_length",
    "max_new_tokens": "max_completion_length",
}
_SAMPLES = "the trainer asks for num_generations samples per prompt itself"
RESERVED = {
    "n": _SAMPLES,
    "num_return_sequences": _SAMPLES,
    "num_beams": "beam search is not sampling: the policy-gradient needs samples of the policy",
    "num_beam_groups": "beam search is not sampling",
    "logprobs": "the trainer asks vLLM for the sampled tokens' log-probs itself",
    "prompt_logprobs": "prompt log-probs are not read",
    "include_stop_str_in_output": "the stop string stays in the output so token ids and text agree",
    "detokenize": "the trainer decodes completions itself",
    "output_kind": "the trainer reads the final output",
    "eos_token_id": "the tokenizer's EOS ends a completion",
    "pad_token_id": "the tokenizer's pad token pads",
    "bos_token_id": "prompts are already tokenized",
    "max_length": "use max_tokens / max_new_tokens (completion tokens)",
    "return_dict_in_generate": "the trainer reads generated ids",
    "output_scores": "the trainer computes log-probs itself",
    "output_logits": "the trainer computes log-probs itself",
}


def backend_keys(backend: str) -> set[str]:
    """The arguments ``backend`` (``vllm`` or ``hf``) accepts: ``vllm.SamplingParams`` fields, ``GenerationConfig``
    attributes."""
    if backend == "vllm":
        from vllm.sampling_params import SamplingParams  # imported only when such a key is given

        return {f for f in SamplingParams.__struct_fields__ if not f.startswith("_")}
    from transformers import GenerationConfig

    return {k for k in vars(GenerationConfig()) if not k.startswith("_")}


def resolve_generation_kwargs(kwargs: dict[str, Any], backend: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``kwargs`` into the config fields they set (mapped keys: ``{field: value}``, which the config applies)
    and what the backend gets: the other keys, and ``do_sample`` when given. ``backend``: ``generation_backend``."""
    fields: dict[str, Any] = {}
    passed: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in MAPPED:
            if MAPPED[key] == "stop":  # vLLM and generate take one string or a list
                value = [value] if isinstance(value, str) else list(value)
            fields[MAPPED[key]] = value
        elif key in RESERVED:
            raise ValueError(
                f"GRPOConfig (checked by {__name__}): "
                f"generation_kwargs key {key!r} has no equivalent here: {RESERVED[key]}"
            )
        elif key == "do_sample":
            if not isinstance(value, bool):
                raise ValueError(
                    f"GRPOConfig (checked by {__name__}): "
                    f"generation_kwargs do_sample must be true or false, got {value!r}"
                )
            passed[key] = value
        else:
            passed[key] = value
    others = sorted(set(passed) - {"do_sample"})
    if others:
        if backend == "auto":  # as GRPOConfig resolves it, a step later
            backend = "vllm" if importlib.util.find_spec("vllm") is not None else "hf"
        unknown = [k for k in others if k not in backend_keys(backend)]
        if unknown:
            where = "vllm.SamplingParams" if backend == "vllm" else "transformers.GenerationConfig"
            raise ValueError(
                f"GRPOConfig (checked by {__name__}): generation_kwargs key(s) {unknown} are not arguments of {where} "
                f"(generation_backend={backend}); keys with a config field: {sorted(MAPPED)}, "
                f"do_sample, and the backend's own sampling arguments"
            )
    return fields, passed
