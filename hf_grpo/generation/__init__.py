"""Generation: the backends behind one interface (`Generator`), the choice between them, weight sync into them, and
`hf-grpo serve` (a `vllm serve` configured for weight sync, `serve`)."""

import logging

from .base import EngineCannotLoadModel, GenerationResult, Generator, SamplingParams
from .hf import HFGenerator

logger = logging.getLogger(__name__)


def backend_class(args) -> type[Generator]:
    """The `Generator` class of ``args``' backend (the vLLM modules are imported only when chosen)."""
    if args.generation_backend == "hf":
        return HFGenerator
    if args.generation_backend == "hf_continuous":
        from .continuous import ContinuousBatchingGenerator

        return ContinuousBatchingGenerator
    if args.vllm_mode == "colocate":
        from .vllm_colocate import VLLMColocateGenerator

        return VLLMColocateGenerator
    from .vllm_server import VLLMServerGenerator

    return VLLMServerGenerator


def build_generator(args, accelerator, model, tokenizer, model_path: str) -> Generator:
    """The backend ``args`` asks for, through the constructor every backend shares (`Generator.from_config`).
    ``model_path`` is a checkpoint vLLM can load (the base model under PEFT). With ``generation_backend: auto``
    (TRL's ``use_vllm`` unset) a colocated engine that cannot load the model's architecture here falls back to HF
    generate, with a warning: every process meets the same failure, so all fall back together. A backend the user
    named is never swapped. ``args`` is left as it is: the generator returned is what generates (the config says what
    was asked for)."""
    try:
        return backend_class(args).from_config(args, accelerator, model, tokenizer, model_path)
    except EngineCannotLoadModel as e:
        if not args.generation_backend_is_auto or args.max_staleness is not None:
            raise
        logger.warning("%s; generation_backend auto: generating with transformers instead", e)
    return HFGenerator.from_config(args, accelerator, model, tokenizer, model_path)


__all__ = ["GenerationResult", "Generator", "HFGenerator", "SamplingParams", "backend_class", "build_generator"]
