"""Run under `accelerate launch` by tests/distributed (see tests/helpers/launch.py): trains a small model with
the settings of a JSON spec and saves, per process, what the tests compare.

usage: train_worker.py MODEL OUT SPEC_JSON

SPEC keys:
  config:     GRPOConfig overrides shared by every run
  runs:       a list of further overrides, one training per entry, in this one launch (default: one run)
  reward:     reward functions (names in tests.helpers.rewards, or model:<path>); default even_token_reward
  dataset:    default arithmetic:64
  fixed_completions: true to replace generation by tests.helpers.fixed_generation.FixedCompletions
  scripted_tool_calls: [calls of rank 0, calls of rank 1, ...]: multi-turn rollouts with the calculator tool, the
              policy scripted per rank (tests.helpers.scripted_agent) over the real HF generate (its forward passes
              still run, in lock-step under ZeRO-3)
  mode:       train (default) | reward-crash (prints how each rank stopped) | budget (rank 1's clock runs 10,000x fast)
  resume:     true to resume from the newest complete checkpoint in the run's output_dir (if any)
  slow_save:  seconds each process sleeps after writing its part of a checkpoint, before the checkpoint is published
              (it first touches OUT/saving-<checkpoint>-<rank>), so that a test can kill the run during a save

Saves OUT/rank<R>_<K>.pt for run K: the world size, the full weights after training (gathered under ZeRO-3/FSDP2,
merged under LoRA), the log history, the reference model's kind and the process's peak resident memory.
"""

import json
import os
import resource
import sys
import time
from pathlib import Path

import torch

from hf_grpo import DistributedGRPOTrainer, GRPOConfig
from hf_grpo.data import load_prompt_dataset
from hf_grpo.generation.weights import iter_policy_weights
from hf_grpo.rewards import RewardFunctionError
from hf_grpo.runtime import checkpoints
from tests.helpers import rewards as test_rewards
from tests.helpers.fixed_generation import FixedCompletions
from tests.helpers.scripted_agent import ScriptedToolUse

BASE = dict(
    per_device_train_batch_size=8,
    num_generations=4,
    max_completion_length=12,
    learning_rate=1e-3,
    max_steps=2,
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    disable_tqdm=True,
    plot_metrics=False,
    seed=0,
    log_completions_steps=1,
    loss_type="dapo",
    generation_backend="hf",
)


def reward_functions(names: list[str]) -> list:
    return [n if n.startswith("model:") else getattr(test_rewards, n) for n in names]


def full_weights(trainer) -> dict[str, torch.Tensor]:
    return {
        name: t.detach().float().cpu().clone()
        for name, t in iter_policy_weights(trainer.accelerator, trainer.model_wrapped)
    }


def slow_down_saves(out: str, seconds: float) -> None:
    save_rank_state = checkpoints.save_rank_state

    def slow(folder, rank, state):
        save_rank_state(folder, rank, state)
        Path(out, f"saving-{os.path.basename(folder)}-{rank}").touch()
        time.sleep(seconds)

    checkpoints.save_rank_state = slow  # test instrumentation: widens the window in which a save is incomplete


def main() -> None:
    model_path, out, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    mode = spec.get("mode", "train")
    if spec.get("slow_save"):
        slow_down_saves(out, spec["slow_save"])
    for k, run in enumerate(spec.get("runs", [{}])):
        args = GRPOConfig(output_dir=f"{out}/run{k}", **{**BASE, **spec.get("config", {}), **run})
        if mode == "budget":
            args.max_train_minutes = 1.0
        if spec.get("scripted_tool_calls"):
            args.tools = ["calculator"]
        trainer = DistributedGRPOTrainer(
            model=model_path,
            args=args,
            reward_funcs=reward_functions(spec.get("reward", ["even_token_reward"])),
            train_dataset=load_prompt_dataset(spec.get("dataset", "arithmetic:64")),
        )
        rank = trainer.accelerator.process_index
        if spec.get("scripted_tool_calls"):
            trainer.generator = trainer.collector.generator = ScriptedToolUse(
                trainer.processing_class, calls=spec["scripted_tool_calls"][rank], inner=trainer.generator, vary=True
            )
        if spec.get("fixed_completions"):
            trainer.generator = trainer.collector.generator = FixedCompletions(
                len(trainer.processing_class), trainer.processing_class.eos_token_id
            )
        if mode == "reward-crash":
            try:
                trainer.train()
            except RewardFunctionError as e:
                print(f"rank {rank} stopped: {e}", flush=True)
            return
        if mode == "budget" and rank == 1:
            real = trainer.clock.clock
            trainer.clock.clock = lambda real=real: 10_000 * real()
        trainer.train(
            resume_from_checkpoint=checkpoints.resolve_resume("latest", args.output_dir) if spec.get("resume") else None
        )
        weights = full_weights(trainer)
        torch.save(
            {
                "world": trainer.accelerator.num_processes,
                "weights": weights,
                "log": trainer.state.log_history,
                "ref_model": type(trainer.ref_model).__name__,
                "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            },
            f"{out}/rank{rank}_{k}.pt",
        )
        trainer.generator.close()


if __name__ == "__main__":
    main()
