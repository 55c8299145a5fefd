"""The training entry point: `accelerate launch train.py --recipe recipes/dapo.yaml [--field value ...]`.

Reads like a table of contents: config, data, trainer, train, save. With no arguments at all it runs
`recipes/quickstart.yaml` (the embedded model on the generated arithmetic task) when that file is in the working
directory.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import datasets
import transformers
from transformers import set_seed

from .checkpoints import checkpoint_step, resolve_resume
from .data import filter_long_prompts, load_prompt_dataset
from .models import load_tokenizer
from .recipes import parse_config
from .trainer import DistributedGRPOTrainer

logger = logging.getLogger("hf_grpo")
QUICKSTART = Path("recipes/quickstart.yaml")


def main(argv: list[str] | None = None) -> DistributedGRPOTrainer:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv and QUICKSTART.is_file():
        argv = ["--recipe", str(QUICKSTART)]

    # 1. Config: recipe + command-line overrides, validated.
    args = parse_config(argv)

    # 2. Logging: INFO on the main process, warnings elsewhere.
    level = logging.INFO if args.process_index == 0 else logging.WARNING
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(logging.WARNING)
    logger.info("config: model=%s dataset=%s rewards=%s estimator=%s loss=%s", args.model_name_or_path,
                args.dataset_name, args.reward_funcs, args.advantage_estimator, args.loss_type)
    set_seed(args.seed)

    # 3. Tokenizer (the embedded model is converted to safetensors on first use).
    tokenizer = load_tokenizer(args.model_name_or_path)

    # 4. Data: training prompts and named evaluation sets, long prompts dropped and counted.
    train_dataset = load_prompt_dataset(args.dataset_name, prompt_column=args.prompt_column,
                                        system_prompt=args.system_prompt, max_rows=args.max_train_samples,
                                        seed=args.seed)
    train_dataset, dropped = filter_long_prompts(train_dataset, tokenizer, args.max_prompt_length)
    logger.info("training prompts: %d (%d dropped as longer than %s tokens)", len(train_dataset), dropped,
                args.max_prompt_length)
    eval_datasets = None
    if args.eval_datasets:
        eval_datasets = {}
        for name, source in args.eval_datasets.items():
            dataset = load_prompt_dataset(source, prompt_column=args.prompt_column, system_prompt=args.system_prompt,
                                          max_rows=args.eval_max_samples, seed=args.seed)
            eval_datasets[name], _ = filter_long_prompts(dataset, tokenizer, args.max_prompt_length)

    # 5. Trainer: policy, rewards, generation backend.
    trainer = DistributedGRPOTrainer(model=args.model_name_or_path, reward_funcs=args.reward_funcs, args=args,
                                     train_dataset=train_dataset, eval_dataset=eval_datasets,
                                     processing_class=tokenizer)

    # 6. Train, resuming when asked: `--resume_from_checkpoint latest` (the newest complete checkpoint in output_dir,
    #    or a fresh start if there is none: the same command restarts a killed job) or a path.
    checkpoint = resolve_resume(args.resume_from_checkpoint, args.output_dir)
    if args.resume_from_checkpoint:
        logger.info("resuming from %s", checkpoint or "scratch (no checkpoint found)")
    if checkpoint and 0 < args.max_steps <= checkpoint_step(checkpoint):
        logger.info("%s already reached max_steps=%d: nothing left to train (its weights are the result)", checkpoint,
                    args.max_steps)
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
        logger.info("reward: first step %.3f -> last step %.3f; curves in %s", rewards[0], rewards[-1],
                    os.path.join(args.output_dir, "training_curves.png"))
    return trainer


if __name__ == "__main__":
    main()
