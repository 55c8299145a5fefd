"""`DistributedGRPOTrainer.evaluate`: greedy accuracy, sampled mean@k / pass@k and TRL's ``eval_loss`` per eval set.

For every named set (one set is named ``eval``):

* ``{prefix}_{name}_accuracy`` (and lenient accuracy, mean length, samples): greedy pass@1, as before;
* ``{prefix}_{name}_mean_accuracy@k`` / ``pass@k``: ``k = num_generations_eval or num_generations`` completions
  sampled per prompt at the training sampling settings (`hf_grpo.evaluation`);
* ``{prefix}_{name}_loss``, and ``{prefix}_loss`` (the first set's, or the only one's): TRL's eval loss. TRL's
  `prediction_step` generates ``num_generations_eval`` completions per eval prompt, scores them with the *training*
  reward functions, computes group advantages and evaluates the GRPO loss on them without a gradient step. Here the
  same sampled completions as mean@k are used; the policy that sampled them is the one scored, so the ratio is 1 and
  the loss is the on-policy surrogate (+ beta x KL to the reference when beta > 0). Each generated chunk's loss uses
  that chunk's own denominators, and chunks are averaged weighted by their completions (TRL averages its eval
  batches).

Departures from TRL: TRL's eval metrics are the training metrics on eval generations; here they are accuracies
against the eval reward plus the loss. Multi-turn (tool) evaluation reports no loss (its completions' tool tokens are
masked by the rollout, which the eval generation path does not rebuild).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..algorithms import AdvantageSettings, LossInputs, LossSettings, Normalizers, group_advantages, policy_loss
from ..data.checks import KEEP, model_positions, prepare_datasets
from ..data.streaming import LazyEvalSet, is_streaming
from ..generation import SamplingParams
from ..learner.batching import build_samples, collate
from ..learner.scoring import PolicyScorer
from ..rewards import RewardRunner
from ..rewards.inputs import reward_columns
from ..rollout.collector import RolloutBatch
from .accuracy import evaluate_rows


def eval_loss_value(
    logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, args, ref_logp: torch.Tensor | None = None
) -> torch.Tensor:
    """The GRPO loss of freshly sampled completions under the policy that sampled them (old = current: ratio 1)."""
    # The on-policy surrogate (old = current) under the training loss's settings, its tokens its own normaliser.
    tokens = LossInputs(logp, logp.detach(), advantages, mask, ref_logp=ref_logp)
    out = policy_loss(tokens, LossSettings.from_config(args), Normalizers(token_normalizer=mask.sum().clamp(min=1.0)))
    return out.loss


@dataclass
class EvalContext:
    """What the in-training evaluation needs, built by the trainer for each `evaluate` call."""

    args: object  # GRPOConfig
    accelerator: object
    generator: object  # the generation backend, holding the current weights
    tokenizer: object
    eval_rewards: RewardRunner  # accuracy (``eval_reward``, default: the first training reward)
    train_rewards: RewardRunner  # the eval loss's advantages: the training reward functions, as in TRL
    scorer: PolicyScorer  # log-probs of the policy and the reference
    policy: torch.nn.Module  # the wrapped policy (what a forward runs through)
    multi_turn: object  # the collector's multi-turn hook, or None
    trainer_state: object  # TrainerState, passed to the reward functions
    vision: object = None  # the collector's VisionPrompts for a vision-language policy


class EvalLoss:
    """``on_chunk`` hook of `evaluate_rows`: accumulates the loss of each generated chunk (see module docstring)."""

    def __init__(self, ctx: EvalContext, k: int):
        self.ctx, self.k = ctx, k
        self.total = torch.zeros(2, dtype=torch.float64)  # [loss x completions, completions]

    @torch.no_grad()
    def __call__(self, rows, prompt_ids, result, completions, media=None) -> None:
        ctx, args, k = self.ctx, self.ctx.args, self.k
        runner = ctx.train_rewards
        scored = runner(
            prompts=[r["prompt"] for r in rows for _ in range(k)],
            completions=completions,
            completion_ids=result.completion_ids,
            columns=reward_columns(rows, k),
            trainer_state=ctx.trainer_state,
        )
        per_func, rewards = scored.per_func, scored.total  # [n*k, F], [n*k]
        settings = AdvantageSettings.from_config(args)
        advantages = group_advantages(
            rewards, k, settings.group_local_estimator(), settings.eps, valid=~per_func.isnan().all(-1)
        )  # [n*k]
        sampled = RolloutBatch(
            rows=rows,
            prompt_ids=prompt_ids,
            completion_ids=result.completion_ids,
            finished=result.finished,
            completions=completions,
            rewards_per_func=per_func,
            rewards=rewards,
            overlong=torch.zeros_like(rewards),  # no overlong shaping in the eval loss
            media=media,
        )
        samples = build_samples(sampled, advantages, args.mask_truncated_completions)
        batch = collate(samples, ctx.tokenizer.pad_token_id)
        inputs = ctx.scorer.model_inputs(batch)
        mask = batch.completion_mask.to(ctx.accelerator.device)  # [n*k, C]
        temperature = args.temperature
        logp = ctx.scorer.logprobs(ctx.policy, inputs, mask.shape[1], temperature)[0]  # [n*k, C]
        ref_logp = ctx.scorer.reference_logprobs(inputs, mask.shape[1], temperature) if args.beta > 0 else None
        loss = eval_loss_value(logp, batch.advantages.to(mask.device), mask, args, ref_logp)
        self.total += torch.tensor([loss.item() * len(samples), len(samples)], dtype=torch.float64)

    def value(self) -> float:
        total = self.total
        accelerator = self.ctx.accelerator
        if accelerator.num_processes > 1:
            total = accelerator.reduce(total.to(accelerator.device), reduction="sum").cpu()
        return float(total[0] / total[1].clamp(min=1.0))


@contextlib.contextmanager
def eval_mode(model):
    """Dropout off while evaluating (as `Trainer`'s evaluation loop does), restored after, also on an error."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def checked_eval_sets(eval_dataset, trainer_sets, tokenizer, args, policy, encode=None, vision=None) -> dict | None:
    """The named eval sets to evaluate: ``eval_dataset`` (given to ``evaluate()``), else the trainer's; None when
    there are none. Sets given here get the checks the constructor runs; streamed sets are checked as they are
    drawn. ``policy``: the unwrapped policy (its context length); ``encode``: the agent's prompt encoder, if any;
    ``vision``: a vision-language policy's `VisionPrompts`."""
    sets = eval_dataset if eval_dataset is not None else trainer_sets
    if sets is None:
        return None
    if not isinstance(sets, Mapping):
        sets = {"eval": sets}
    fresh = {name: s for name, s in sets.items() if eval_dataset is not None or is_streaming(s)}
    if fresh:
        _, fresh = prepare_datasets(KEEP, fresh, tokenizer, args, model_positions(policy), encode=encode, vision=vision)
        sets = {**sets, **fresh}
    return dict(sets)


def evaluate_sets(sets: Mapping, ctx: EvalContext, metric_key_prefix: str = "eval") -> dict[str, float]:
    """The metrics of every eval set (see the module docstring). The caller holds the engine and has pushed the
    current weights; every process calls this (the loss is reduced over processes)."""
    args = ctx.args
    k = args.num_generations_eval or args.num_generations
    greedy = SamplingParams.from_config(args, greedy=True)
    sampled = SamplingParams.from_config(args)
    metrics: dict[str, float] = {}
    for name, dataset in sets.items():
        rows = dataset.rows(args.eval_max_samples) if isinstance(dataset, LazyEvalSet) else dataset
        common = dict(max_rows=args.eval_max_samples, multi_turn=ctx.multi_turn, vision=ctx.vision)
        result = evaluate_rows(ctx.generator, ctx.tokenizer, rows, ctx.eval_rewards, greedy, ctx.accelerator, **common)
        loss = EvalLoss(ctx, k) if ctx.multi_turn is None else None
        many = evaluate_rows(
            ctx.generator, ctx.tokenizer, rows, ctx.eval_rewards, sampled, ctx.accelerator, k=k, on_chunk=loss, **common
        )
        prefix = f"{metric_key_prefix}_{name}"
        metrics[f"{prefix}_accuracy"] = result.accuracy
        metrics[f"{prefix}_lenient_accuracy"] = result.lenient_accuracy
        metrics[f"{prefix}_mean_length"] = result.mean_length
        metrics[f"{prefix}_samples"] = float(result.count)
        metrics[f"{prefix}_mean_accuracy@{k}"] = many.accuracy
        metrics[f"{prefix}_pass@{k}"] = many.strict_pass_at_k
        if loss is not None:
            metrics[f"{prefix}_loss"] = loss.value()
            metrics.setdefault(f"{metric_key_prefix}_loss", metrics[f"{prefix}_loss"])
    return metrics
