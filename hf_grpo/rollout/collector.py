"""One generation round: prompts -> completions -> rewards, including DAPO's shaping and dynamic sampling, and
open-instruct's non-stop penalty (the total reward of a completion cut at the length limit is replaced by a fixed
value; DAPO's overlong penalty is then added on top).

Everything here is per process; the only cross-process step is the ``any_rank`` callback that keeps dynamic
sampling rounds in lock-step (backends such as ZeRO-3 generation are collective, so every process must call
``generate`` the same number of times).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..agents.loop import AgentResult
from ..algorithms import dynamic_sampling_keep, group_std, groups_with_spread, overlong_penalty
from ..data import encode_prompts
from ..data.images import images_of
from ..generation import Generator, SamplingParams
from ..rewards.inputs import decode_completions, reward_columns
from ..vision.inputs import VisionPrompts

logger = logging.getLogger(__name__)


@dataclass
class RolloutBatch:
    """``P`` prompts and their ``P*G`` completions, group-major."""

    rows: list[dict]  # [P] dataset rows
    prompt_ids: list[list[int]]  # [P]
    completion_ids: list[list[int]]  # [P*G]
    finished: list[bool]  # [P*G]
    completions: list  # [P*G] decoded: str, or [{"role": "assistant", "content": str}]
    rewards_per_func: torch.Tensor  # [P*G, F], NaN where a function returned None
    rewards: torch.Tensor  # [P*G] weighted sum plus shaping
    overlong: torch.Tensor  # [P*G] overlong penalty included in ``rewards`` (0 if disabled)
    sampling_logprobs: list[list[float]] | None = None
    # Per completion token, the weight version that sampled it (-1 on tool/environment tokens); None when the backend
    # does not label tokens. Partial rollouts (hf_grpo.rollout.pipeline) mix versions within a completion.
    token_versions: list[list[int]] | None = None  # [P*G] ragged, aligned with completion_ids
    details: list[dict] = field(default_factory=list)  # [P*G] reward functions' per-completion notes
    # Multi-turn rollouts (hf_grpo.agents): 1 on sampled tokens, 0 on tool/environment tokens; and each completion's
    # own prompt ids (an environment's reset may extend a prompt).
    completion_mask: list[list[int]] | None = None  # [P*G] ragged, aligned with completion_ids
    completion_prompt_ids: list[list[int]] | None = None  # [P*G]
    agent_metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    reward_log: dict[str, float] = field(default_factory=dict)  # the reward runner's statistics for this batch
    # TRL's log_extra / log_metric from the reward functions: [P*G] dicts of columns, and each metric's values.
    extra: list[dict] = field(default_factory=list)
    logged_metrics: dict[str, list[float]] = field(default_factory=dict)
    # Vision-language policies (hf_grpo.vision): each prompt's images and vision tensors, or each completion's for
    # multi-turn rollouts (tool turns add images: hf_grpo.agents.media); None for text-only models.
    media: list | None = None  # [P] or [P*G]

    @property
    def scored(self) -> torch.Tensor:
        """``[P*G]`` bool: False where every reward function returned None (such rows get advantage 0)."""
        return ~torch.isnan(self.rewards_per_func).all(dim=1)

    def select_groups(self, keep: list[int], num_generations: int) -> RolloutBatch:
        rows_idx = [g * num_generations + k for g in keep for k in range(num_generations)]
        pick = torch.tensor(rows_idx, dtype=torch.long)
        return RolloutBatch(
            rows=[self.rows[g] for g in keep],
            prompt_ids=[self.prompt_ids[g] for g in keep],
            completion_ids=[self.completion_ids[i] for i in rows_idx],
            finished=[self.finished[i] for i in rows_idx],
            completions=[self.completions[i] for i in rows_idx],
            rewards_per_func=self.rewards_per_func[pick],
            rewards=self.rewards[pick],
            overlong=self.overlong[pick],
            sampling_logprobs=None if self.sampling_logprobs is None else [self.sampling_logprobs[i] for i in rows_idx],
            token_versions=None if self.token_versions is None else [self.token_versions[i] for i in rows_idx],
            details=[self.details[i] for i in rows_idx],
            completion_mask=None if self.completion_mask is None else [self.completion_mask[i] for i in rows_idx],
            completion_prompt_ids=None
            if self.completion_prompt_ids is None
            else [self.completion_prompt_ids[i] for i in rows_idx],
            agent_metrics=self.agent_metrics,
            extra=[self.extra[i] for i in rows_idx] if self.extra else [],
            logged_metrics=self.logged_metrics,
            media=None if self.media is None else [self.media[i] for i in self._media_index(keep, rows_idx)],
        )

    def _media_index(self, keep: list[int], rows_idx: list[int]) -> list[int]:
        """The entries of `media` to keep: per completion (``rows_idx``) or per prompt (``keep``)."""
        return rows_idx if len(self.media) == len(self.completion_ids) else keep

    def version_span(self) -> tuple[int, int] | None:
        """The oldest and newest weight versions that sampled a token of this batch (tool tokens, labelled -1, left
        out); None when the backend does not label tokens or nothing was sampled."""
        if self.token_versions is None:
            return None
        sampled = [v for row in self.token_versions for v in row if v >= 0]
        return (min(sampled), max(sampled)) if sampled else None

    def mixed_version_fraction(self) -> float:
        """The fraction of completions sampled by more than one weight version (partial rollouts)."""
        if not self.token_versions:
            return 0.0
        return sum(len({v for v in row if v >= 0}) > 1 for row in self.token_versions) / len(self.token_versions)

    def model_tokens(self) -> list[int]:
        """Tokens each completion's policy sampled (tool/environment tokens excluded, as TRL counts lengths)."""
        if self.completion_mask is None:
            return [len(c) for c in self.completion_ids]
        return [int(sum(m)) for m in self.completion_mask]

    def metrics(self, advantages: torch.Tensor, num_generations: int, reward_names: list[str]) -> dict[str, float]:
        """The round's statistics for the step log: rewards (unscored rows left out of the reward statistics, as in
        TRL, and counted), advantages, lengths, tokens and timings."""
        lengths = torch.tensor(self.model_tokens(), dtype=torch.float32)  # [P*G]
        finished = torch.tensor(self.finished, dtype=torch.bool)  # [P*G]
        scored = self.rewards[self.scored]  # [scored rows]
        out = {
            "reward": scored.mean() if scored.numel() else 0.0,
            "reward_std": scored.std() if scored.numel() > 1 else 0.0,
        }
        for j, name in enumerate(reward_names):
            col = self.rewards_per_func[:, j]  # [P*G]
            valid = col[~torch.isnan(col)]
            out[f"rewards/{name}/mean"] = valid.mean() if valid.numel() else 0.0
            out[f"rewards/{name}/std"] = valid.std() if valid.numel() > 1 else 0.0
        out["rewards/all_none_rows"] = (~self.scored).sum()
        out["frac_reward_zero_std"] = (group_std(self.rewards, num_generations) < 1e-6).float().mean()
        out["advantages/abs_mean"] = advantages.abs().mean()
        out["completions/mean_length"] = lengths.mean()
        out["completions/min_length"] = lengths.min()
        out["completions/max_length"] = lengths.max()
        out["completions/clipped_ratio"] = (~finished).float().mean()
        ended = lengths[finished]  # [terminated]: completions that stopped by themselves (0s if none, as TRL)
        out["completions/mean_terminated_length"] = ended.mean() if ended.numel() else 0.0
        out["completions/min_terminated_length"] = ended.min() if ended.numel() else 0.0
        out["completions/max_terminated_length"] = ended.max() if ended.numel() else 0.0
        prompts = (
            sum(len(p) for p in self.completion_prompt_ids)
            if self.completion_prompt_ids is not None
            else sum(len(p) for p in self.prompt_ids) * num_generations
        )
        out["num_tokens"] = prompts + sum(len(c) for c in self.completion_ids)
        if self.completion_mask is not None:
            out["completions/mean_total_length"] = sum(len(c) for c in self.completion_ids) / max(len(lengths), 1)
        out.update(self.agent_metrics)
        out["timing/generation_s"] = self.timings["generation"]
        out["timing/rewards_s"] = self.timings["rewards"]
        out["throughput/generated_tokens_per_s"] = lengths.sum() / max(self.timings["generation"], 1e-9)
        return {k: float(v) for k, v in out.items()}

    def records(
        self, advantages: torch.Tensor, num_generations: int, reward_names: list[str], images: bool = False, **fields
    ) -> list[dict]:
        """One record per completion for the rollout log and the completions table, plus ``fields`` (step, process,
        ...). JSON-able, except ``images`` (the prompt's images as PIL, [] for a text row), added when ``images``."""
        return [
            {
                **fields,
                **({"images": images_of(self.rows[i // num_generations])} if images else {}),
                "prompt": self.rows[i // num_generations]["prompt"],
                "completion": self.completions[i],
                "rewards": dict(zip(reward_names, [None if v != v else v for v in self.rewards_per_func[i].tolist()])),
                "reward": float(self.rewards[i]),
                "advantage": float(advantages[i]),
                "finished": self.finished[i],
                "reward_details": self.details[i],
                "extra": self.extra[i] if self.extra else {},
                **({} if self.token_versions is None else {"version_spans": version_spans(self.token_versions[i])}),
            }
            for i in range(len(self.completions))
        ]

    @staticmethod
    def concat(parts: list[RolloutBatch]) -> RolloutBatch:
        first = parts[0]
        return RolloutBatch(
            rows=[r for p in parts for r in p.rows],
            prompt_ids=[x for p in parts for x in p.prompt_ids],
            completion_ids=[x for p in parts for x in p.completion_ids],
            finished=[x for p in parts for x in p.finished],
            completions=[x for p in parts for x in p.completions],
            rewards_per_func=torch.cat([p.rewards_per_func for p in parts]),
            rewards=torch.cat([p.rewards for p in parts]),
            overlong=torch.cat([p.overlong for p in parts]),
            sampling_logprobs=None
            if first.sampling_logprobs is None
            else [x for p in parts for x in p.sampling_logprobs],
            token_versions=None if first.token_versions is None else [x for p in parts for x in p.token_versions],
            details=[x for p in parts for x in p.details],
            completion_mask=None if first.completion_mask is None else [x for p in parts for x in p.completion_mask],
            completion_prompt_ids=None
            if first.completion_prompt_ids is None
            else [x for p in parts for x in p.completion_prompt_ids],
            agent_metrics=first.agent_metrics,
            extra=[x for p in parts for x in (p.extra or [{}] * len(p.completions))],
            logged_metrics=_merge_metrics(parts),
            media=None if first.media is None else [x for p in parts for x in p.media],
        )


def version_spans(versions: list[int]) -> list[list[int]]:
    """A completion's per-token weight versions as ``[version, start, end]`` runs (the rollout log's form)."""
    spans: list[list[int]] = []
    for i, v in enumerate(versions):
        if spans and spans[-1][0] == v:
            spans[-1][2] = i + 1
        else:
            spans.append([v, i, i + 1])
    return spans


def _merge_metrics(parts: list[RolloutBatch]) -> dict[str, list[float]]:
    """The logged metrics of the scoring calls behind ``parts`` (parts selected from one call share its dict)."""
    merged: dict[str, list[float]] = {}
    for values in {id(p.logged_metrics): p.logged_metrics for p in parts}.values():
        for name, v in values.items():
            merged.setdefault(name, []).extend(v)
    return merged


class RolloutCollector:
    """``multi_turn(generator, rows, sampling, round_key)``, when set, replaces single-turn generation with agentic
    rollouts (`hf_grpo.agents`: tools, environments or TRL's ``rollout_func``) returning an `AgentResult`."""

    def __init__(
        self,
        generator: Generator,
        tokenizer,
        reward_runner,
        args,
        multi_turn: Callable[[Generator, list[dict], SamplingParams, int], AgentResult] | None = None,
        vision: VisionPrompts | None = None,
    ):
        self.multi_turn = multi_turn
        self.vision = vision  # a vision-language policy: prompts go through its processor, with their images
        self.generator = generator
        self.tokenizer = tokenizer
        self.reward_runner = reward_runner
        self.args = args
        self.sampling = SamplingParams.from_config(args)
        self.engine_lock = contextlib.nullcontext()  # the pipeline's lock when generation runs on its threads
        self.dynamic_sampling_stats = {
            "rounds": 0,
            "rejected_groups": 0,
            "topped_up_groups": 0,
            "real_batch_size_ratio": 1.0,
        }

    def collect(self, rows: list[dict], trainer_state=None) -> RolloutBatch:
        """Generate ``G`` completions for each row and score them."""
        round_key = trainer_state.global_step if trainer_state is not None else 0
        return self.score(rows, *self.generate(rows, round_key=round_key), trainer_state=trainer_state)

    def generate(self, rows: list[dict], sampling: SamplingParams | None = None, round_key: int = 0) -> tuple:
        """``(prompt_ids, GenerationResult, seconds[, media])`` for ``G`` completions of each row (``sampling``
        overrides the collector's own, e.g. a pipeline round's scheduled temperature; ``round_key`` seeds
        environments); ``media``: the prompts' `PromptMedia` when the policy is a vision-language model (multi-turn:
        each completion's, its tool images included)."""
        if self.multi_turn is not None:
            with self.engine_lock:
                t0 = time.perf_counter()
                result = self.multi_turn(self.generator, rows, sampling or self.sampling, round_key)
                G = self.args.num_generations
                prompt_ids = [result.prompt_ids[p * G] for p in range(len(rows))]
                # A vision-language policy's media, per completion: its tool turns may add images.
                return prompt_ids, result, time.perf_counter() - t0, result.media
        if self.vision is not None:
            prompt_ids, media = self.vision.encode(rows)
            with self.engine_lock:
                t0 = time.perf_counter()
                result = self.generator.generate(
                    prompt_ids, self.args.num_generations, sampling or self.sampling, media=media
                )
                return prompt_ids, result, time.perf_counter() - t0, media
        prompt_ids = self.encode(rows)[0]
        with self.engine_lock:
            t0 = time.perf_counter()
            result = self.generator.generate(prompt_ids, self.args.num_generations, sampling or self.sampling)
            return prompt_ids, result, time.perf_counter() - t0

    def encode(self, rows: list[dict]) -> tuple[list[list[int]], list | None]:
        """Single-turn rows as the engine gets them: each prompt's ids, and a vision-language policy's media (else
        None)."""
        if self.vision is not None:
            return self.vision.encode(rows)
        ids = encode_prompts(
            self.tokenizer, [r["prompt"] for r in rows], chat_template_kwargs=self.args.chat_template_kwargs
        )
        return ids, None

    def score(
        self,
        rows: list[dict],
        prompt_ids: list[list[int]],
        result,
        generation_s: float,
        media: list | None = None,
        trainer_state=None,
    ) -> RolloutBatch:
        """Decode and score generated completions (any thread: each call of the reward runner returns its own
        `RewardResult`, which goes into the batch)."""
        G = self.args.num_generations
        t1 = time.perf_counter()
        multi_turn = isinstance(result, AgentResult)
        if multi_turn and result.completions is not None:
            completions = result.completions  # messages: assistant turns with tool_calls, tool turns
        else:
            _, completions = decode_completions(self.tokenizer, rows, result.completion_ids)
        columns = reward_columns(rows, G)
        if multi_turn:
            columns.update(result.extras)
            if result.environments is not None:
                columns["environments"] = result.environments
        if multi_turn and result.prompts is not None:
            prompts = result.prompts  # TRL: with the text each environment's reset() appended
        else:
            prompts = [r["prompt"] for r in rows for _ in range(G)]
        if rows:
            scored = self.reward_runner(
                prompts=prompts,
                completions=completions,
                completion_ids=result.completion_ids,
                columns=columns,
                trainer_state=trainer_state,
            )
            per_func, total = scored.per_func, scored.total  # [P*G, F], [P*G]
            details, extra, logged = scored.details, scored.extra, scored.logged_metrics
            reward_log = scored.log_entries()
        else:
            per_func = torch.zeros(0, len(self.reward_runner.names))
            total = torch.zeros(0)
            details, reward_log, extra, logged = [], {}, [], {}
        if self.args.non_stop_penalty:
            # open-instruct: a completion cut at the length limit gets a fixed total reward, whatever it scored.
            finished = torch.tensor(result.finished, dtype=torch.bool)  # [P*G]
            total = torch.where(finished, total, torch.full_like(total, self.args.non_stop_penalty_value))
        lengths = torch.tensor([len(c) for c in result.completion_ids], dtype=torch.float32)  # [P*G]
        if self.args.overlong_buffer_length:
            overlong = overlong_penalty(
                lengths,
                self.args.max_completion_length,
                self.args.overlong_buffer_length,
                self.args.overlong_penalty_factor,
            )  # [P*G]
        else:
            overlong = torch.zeros_like(lengths)
        t2 = time.perf_counter()
        return RolloutBatch(
            rows=list(rows),
            prompt_ids=prompt_ids,
            completion_ids=result.completion_ids,
            finished=result.finished,
            completions=completions,
            rewards_per_func=per_func,
            rewards=total + overlong,
            overlong=overlong,
            sampling_logprobs=result.logprobs,
            token_versions=result.versions,
            details=details,
            reward_log=reward_log,
            extra=extra,
            logged_metrics=logged,
            timings={"generation": generation_s, "rewards": t2 - t1},
            completion_mask=result.completion_mask if multi_turn else None,
            completion_prompt_ids=result.prompt_ids if multi_turn else None,
            agent_metrics=result.metrics if multi_turn else {},
            media=media,
        )

    def collect_dynamic(
        self,
        rows: list[dict],
        refill: Callable[[int], list[dict]],
        any_rank: Callable[[bool], bool],
        trainer_state=None,
        first: RolloutBatch | None = None,
    ) -> RolloutBatch:
        """DAPO dynamic sampling: keep only informative groups, generating more prompts until ``len(rows)`` are kept.

        After ``dynamic_sampling_max_rounds`` extra rounds the batch is topped up with rejected groups (which carry
        ~zero advantage) so the step keeps its shape; how many were used is counted in ``dynamic_sampling_stats``.
        ``first``: the rows' batch when already generated and scored (the pipeline's scorer thread).
        """
        G, target = self.args.num_generations, len(rows)
        kept: list[RolloutBatch] = []
        rejected: list[RolloutBatch] = []
        n_kept = generated = 0
        batch = first if first is not None else self.collect(rows, trainer_state)
        timings, reward_log = dict(batch.timings), batch.reward_log
        for round_ in range(self.args.dynamic_sampling_max_rounds + 1):
            if self.args.dynamic_sampling_criterion == "reward_std":
                keep = groups_with_spread(batch.rewards, G)  # [P] bool
            else:
                keep = dynamic_sampling_keep(
                    batch.rewards,
                    G,
                    tuple(self.args.dynamic_sampling_filter_range),
                    self.args.dynamic_sampling_success_threshold,
                )  # [P] bool
            generated += len(keep)
            keep_idx = [i for i, k in enumerate(keep.tolist()) if k][: target - n_kept]
            drop_idx = [i for i, k in enumerate(keep.tolist()) if not k]
            if keep_idx:
                kept.append(batch.select_groups(keep_idx, G))
                n_kept += len(keep_idx)
            if drop_idx:
                rejected.append(batch.select_groups(drop_idx, G))
                self.dynamic_sampling_stats["rejected_groups"] += len(drop_idx)
            need = target - n_kept
            if round_ == self.args.dynamic_sampling_max_rounds or not any_rank(need > 0):
                break
            self.dynamic_sampling_stats["rounds"] += 1
            batch = self.collect(refill(need) if need > 0 else [], trainer_state)
            for k, v in batch.timings.items():
                timings[k] += v
            reward_log = batch.reward_log or reward_log
        # open-instruct's real_batch_size_ratio: informative groups per group generated, this round.
        self.dynamic_sampling_stats["real_batch_size_ratio"] = n_kept / max(generated, 1)
        if n_kept < target:
            pool = RolloutBatch.concat(rejected)
            # Prefer rejected groups with the largest reward spread: they still carry some signal.
            spread = pool.rewards.view(-1, G).std(dim=1) if G > 1 else torch.zeros(len(pool.rows))
            fill = torch.argsort(spread, descending=True)[: target - n_kept].tolist()
            kept.append(pool.select_groups(fill, G))
            self.dynamic_sampling_stats["topped_up_groups"] += len(fill)
            logger.info(
                "dynamic sampling: topped up %d of %d groups with rejected ones after %d extra rounds",
                len(fill),
                target,
                self.args.dynamic_sampling_max_rounds,
            )
        result = RolloutBatch.concat(kept)
        result.timings, result.reward_log = timings, reward_log
        return result
