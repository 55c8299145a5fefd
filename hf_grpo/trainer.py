"""`DistributedGRPOTrainer`: GRPO-family RL as `transformers.Trainer` hooks.

`Trainer.train()` is used as is. This class overrides: the sampler/dataloader (one batch of prompts per generation
round, repeated for each micro-batch it serves), `_prepare_inputs` (generate, score and buffer a round, then serve
micro-batches), `compute_loss`, `log`, `evaluate`, checkpointing and the model card. Everything else lives in the
packages by role (README, "Layout").

The contract with the helpers: the trainer builds each helper from the parts it uses and calls it; no helper is given
the trainer or reads its private state.

* `learner.scoring.PolicyScorer`, from the config, the accelerator, getters of the unwrapped and the wrapped model,
  and the reference: the log-prob passes (old policy, reference, loss, evaluation);
* `learner.loss_step.LossStep`, from the config, the accelerator, the scorer, the metrics, the `LossTerms` and the PTX
  batches: ``loss_step(model, batch)`` in `compute_loss`, ``batch`` a `learner.microbatch.MicroBatch`;
* `reporting.step_log.StepLog`, from the config, the accelerator and the training clock: ``record_round``,
  ``credit_micro_step`` and ``logs``;
* `rollout.collector.RolloutCollector`, from the generator, the tokenizer, the reward runner, the config and the
  multi-turn hook: ``collect`` and ``collect_dynamic``;
* `rollout.pipeline.build_pipeline`, from the config, the collector, the prompt stream, the temperature schedule, the
  refill and a state getter; each round boundary calls ``pipelined_round`` with the step, the push and the metrics;
* `agents.multi_turn_rollouts`, from the agent (or ``rollout_func``), the tokenizer, the accelerator and the policy:
  the collector's hook (``rollout_func`` itself receives the trainer, as in TRL);
* `evaluation.in_training.evaluate_sets`, from an `EvalContext` built for each ``evaluate`` call, under the engine
  lock, after the weight push.

Departures from TRL's `GRPOTrainer`: groups never straddle processes (each process samples all ``G`` completions of
its prompts in one request), so advantages need no gather; micro-batches are padded to their own length (or packed,
`hf_grpo.learner.packing`); the ``dapo`` loss is normalised by the active tokens of the optimizer step over all
processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from transformers import PreTrainedModel, Trainer
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_utils import rotate_checkpoints

from .agents import USER_CODE_ERRORS, AgentRollouts, environment_dataset, multi_turn_rollouts, with_environment_rewards
from .algorithms import AdvantageSettings, scheduled_temperature
from .config.grpo_config import GRPOConfig
from .data.checks import model_positions, prepare_datasets
from .data.streaming import is_streaming
from .evaluation.in_training import EvalContext, checked_eval_sets, eval_mode, evaluate_sets
from .generation import build_generator
from .learner.batching import (
    build_samples,
    collate_microbatches,
    normalizer_group,
    split_microbatches,
    step_normalizers,
)
from .learner.global_stats import rollout_advantages
from .learner.loss_step import LossStep, loss_terms
from .learner.microbatch import MicroBatch
from .learner.packing import single_row
from .learner.ptx import PTXBatches
from .learner.scoring import PolicyScorer
from .models.lm_head import cast_lm_head_to_fp32
from .models.loading import load_model, load_processing_class, prepare_policy, resolve_model_path, text_tokenizer
from .models.quantization import policy_quantization, quantized_description
from .models.ref_sync import SyncRefModelCallback
from .models.reference import prepare_reference_model
from .reporting.callbacks import run_callbacks
from .reporting.completions import CompletionsLog
from .reporting.model_card import model_card_text
from .reporting.run_setup import run_setup
from .rewards import RewardFunctionError, reward_functions, reward_runners
from .rollout.collector import RolloutCollector
from .rollout.pipeline import build_pipeline, oldest_version, pipelined_round
from .rollout.sampler import RepeatPromptSampler, keep_rows
from .runtime import checkpoints, nodes
from .runtime.distributed import any_rank, warn_if_fsdp_falls_back, zero3_init_disabled
from .trl_compat.config import check_trainer_arguments
from .trl_compat.trainer import TRLAttributes
from .vision.policy import check_backend, check_vision_policy, vision_encoder

logger = logging.getLogger(__name__)


class DistributedGRPOTrainer(TRLAttributes, Trainer):
    """Drop-in for TRL's `GRPOTrainer`: same constructor arguments, `GRPOConfig` for `args`."""

    def __init__(
        self,
        model: str | PreTrainedModel,
        reward_funcs=None,
        args: GRPOConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        reward_processing_classes=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
        quantization_config=None,
        tools=None,
        rollout_func=None,
        environment_factory=None,
    ):
        if args is None:
            args = GRPOConfig()
        check_trainer_arguments(
            quantization_config, tools, rollout_func, environment_factory, model_is_loaded=not isinstance(model, str)
        )
        model_id = model if isinstance(model, str) else (model.config._name_or_path or args.model_name_or_path)
        dtype = args.policy_dtype(peft_config is not None or args.use_peft)
        # A 4- or 8-bit base under a LoRA adapter (QLoRA), from any of TRL's three places (hf_grpo.models.quantization).
        quantization = policy_quantization(args, quantization_config, peft_config, dtype)
        init_kwargs = {**args.model_init_kwargs, **({"quantization_config": quantization} if quantization else {})}
        self._model_id = model_id
        if processing_class is None:  # a processor for a vision-language model, as TRL loads it
            processing_class = load_processing_class(model_id)
        tokenizer = self.text_tokenizer = text_tokenizer(processing_class)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        # A vision-language policy's prompts go through its processor with their images (hf_grpo.vision).
        vision = vision_encoder(model, processing_class, args)
        # Multi-turn rollouts (hf_grpo.agents): tools and environments, or TRL's rollout_func.
        self.agent = None
        if tools or args.tools or environment_factory is not None:
            self.agent = AgentRollouts(tokenizer, args, tools, environment_factory, model_positions(model), vision)
        train_dataset = environment_dataset(train_dataset, environment_factory, args, self.agent)
        # Every row checked and over-long prompts dropped and counted, before the model loads (hf_grpo.data.checks).
        train_dataset, eval_dataset = prepare_datasets(
            train_dataset,
            eval_dataset,
            tokenizer,
            args,
            model_positions(model),
            environment_factory,
            encode=self.agent.encode_prompt if self.agent is not None else None,
            vision=self.agent.vision if self.agent is not None else vision,  # an agent's: measured with its tools
        )
        model, peft_config = prepare_policy(model, args, peft_config, dtype, init_kwargs)
        check_vision_policy(model, vision, args, (train_dataset, eval_dataset), rollout_func)
        self._streamed = is_streaming(train_dataset)
        self.rollout_func = rollout_func
        with zero3_init_disabled(args):  # reward models load whole on every rank, never partitioned
            funcs, self.reward_processing_classes = reward_functions(reward_funcs, reward_processing_classes, args)
        if args.reward_weights is not None and len(args.reward_weights) != len(funcs):
            raise ValueError(f"reward_weights has {len(args.reward_weights)} entries for {len(funcs)} reward functions")
        funcs, weights = with_environment_rewards(funcs, self.agent, args.reward_weights)
        self.reward_runner, self.eval_reward_runner = reward_runners(funcs, weights, args)

        super().__init__(
            model=model,
            args=args,
            data_collator=keep_rows,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
        )
        # compute_loss returns a loss already normalised per micro-batch; Trainer divides by the accumulation steps.
        self.model_accepts_loss_kwargs = False
        self.loss_is_scaled_for_ga = False
        warn_if_fsdp_falls_back(self.accelerator)
        nodes.check_output_dir_sharing(args, self.accelerator)  # several nodes: who writes checkpoints where
        self.completions_log = CompletionsLog(args, self.accelerator.is_main_process)  # checks the Hub first
        # With PEFT the reference is the policy with its adapter disabled; otherwise a frozen copy, prepared the way
        # the backend needs (hf_grpo.runtime.distributed) and checked against the policy at the first step.
        self.ref_model = None
        if args.beta > 0 and peft_config is None:
            self.ref_model = prepare_reference_model(
                self.accelerator,
                self.model,
                lambda: load_model(resolve_model_path(model_id), dtype, args.attn_implementation, **init_kwargs),
            )
        policy = self.accelerator.unwrap_model(self.model)
        # Loss settings checked against the model; TRL's attribute names for the terms (hf_grpo.learner.loss_step).
        terms = loss_terms(args, policy)
        if terms.entropy_control is not None:
            self.add_callback(terms.entropy_control)
        if args.cast_lm_head_to_fp32:
            cast_lm_head_to_fp32(policy)
            if self.ref_model is not None:
                cast_lm_head_to_fp32(self.accelerator.unwrap_model(self.ref_model))
        if args.sync_ref_model:  # TRL's TR-DPO mixing (hf_grpo.models.ref_sync)
            self.add_callback(SyncRefModelCallback(self.accelerator, self.ref_model))
        # The contract with the helpers: each gets what it uses, never the trainer (see the module docstring).
        self.scorer = PolicyScorer(
            args,
            self.accelerator,
            lambda: self.accelerator.unwrap_model(self.model),
            lambda: self.model_wrapped,
            self.ref_model,
        )
        if args.disable_tqdm is False:
            self.remove_callback(ProgressCallback)  # the rich bar replaces it (hf_grpo.reporting.callbacks)
        self.clock, self.step_log, own_callbacks = run_callbacks(args, self.accelerator)
        for callback in own_callbacks:
            self.add_callback(callback)
        self.generator = build_generator(
            args, self.accelerator, self.model_wrapped, tokenizer, resolve_model_path(model_id)
        )
        check_backend(self.generator, vision)
        self.run_setup = run_setup(self.accelerator, policy, self.generator, args.beta, self.ref_model is not None)
        logger.info("setup: %s", self.run_setup)  # what runs: backend, precision, weights, generator
        multi_turn = multi_turn_rollouts(
            args.num_generations,
            self.agent,
            rollout_func,
            tokenizer,
            self.accelerator,
            policy,
            trainer=self,
        )
        self.collector = RolloutCollector(self.generator, tokenizer, self.reward_runner, args, multi_turn, vision)
        self.pipeline = None
        if args.max_staleness is not None:
            sampler, rank = self._get_train_sampler(), self.accelerator.process_index
            self.pipeline = build_pipeline(
                args,
                self.collector,
                lambda k: [self.train_dataset[i] for i in sampler.round_rows(k, rank)],
                self._temperature,
                self._refill,
                lambda: self.state,
            )
        self.ptx = PTXBatches(args, tokenizer) if args.ptx_dataset else None
        self.loss_step = LossStep(args, self.accelerator, self.scorer, self.step_log.metrics, terms, self.ptx)
        self.advantage_settings = AdvantageSettings.from_config(args)
        self._buffer: list[MicroBatch] = []
        self._micro_step: int | None = None
        self._refill_generator = torch.Generator().manual_seed(args.seed + 1000 * self.accelerator.process_index)
        self._staging = False  # while True, checkpoints are written to the staging area (_save_checkpoint)

    # ---- data ---------------------------------------------------------------------------------------------------
    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        return RepeatPromptSampler(
            len(dataset),
            self.args.prompts_per_generation,
            self.accelerator.num_processes,
            repeats=self.args.steps_per_generation * self.args.num_iterations,
            seed=self.args.seed,
            shuffle=self.args.shuffle_dataset,
        )

    def get_train_dataloader(self):
        # One batch = the prompts of one generation round on one process (not per_device_train_batch_size).
        return self._get_dataloader(
            dataset=self.train_dataset,
            description="Training",
            batch_size=self.args.prompts_per_generation,
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _refill(self, n: int) -> list[dict]:
        """Extra prompts for dynamic sampling, from a per-process seeded stream independent of the main order."""
        idx = torch.randint(len(self.train_dataset), (n,), generator=self._refill_generator).tolist()
        return [self.train_dataset[i] for i in idx]

    def _get_dataloader(
        self, dataset, description, batch_size, sampler_fn=None, is_training=False, dataloader_key=None
    ):
        if not is_streaming(dataset) or self.args.dataloader_num_workers == 0:
            return super()._get_dataloader(dataset, description, batch_size, sampler_fn, is_training, dataloader_key)
        # A stream is read in this process: each worker process would read all of it (TRL's rule; warned at init).
        loader = DataLoader(
            dataset, batch_size, collate_fn=self.data_collator, pin_memory=self.args.dataloader_pin_memory
        )
        return self.accelerator.prepare(loader)

    def _build_accelerator_args(self, **kwargs):
        if self._streamed:  # every process reads the stream and takes its own share (hf_grpo.data.streaming)
            kwargs["dataloader_config"] = dataclasses.replace(kwargs["dataloader_config"], dispatch_batches=False)
        return super()._build_accelerator_args(**kwargs)

    # ---- rollouts -----------------------------------------------------------------------------------------------
    def _prepare_inputs(self, inputs):
        if self._micro_step is None:  # first call, or first after resuming mid-run
            self._micro_step = self.state.global_step * self.args.gradient_accumulation_steps
        cycle = self.args.steps_per_generation * self.args.num_iterations
        position = self._micro_step % cycle
        if position == 0 or not self._buffer:
            self._buffer = self._generate_and_score(inputs)
        self.step_log.credit_micro_step(cycle)
        self._micro_step += 1
        return self._buffer[position % self.args.steps_per_generation]

    def _any_rank(self, flag: bool) -> bool:
        return any_rank(self.accelerator, flag)

    def _temperature(self, step: int) -> float:
        """The round's temperature (annealed by step): it samples the round and scores it, so every ratio compares
        one distribution."""
        args = self.args
        return scheduled_temperature(
            step,
            args.temperature_anneal_steps or self.state.max_steps,
            args.temperature,
            args.temperature_end,
            args.temperature_schedule,
        )

    def _generate_and_score(self, rows: list[dict]) -> list[MicroBatch]:
        args, G = self.args, self.args.num_generations
        error = None
        if self.pipeline is not None:
            start = time.perf_counter()
            k = self._micro_step // (args.steps_per_generation * args.num_iterations)
            round_ = pipelined_round(
                self.pipeline, k, rows, self.state.global_step, self._sync_generator, self.step_log.metrics
            )
            batch, error, version, temperature = round_.batch, round_.error, oldest_version(round_), round_.temperature
            if error is not None and not isinstance(error, USER_CODE_ERRORS):
                raise error
        else:
            self._sync_generator()
            start, version = time.perf_counter(), self.generator.weight_version
            temperature = self._temperature(self.state.global_step)
            self.collector.sampling = dataclasses.replace(self.collector.sampling, temperature=temperature)
            try:
                if args.dynamic_sampling:
                    batch = self.collector.collect_dynamic(rows, self._refill, self._any_rank, self.state)
                else:
                    batch = self.collector.collect(rows, self.state)
            except USER_CODE_ERRORS as e:  # reward_error: raise (zero/skip handled in the runner); reset() failed
                error = e
        # Every process learns whether any failed, so all can take part in the (collective) save, then stop.
        if self._any_rank(error is not None):
            self._save_last_step("a reward function failed")
            if error is not None:
                raise error
            raise RewardFunctionError(
                "a reward function failed on another process (its error is in that process's log)",
                function_name="<other process>",
            )
        advantages = rollout_advantages(
            batch, self.advantage_settings, self.accelerator, self.reward_runner.weights
        )  # [P*G]
        samples = build_samples(batch, advantages, args.mask_truncated_completions)
        shuffle = torch.Generator().manual_seed(args.seed + self.state.global_step)
        # Zero-advantage completions have exactly zero gradient unless a KL, entropy or MoE term pulls on them.
        skip = args.skip_zero_advantage and args.beta == 0 and not (self.entropy_control or self.aux_loss_enabled)
        group = normalizer_group(args.steps_per_generation, args.gradient_accumulation_steps)
        parts, step_tokens, skipped = split_microbatches(
            samples,
            args.steps_per_generation,
            group,
            shuffle,
            skip_zero_advantage=skip,
            balance_tokens=args.max_tokens_per_microbatch is not None,
        )
        attn_implementation = self.accelerator.unwrap_model(self.model).config._attn_implementation
        micro, padding = collate_microbatches(
            parts,
            self.text_tokenizer.pad_token_id,
            args.max_tokens_per_microbatch,
            single_row(attn_implementation),
            args.pad_to_multiple_of,
        )
        metrics = self.step_log.metrics
        for key, value in padding.items():
            metrics.add(key, value)
        ptx = [None] * len(micro)
        if self.ptx is not None:
            ptx = self.ptx.rows(len(micro), self._micro_step, args.gradient_accumulation_steps, group, self.accelerator)
        metrics.add("temperature", temperature)
        metrics.add("skipped_zero_advantage_frac", skipped / max(len(samples), 1))
        scores = self.scorer.old_and_reference(micro, temperature, self.state.global_step)
        normalizers = step_normalizers(len(micro), step_tokens, len(samples), group, self.accelerator)
        micro = [m.for_round(temperature, *parts) for m, *parts in zip(micro, scores, normalizers, ptx)]
        self.step_log.record_round(
            batch,
            advantages,
            time.perf_counter() - start,
            version,
            self.reward_runner.names,
            self.collector.dynamic_sampling_stats,
        )
        step, process = self.state.global_step + 1, self.accelerator.process_index
        self.completions_log.log_round(batch, advantages, G, self.reward_runner.names, step, process, version)
        return micro

    def _sync_generator(self, force: bool = False) -> None:
        """Push the policy into the generation backend when it holds an older version (every process calls this):
        at most every ``weight_sync_steps`` optimizer steps, unless ``force`` (an evaluation scores this policy)."""
        version, step = self.generator.weight_version, self.state.global_step
        if version == step or (not force and version >= 0 and step - version < self.args.weight_sync_steps):
            return
        start = time.perf_counter()
        self.generator.update_weights(self.model_wrapped, self.state.global_step)
        self.step_log.metrics.add("timing/weight_sync_s", time.perf_counter() - start)

    def _save_last_step(self, what: str) -> None:
        """Save the last completed optimizer step before an error ends the run (every process calls this). Weights
        change only in the optimizer step, so they are ``global_step``'s; the round position is rewound to its
        boundary. A failure on one process during a dynamic-sampling refill collective cannot be coordinated."""
        step = self.state.global_step
        if step == 0 or os.path.isdir(os.path.join(self._get_output_dir(None), f"checkpoint-{step}")):
            return
        logger.error("%s at step %d; saving checkpoint-%d before stopping", what, step + 1, step)
        self._micro_step = step * self.args.gradient_accumulation_steps
        self._save_checkpoint(self.model, trial=None)

    @contextlib.contextmanager
    def _save_on_crash(self, what: str):
        """Run a part every process runs (evaluation, logging); if it fails on any, all save the last step."""
        error = None
        try:
            yield
        except Exception as e:
            error = e
        if self._any_rank(error is not None):
            self._save_last_step(what)
            raise error if error is not None else RuntimeError(f"{what} on another process (see its log)")

    # ---- loss ---------------------------------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = self.loss_step(model, inputs)  # policy, entropy, MoE and PTX terms (hf_grpo.learner.loss_step)
        return (loss, None) if return_outputs else loss

    # ---- logging ------------------------------------------------------------------------------------------------
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        logs = self.step_log.logs(logs, training=self.model.training)
        with self._save_on_crash("logging failed"):  # a logger (wandb, a callback) that raises
            super().log(logs, start_time)

    # ---- evaluation ---------------------------------------------------------------------------------------------
    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """Greedy accuracy, sampled mean@k / pass@k and TRL's eval loss per eval set
        (`hf_grpo.evaluation.in_training`); logged and passed to the callbacks."""
        sets = checked_eval_sets(
            eval_dataset,
            self.eval_dataset,
            self.text_tokenizer,
            self.args,
            self.accelerator.unwrap_model(self.model),
            self.agent.encode_prompt if self.agent is not None else None,
            self.collector.vision,
        )
        if sets is None:
            return {}
        context = EvalContext(
            self.args,
            self.accelerator,
            self.generator,
            self.text_tokenizer,
            self.eval_reward_runner,
            self.reward_runner,
            self.scorer,
            self.model_wrapped,
            self.collector.multi_turn,
            self.state,
            self.collector.vision,
        )
        # With the pipeline running, the engine is taken for the whole evaluation (its generate calls wait).
        engine = self.pipeline.lock if self.pipeline is not None else contextlib.nullcontext()
        with self._save_on_crash("evaluation failed"), engine, eval_mode(self.model):
            self._sync_generator(force=True)
            metrics = evaluate_sets(sets, context, metric_key_prefix)
        if self.pipeline is not None:
            self.pipeline.publish(self.generator.weight_version)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    # ---- saving -------------------------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs):
        # transformers trains one more step when resumed from a checkpoint already at max_steps; a restarted job that
        # had finished would silently train past its end.
        done = 0
        nodes.check_same_resume_point(self.accelerator, resume_from_checkpoint, self.args.output_dir)
        if isinstance(resume_from_checkpoint, str):
            settings = checkpoints.run_settings(self.args, self.accelerator.num_processes, self.train_dataset)
            checkpoints.check_resume(resume_from_checkpoint, settings, self.args.resume_allow_changes)
            done = checkpoints.checkpoint_step(resume_from_checkpoint)
        if 0 < self.args.max_steps <= done:
            raise ValueError(
                f"{resume_from_checkpoint} is at step {done}, max_steps={self.args.max_steps}: the run is "
                f"complete and its weights are in that checkpoint. Raise max_steps to train further."
            )
        try:
            return super().train(
                resume_from_checkpoint=resume_from_checkpoint,
                trial=trial,
                ignore_keys_for_eval=ignore_keys_for_eval,
                **kwargs,
            )
        except Exception as error:  # several processes: only the coordinated paths (_save_on_crash) save
            if self.accelerator.num_processes == 1:
                try:
                    self._save_last_step(f"{type(error).__name__}: {error}")
                except Exception:  # logged; a failing save must not hide the error that ended the run
                    logger.exception("could not save the last completed step")
            raise
        finally:
            if self.pipeline is not None:
                self.pipeline.close()
            if self.agent is not None:
                self.agent.close()

    def _get_output_dir(self, trial) -> str:
        run_dir = super()._get_output_dir(trial)
        return os.path.join(run_dir, checkpoints.STAGING) if self._staging else run_dir

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict)
        nodes.write_model_files(self.args, self.accelerator, self.model, output_dir or self.args.output_dir, state_dict)

    def _save_checkpoint(self, model, trial) -> None:
        """`Trainer`'s checkpoint plus hf_grpo's per-rank state, written to a staging folder and published with one
        rename when every rank is done (see `hf_grpo.runtime.checkpoints`)."""
        folder = f"checkpoint-{self.state.global_step}"
        run_dir = self._get_output_dir(trial)
        staging = os.path.join(run_dir, checkpoints.STAGING, folder)
        self._staging = True
        try:
            checkpoints.clear_staging(self.accelerator, os.path.dirname(staging), folder, self.args.should_save)
            super()._save_checkpoint(model, trial)  # rotation inside only sees the staging area: a no-op
            nodes.write_deepspeed_latest(self.args, self.accelerator, staging)
            checkpoints.save_rank_state(staging, self.accelerator.process_index, self._resume_state())
            if self.args.should_save:
                self._write_model_card(staging)  # a checkpoint pushed or shared on its own says what it is
                checkpoints.write_run_settings(
                    staging, checkpoints.run_settings(self.args, self.accelerator.num_processes, self.train_dataset)
                )
        finally:
            self._staging = False
        checkpoints.publish(self.accelerator, staging, os.path.join(run_dir, folder), self.args.should_save)
        if self.args.should_save:
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )

    def _resume_state(self) -> dict:
        cycle = self.args.steps_per_generation * self.args.num_iterations
        mid_round = self._micro_step is not None and self._micro_step % cycle != 0
        return {
            "refill_generator": self._refill_generator.get_state(),
            "buffer": [m.state() for m in self._buffer] if mid_round else [],
            "round_tokens": self.step_log.round_tokens,
            "weight_version": self.generator.weight_version,
            "train_seconds": self.clock.elapsed(),
            # The prompt stream's position and the rounds in flight (generated again after a restart).
            "pipeline": None
            if self.pipeline is None
            else {"next_round": self.pipeline.next_round, "in_flight": self.pipeline.in_flight()},
        }

    def _load_rng_state(self, checkpoint: str | None) -> None:
        super()._load_rng_state(checkpoint)
        state = None if checkpoint is None else checkpoints.load_rank_state(checkpoint, self.accelerator.process_index)
        if state is None:
            return
        self._refill_generator.set_state(state["refill_generator"])
        self._buffer = [MicroBatch.from_state(m) for m in state["buffer"]]
        self.step_log.round_tokens = state["round_tokens"]
        self.clock.resume(state["train_seconds"])
        logger.info(
            "resumed from %s: %d buffered micro-batches of a round sampled by weight version %d, %.1f "
            "training minutes so far",
            checkpoint,
            len(self._buffer),
            state["weight_version"],
            state["train_seconds"] / 60,
        )

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None, tags=None, **kwargs):
        if self.is_world_process_zero():
            self._write_model_card(self.args.output_dir, model_name, dataset_name)

    def _write_model_card(self, folder: str, model_name: str | None = None, dataset_name: str | None = None) -> None:
        policy = self.accelerator.unwrap_model(self.model)
        Path(folder, "README.md").write_text(
            model_card_text(
                self.args,
                model_name=model_name,
                dataset_name=dataset_name,
                reward_names=self.reward_runner.names,
                log_history=self.state.log_history,
                base_model=self._model_id,
                adapter=hasattr(policy, "peft_config"),
                quantized=quantized_description(policy),
            )
        )
