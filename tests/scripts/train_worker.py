"""Run under `accelerate launch` by tests/distributed (see tests/distributed/launch.py): trains a small model with
the settings of a JSON spec and saves, per process, what the tests compare.

usage: train_worker.py MODEL OUT SPEC_JSON

SPEC keys:
  config:     GRPOConfig overrides shared by every run
  runs:       a list of further overrides, one training per entry, in this one launch (default: one run)
  reward:     reward functions (names in tests.helpers.rewards, or model:<path>); default even_token_reward
  dataset:    default arithmetic:64
  fixed_completions: true to replace generation by tests.helpers.fixed_generation.FixedCompletions
  mode:       train (default) | reward-crash (prints how each rank stopped) | budget (rank 1's clock runs 10,000x fast)

Saves OUT/rank<R>_<K>.pt for run K: the world size, the full weights after training (gathered under ZeRO-3/FSDP2,
merged under LoRA), the log history and the reference model's kind.
"""

import json
import sys

import torch

from hf_grpo import DistributedGRPOTrainer, GRPOConfig
from hf_grpo.data import load_prompt_dataset
from hf_grpo.generation.weights import iter_policy_weights
from hf_grpo.rewards import RewardFunctionError
from tests.helpers import rewards as test_rewards
from tests.helpers.fixed_generation import FixedCompletions

BASE = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=12, learning_rate=1e-3,
            max_steps=2, save_strategy="no", report_to="none", disable_tqdm=True, plot_metrics=False, seed=0,
            log_completions_steps=1, loss_type="dapo", generation_backend="hf")


def reward_functions(names: list[str]) -> list:
    return [n if n.startswith("model:") else getattr(test_rewards, n) for n in names]


def full_weights(trainer) -> dict[str, torch.Tensor]:
    return {name: t.detach().float().cpu().clone()
            for name, t in iter_policy_weights(trainer.accelerator, trainer.model_wrapped)}


def main() -> None:
    model_path, out, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    mode = spec.get("mode", "train")
    for k, run in enumerate(spec.get("runs", [{}])):
        args = GRPOConfig(output_dir=f"{out}/run{k}", **{**BASE, **spec.get("config", {}), **run})
        if mode == "budget":
            args.max_train_minutes = 1.0
        trainer = DistributedGRPOTrainer(model=model_path, args=args,
                                         reward_funcs=reward_functions(spec.get("reward", ["even_token_reward"])),
                                         train_dataset=load_prompt_dataset(spec.get("dataset", "arithmetic:64")))
        rank = trainer.accelerator.process_index
        if spec.get("fixed_completions"):
            trainer.generator = trainer.collector.generator = FixedCompletions(
                len(trainer.processing_class), trainer.processing_class.eos_token_id)
        if mode == "reward-crash":
            try:
                trainer.train()
            except RewardFunctionError as e:
                print(f"rank {rank} stopped: {e}", flush=True)
            return
        if mode == "budget" and rank == 1:
            real = trainer.clock.clock
            trainer.clock.clock = lambda: 10_000 * real()
        trainer.train()
        weights = full_weights(trainer)
        torch.save({"world": trainer.accelerator.num_processes, "weights": weights, "log": trainer.state.log_history,
                    "ref_model": type(trainer.ref_model).__name__}, f"{out}/rank{rank}_{k}.pt")
        trainer.generator.close()


if __name__ == "__main__":
    main()
