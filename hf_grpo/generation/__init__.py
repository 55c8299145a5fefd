"""Generation: the backends behind one interface (`Generator`), the choice between them, weight sync into them, and
`hf-grpo serve` (a `vllm serve` configured for weight sync, `serve`)."""

from .base import GenerationResult, Generator, SamplingParams
from .hf import HFGenerator


def build_generator(args, accelerator, model, tokenizer, model_path: str) -> Generator:
    """The backend ``args`` asks for. ``model_path`` is a checkpoint vLLM can load (the base model under PEFT)."""
    if args.generation_backend == "hf":
        return HFGenerator(
            accelerator,
            model,
            tokenizer,
            args.generation_chunk_size,
            args.gradient_checkpointing_kwargs,
            args.cache_implementation,
            args.ds3_gather_for_generation,
        )
    if args.generation_backend == "hf_continuous":
        from .continuous import ContinuousBatchingGenerator

        return ContinuousBatchingGenerator(
            accelerator,
            model,
            tokenizer,
            args.transformers_continuous_batching_config,
            args.gradient_checkpointing_kwargs,
        )
    if args.vllm_mode == "server":
        from .vllm_server import VLLMServerGenerator

        return VLLMServerGenerator(args, accelerator)
    from .vllm_colocate import VLLMColocateGenerator

    return VLLMColocateGenerator(args, accelerator, model_path)


__all__ = ["GenerationResult", "Generator", "HFGenerator", "SamplingParams", "build_generator"]
