"""Generation: the backends behind one interface (`Generator`), the choice between them, weight sync into them, and
`hf-grpo serve` (a `vllm serve` configured for weight sync, `serve`)."""

import logging

from .base import GenerationResult, Generator, SamplingParams
from .hf import HFGenerator

logger = logging.getLogger(__name__)


def build_generator(args, accelerator, model, tokenizer, model_path: str) -> Generator:
    """The backend ``args`` asks for. ``model_path`` is a checkpoint vLLM can load (the base model under PEFT).
    With ``generation_backend: auto`` (TRL's ``use_vllm`` unset) a colocated engine that cannot load the model's
    architecture here falls back to HF generate, with a warning: every process meets the same failure, so all fall
    back together. A backend the user named is never swapped. ``args`` is left as it is: the generator returned
    is what generates (the config says what was asked for)."""
    backend = args.generation_backend
    if backend == "vllm" and args.vllm_mode == "colocate":
        from .vllm_colocate import EngineCannotLoadModel, VLLMColocateGenerator

        try:
            return VLLMColocateGenerator(args, accelerator, model_path)
        except EngineCannotLoadModel as e:
            if not args.generation_backend_is_auto or args.max_staleness is not None:
                raise
            logger.warning("%s; generation_backend auto: generating with transformers instead", e)
            backend = "hf"
    if backend == "hf":
        return HFGenerator(
            accelerator,
            model,
            tokenizer,
            args.generation_chunk_size,
            args.gradient_checkpointing_kwargs,
            args.cache_implementation,
            args.ds3_gather_for_generation,
        )
    if backend == "hf_continuous":
        from .continuous import ContinuousBatchingGenerator

        return ContinuousBatchingGenerator(
            accelerator,
            model,
            tokenizer,
            args.transformers_continuous_batching_config,
            args.gradient_checkpointing_kwargs,
        )
    from .vllm_server import VLLMServerGenerator

    return VLLMServerGenerator(args, accelerator)


__all__ = ["GenerationResult", "Generator", "HFGenerator", "SamplingParams", "build_generator"]
