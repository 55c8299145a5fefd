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

import torch

from ..algorithms import group_advantages, policy_loss
from ..learner.batching import build_samples, collate
from ..data.checks import KEEP, model_positions, prepare_datasets
from ..data.streaming import LazyEvalSet, is_streaming
from .accuracy import evaluate_rows
from ..generation import SamplingParams
from ..rollout.collector import reward_columns

GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo")


def eval_loss_value(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, args,
                    ref_logp: torch.Tensor | None = None) -> torch.Tensor:
    """The GRPO loss of freshly sampled completions under the policy that sampled them (old = current: ratio 1)."""
    out = policy_loss(logp, logp.detach(), advantages, mask, epsilon_low=args.epsilon,
                      epsilon_high=args.epsilon_high, loss_type=args.loss_type,
                      importance_sampling_level=args.importance_sampling_level, beta=args.beta, ref_logp=ref_logp,
                      kl_estimator=args.kl_estimator, max_completion_length=args.max_completion_length,
                      token_normalizer=mask.sum().clamp(min=1.0), use_bias_correction_kl=args.use_bias_correction_kl,
                      delta=args.delta)
    return out.loss


class EvalLoss:
    """``on_chunk`` hook of `evaluate_rows`: accumulates the loss of each generated chunk (see module docstring)."""

    def __init__(self, trainer, k: int):
        self.trainer, self.k = trainer, k
        self.total = torch.zeros(2, dtype=torch.float64)           # [loss x completions, completions]

    @torch.no_grad()
    def __call__(self, rows, prompt_ids, result, completions) -> None:
        trainer, args, k = self.trainer, self.trainer.args, self.k
        runner = trainer.reward_runner
        per_func = runner(prompts=[r["prompt"] for r in rows for _ in range(k)], completions=completions,
                          completion_ids=result.completion_ids, columns=reward_columns(rows, k),
                          trainer_state=trainer.state)                                   # [n*k, F]
        rewards = runner.total(per_func)                                                 # [n*k]
        estimator = args.advantage_estimator if args.advantage_estimator in GROUP_ESTIMATORS else "grpo"
        advantages = group_advantages(rewards, k, estimator, args.advantage_eps,
                                      valid=~per_func.isnan().all(-1))                   # [n*k]
        samples = build_samples(prompt_ids, result.completion_ids, result.finished, advantages, k,
                                args.mask_truncated_completions)
        batch = collate(samples, trainer.processing_class.pad_token_id)
        inputs = trainer._model_inputs(batch)
        mask = batch["completion_mask"].to(trainer.accelerator.device)                  # [n*k, C]
        temperature = args.temperature
        logp = trainer._logprobs(trainer.model_wrapped, inputs, mask.shape[1], temperature)[0]   # [n*k, C]
        ref_logp = None
        if args.beta > 0:
            if trainer.ref_model is not None:
                ref_logp = trainer._logprobs(trainer.ref_model, inputs, mask.shape[1], temperature)[0]
            else:
                with trainer.accelerator.unwrap_model(trainer.model).disable_adapter():
                    ref_logp = trainer._logprobs(trainer.model_wrapped, inputs, mask.shape[1], temperature)[0]
        loss = eval_loss_value(logp, batch["advantages"].to(mask.device), mask, args, ref_logp)
        self.total += torch.tensor([loss.item() * len(samples), len(samples)], dtype=torch.float64)

    def value(self) -> float:
        total = self.total
        accelerator = self.trainer.accelerator
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


def trainer_evaluate(trainer, eval_dataset=None, metric_key_prefix: str = "eval") -> dict[str, float]:
    """The metrics of every eval set (see the module docstring), logged and passed to the callbacks."""
    sets = eval_dataset if eval_dataset is not None else trainer.eval_dataset
    if sets is None:
        return {}
    if not isinstance(sets, Mapping):
        sets = {"eval": sets}
    # Sets given here get the checks the constructor runs; streamed sets are checked as they are drawn.
    fresh = {name: s for name, s in sets.items() if eval_dataset is not None or is_streaming(s)}
    if fresh:
        unwrapped = trainer.accelerator.unwrap_model(trainer.model)
        _, fresh = prepare_datasets(KEEP, fresh, trainer.processing_class, trainer.args, model_positions(unwrapped),
                                    encode=trainer.agent.encode_prompt if trainer.agent is not None else None)
        sets = {**sets, **fresh}
    args = trainer.args
    k = args.num_generations_eval or args.num_generations
    greedy = SamplingParams.from_config(args, greedy=True)
    sampled = SamplingParams.from_config(args)
    multi_turn = trainer.collector.multi_turn
    metrics: dict[str, float] = {}
    # With the pipeline running, the engine is taken for the whole evaluation (its generate calls wait).
    with trainer._save_on_crash("evaluation failed"), (trainer.pipeline.lock if trainer.pipeline is not None
                                                       else contextlib.nullcontext()), eval_mode(trainer.model):
        trainer._sync_generator()
        for name, dataset in sets.items():
            rows = dataset.rows(args.eval_max_samples) if isinstance(dataset, LazyEvalSet) else dataset
            common = dict(max_rows=args.eval_max_samples, multi_turn=multi_turn)
            result = evaluate_rows(trainer.generator, trainer.processing_class, rows, trainer.eval_reward_runner,
                                   greedy, trainer.accelerator, **common)
            loss = EvalLoss(trainer, k) if multi_turn is None else None
            many = evaluate_rows(trainer.generator, trainer.processing_class, rows, trainer.eval_reward_runner,
                                 sampled, trainer.accelerator, k=k, on_chunk=loss, **common)
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
    if trainer.pipeline is not None:
        trainer.pipeline.publish(trainer.generator.weight_version)
    trainer.log(metrics)
    trainer.control = trainer.callback_handler.on_evaluate(trainer.args, trainer.state, trainer.control, metrics)
    return metrics
