"""Run under `accelerate launch --num_processes 2` (tests/test_distributed.py, tests/generation): trains a tiny Llama
two steps and saves each rank's final parameters and logs, so the test can check that the ranks agree.

usage: ddp_train.py MODEL OUT [hf | colocate | server URL[,URL...] | hf-reward-crash | hf-budget]

hf-reward-crash: rank 1's reward function raises at step 2; the run must stop with a checkpoint of step 1.
hf-budget: a 1-minute time budget, and rank 1's clock runs 10,000 times fast; both ranks must follow rank 0's clock
and train all steps (acting on its own clock, rank 1 would stop after step 1 and leave rank 0 hanging)."""

import os
import sys

import torch

from hf_grpo import DistributedGRPOTrainer, GRPOConfig
from hf_grpo.data import load_prompt_dataset
from hf_grpo.rewards import RewardFunctionError
from tests.helpers.rewards import even_token_reward


def rank1_fails_after_first_step(completion_ids, trainer_state=None, **kwargs):
    if trainer_state.global_step >= 1 and int(os.environ["RANK"]) == 1:
        raise RuntimeError("boom on rank 1")
    return even_token_reward(completion_ids)


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


def main() -> None:
    model_path, out = sys.argv[1], sys.argv[2]
    backend = sys.argv[3] if len(sys.argv) > 3 else "hf"
    generation = {"generation_backend": "hf"} if backend.startswith("hf") else {
        "generation_backend": "vllm", "vllm_mode": backend, "vllm_enforce_eager": True, "vllm_kv_cache_gib": 0.25,
        "max_prompt_length": 256, "vllm_server_urls": sys.argv[4].split(",") if backend == "server" else None}
    args = GRPOConfig(output_dir=out, per_device_train_batch_size=8, num_generations=4, max_completion_length=12,
                      learning_rate=1e-3, max_steps=2, save_strategy="no", report_to="none", disable_tqdm=True,
                      plot_metrics=False, use_cpu=True, seed=0, log_completions_steps=2, loss_type="dapo",
                      **generation)
    if backend == "hf-budget":
        args.max_train_minutes = 1.0
    reward = rank1_fails_after_first_step if backend == "hf-reward-crash" else even_token_reward
    trainer = DistributedGRPOTrainer(model=model_path, reward_funcs=[reward], args=args,
                                     train_dataset=load_prompt_dataset("arithmetic:64"))
    if backend == "hf-reward-crash":
        args.save_strategy = "no"
        try:
            trainer.train()
        except RewardFunctionError as e:
            print(f"rank {trainer.accelerator.process_index} stopped: {e}", flush=True)
        return
    if backend == "hf-budget" and trainer.accelerator.process_index == 1:
        real = trainer.clock.clock
        trainer.clock.clock = lambda: 10_000 * real()
    before = flat(trainer.model)
    trainer.train()
    rank = trainer.accelerator.process_index
    torch.save({"before": before, "after": flat(trainer.model), "world": trainer.accelerator.num_processes,
                "log": trainer.state.log_history}, f"{out}/rank{rank}.pt")


if __name__ == "__main__":
    main()
