"""hf_grpo: distributed GRPO-family reinforcement learning on the Hugging Face stack.

`DistributedGRPOTrainer`, `GRPOConfig` (TRL's config) and `RunConfig` (`GRPOConfig` plus the model, dataset, reward,
adapter and quantization fields a recipe sets) are imported on first access, so that `hf_grpo.algorithms` and the
reward functions stay importable without loading `transformers.Trainer`.
"""

__version__ = "0.1.0"
__all__ = ["DistributedGRPOTrainer", "GRPOConfig", "RunConfig", "__version__"]


def __getattr__(name):
    if name == "DistributedGRPOTrainer":
        from .trainer import DistributedGRPOTrainer

        return DistributedGRPOTrainer
    if name == "GRPOConfig":
        from .config.grpo_config import GRPOConfig

        return GRPOConfig
    if name == "RunConfig":
        from .config.run_config import RunConfig

        return RunConfig
    raise AttributeError(f"module 'hf_grpo' has no attribute {name!r}")
