"""Run by tests/test_distributed.py under `accelerate launch --num_processes 2`: trains the tiny Llama two steps and
saves each rank's final parameters, so the test can check that the ranks agree."""

import sys

import torch

from hf_grpo import DistributedGRPOTrainer, GRPOConfig
from hf_grpo.data import load_prompt_dataset
from tests.helpers.rewards import even_token_reward


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


def main() -> None:
    model_path, out = sys.argv[1], sys.argv[2]
    args = GRPOConfig(output_dir=out, per_device_train_batch_size=8, num_generations=4, max_completion_length=12,
                      learning_rate=1e-3, max_steps=2, save_strategy="no", report_to="none", disable_tqdm=True,
                      plot_metrics=False, use_cpu=True, seed=0, log_completions_steps=2, loss_type="dapo")
    trainer = DistributedGRPOTrainer(model=model_path, reward_funcs=[even_token_reward], args=args,
                                     train_dataset=load_prompt_dataset("arithmetic:64"))
    before = flat(trainer.model)
    trainer.train()
    rank = trainer.accelerator.process_index
    torch.save({"before": before, "after": flat(trainer.model), "world": trainer.accelerator.num_processes,
                "log": trainer.state.log_history}, f"{out}/rank{rank}.pt")


if __name__ == "__main__":
    main()
