"""The training entry point: `accelerate launch train.py --recipe recipes/dapo.yaml [--field value ...]`.

Reads like a table of contents: config, data, trainer, train, save. With no arguments at all it runs
`recipes/quickstart.yaml` (the embedded model on the generated arithmetic task) when that file is in the working
directory.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from pathlib import Path

import datasets
import transformers
from transformers import set_seed

from .config.recipes import parse_config
from .data import load_prompt_dataset
from .data.locations import row_locations
from .errors import run_command
from .evaluation.heldout import HeldoutAccuracy, evaluate_heldout, heldout_dataset, scoring
from .generation.vllm_colocate import vllm_logging_level
from .models.loading import load_processing_class
from .reporting.callbacks import plot_training_curves
from .rewards.code.weak_tests import weak_test_summary
from .runtime.checkpoints import checkpoint_step, resolve_resume
from .runtime.peer_watch import watch_peers
from .trainer import DistributedGRPOTrainer

logger = logging.getLogger("hf_grpo")
QUICKSTART = Path("recipes/quickstart.yaml")


def main(argv: list[str] | None = None) -> DistributedGRPOTrainer:
    """Bad input (`hf_grpo.errors.InputError`) ends the run with one line naming it; ``--verbose`` for a traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv and QUICKSTART.is_file():
        argv = ["--recipe", str(QUICKSTART)]
    return run_command(train, argv, prog="train.py")


def train(argv: list[str]) -> DistributedGRPOTrainer:

    # 1. Config: recipe + command-line overrides, validated.
    args = parse_config(argv)

    # 2. Logging: INFO on the main process, warnings elsewhere.
    level = logging.INFO if args.process_index == 0 else logging.WARNING
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(logging.WARNING)
    # vLLM logs at INFO while it is imported, through the root handler above, before it configures its own logger;
    # the generation backend keeps it at ERROR from engine start on (see vllm_log_level). With verbose, vLLM's own
    # level (VLLM_LOGGING_LEVEL, read, never set) also undoes a quiet run earlier in the same process.
    logging.getLogger("vllm").setLevel(vllm_logging_level(args.verbose))
    logger.info(
        "config: model=%s dataset=%s rewards=%s estimator=%s loss=%s",
        args.model_name_or_path,
        args.dataset_name,
        args.reward_funcs,
        args.advantage_estimator,
        args.loss_type,
    )
    set_seed(args.seed)
    # A peer rank killed by the OS (out of memory) is reported in one line by the survivors
    # (hf_grpo.runtime.peer_watch).
    with watch_peers(args.verbose):
        return _train(args)


def _train(args) -> DistributedGRPOTrainer:

    # 3. Tokenizer, or processor for a vision-language model (the embedded models are built on first use).
    processing_class = load_processing_class(args.model_name_or_path)

    # 4. Data: training prompts and named evaluation sets, every row validated with its file:line.
    train_dataset = load_prompt_dataset(
        args.dataset_name,
        prompt_column=args.prompt_column,
        system_prompt=args.system_prompt,
        max_rows=args.max_train_samples,
        seed=args.seed,
    )
    eval_datasets = None
    if args.eval_datasets:
        eval_datasets = {
            name: load_prompt_dataset(
                source,
                prompt_column=args.prompt_column,
                system_prompt=args.system_prompt,
                max_rows=args.eval_max_samples,
                seed=args.seed,
            )
            for name, source in args.eval_datasets.items()
        }

    # 4b. The code reward's tests: how many rows a program that does not read the task passes (hf_grpo.rewards.code.
    #     weak_tests), so a user sees before training which rows pay for reward hacking.
    if "code" in (args.reward_funcs or ()) and args.process_index == 0:
        rows, source = train_dataset.to_list(), str(args.dataset_name)
        summary = weak_test_summary(rows, source, seed=args.seed, locations=row_locations(train_dataset))
        logger.info("code tests: %s", summary)

    # 5. Trainer: policy, rewards, generation backend. It drops (and counts) the prompts too long to generate from.
    trainer = DistributedGRPOTrainer(
        model=args.model_name_or_path,
        reward_funcs=args.reward_funcs,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_datasets,
        processing_class=processing_class,
    )
    logger.info("training prompts: %d of %d loaded", len(trainer.train_dataset), len(train_dataset))
    heldout = None
    if args.heldout_eval_samples:  # the generated task's held-out fold, measured as the trainer measures prompts
        vision = trainer.collector.vision
        measure = functools.partial(vision.prompt_length, limit=args.max_prompt_length) if vision is not None else None
        heldout = heldout_dataset(args, trainer.train_dataset, trainer.text_tokenizer, measure)

    # 6. Train, resuming when asked: `--resume_from_checkpoint latest` (the newest complete checkpoint in output_dir,
    #    or a fresh start if there is none: the same command restarts a killed job) or a path.
    base = evaluate_heldout(trainer, heldout) if heldout is not None else None
    if base is not None:
        logger.info("held-out accuracy of the base model: %.1f%% (n=%d)", 100 * base.lenient_accuracy, base.count)
    checkpoint = resolve_resume(args.resume_from_checkpoint, args.output_dir)
    if args.resume_from_checkpoint:
        logger.info("resuming from %s", checkpoint or "scratch (no checkpoint found)")
    if checkpoint and 0 < args.max_steps <= checkpoint_step(checkpoint):
        logger.info(
            "%s already reached max_steps=%d: nothing left to train (its weights are the result)",
            checkpoint,
            args.max_steps,
        )
        return trainer
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()

    # 7. Save the final model with its model card, and push if asked.
    trainer.save_model(args.output_dir)
    trainer.create_model_card(dataset_name=args.dataset_name)
    if args.push_to_hub:
        trainer.push_to_hub(dataset_name=args.dataset_name)
    rewards = [r["reward"] for r in trainer.state.log_history if "reward" in r]
    if rewards and trainer.is_world_process_zero():
        curves = f"; curves in {os.path.join(args.output_dir, 'training_curves.png')}" if args.plot_metrics else ""
        # One step's reward is a handful of groups: the first and last tenth of the logged steps say more.
        k = max(1, len(rewards) // 10)
        first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
        logger.info("reward: mean of the first %d logged steps %.3f -> the last %d %.3f%s", k, first, k, last, curves)
    if base is not None:
        _report_heldout(trainer, heldout, base)
    return trainer


def _report_heldout(trainer: DistributedGRPOTrainer, heldout, base) -> None:
    """Evaluate the trained policy on the held-out prompts; on the main process write the JSON, redraw the curves
    with both accuracies and print the comparison as the run's last line."""
    trained = evaluate_heldout(trainer, heldout)
    if not trainer.is_world_process_zero():
        return
    # Greedy pass@1: lenient_accuracy * count is an exact count of correct prompts.
    report = HeldoutAccuracy.from_counts(
        base.count,
        round(base.lenient_accuracy * base.count),
        round(trained.lenient_accuracy * trained.count),
        scoring(trainer.args.dataset_name),
    )
    path = report.write(trainer.args.output_dir)
    if trainer.args.plot_metrics:
        plot_training_curves(
            trainer.state.log_history, os.path.join(trainer.args.output_dir, "training_curves.png"), heldout=report
        )
    logger.info("held-out accuracy written to %s", path)
    print(report.line(), flush=True)


if __name__ == "__main__":
    main()
