"""The trainer's start-up decisions for a vision-language policy: what it accepts, what it refuses and why.

Each refusal happens at init, with the reason, rather than as a shape error inside a forward pass at step one:

* image rows for a text-only model (the images would never reach it): `hf_grpo.data.checks`;
* packing (``max_tokens_per_microbatch``): a packed row holds several prompts, and the families' vision inputs are
  tied to rows (Qwen2-VL's 3-D rotary positions are computed per row from the image grids; Gemma 3's bidirectional
  image attention is a per-row mask), so packing would silently change what the model computes;
* a generation backend that cannot send images (`Generator.supports_images`);
* TRL's ``rollout_func`` with image rows: it returns token ids only, so the images' tensors could never be matched to
  the image tokens it wrote. Tools and environments work with image rows, and may return images themselves
  (`hf_grpo.agents.media`).

``freeze_vision_tower`` (hf_grpo's field; TRL's GRPOConfig has none) stops the gradient at the vision tower's
parameters; the projector and the language model train.
"""

from __future__ import annotations

import logging

from ..data.images import columns_with_images
from .inputs import VisionPrompts, causal_token_type, is_vision_model

logger = logging.getLogger(__name__)

# Parameter-name pieces of the vision towers of the families transformers has (Qwen2-VL ``visual``, Idefics3/SmolVLM
# ``vision_model``, Gemma 3 / LLaVA ``vision_tower``); the projector (``connector``, ``multi_modal_projector``,
# ``visual.merger``) is not the tower.
VISION_TOWER_NAMES = ("vision_tower.", "vision_model.", "visual.")
PROJECTOR_NAMES = ("merger.",)


def vision_encoder(model, processing_class, args) -> VisionPrompts | None:
    """The prompt encoder of a vision-language ``model`` (a loaded model or a name/path, read from its config without
    loading the weights); None for a text-only model, whose data checks then refuse image rows."""
    if isinstance(model, str):
        from ..models.loading import load_config

        config = load_config(model)
    else:
        config = model.config
    if not is_vision_model(config):
        return None
    return VisionPrompts(processing_class, args.chat_template_kwargs, causal_token_type(config))


def check_vision_policy(model, vision: VisionPrompts | None, args, datasets, rollout_func) -> None:
    """The refusals of the module docstring for a loaded vision-language ``model``; applies ``freeze_vision_tower``."""
    if vision is None:
        if args.freeze_vision_tower:
            raise ValueError(f"freeze_vision_tower: the model ({type(model).__name__}) has no vision tower")
        return
    if args.max_tokens_per_microbatch is not None:
        raise ValueError(
            f"max_tokens_per_microbatch (packing) is not supported for vision-language models "
            f"({type(model).__name__}): a packed row holds several prompts, while the vision inputs are per row "
            f"(Qwen2-VL's rotary positions come from each row's image grid, Gemma 3's image attention is a per-row "
            f"mask). Unset it; micro-batches are then padded to their own longest row"
        )
    vision.check_outputs(model)
    with_images = [
        name
        for name, ds in zip(("train_dataset", "eval_dataset"), datasets)
        for sub in (ds.values() if isinstance(ds, dict) else [ds])
        if sub is not None and columns_with_images(sub)
    ]
    if rollout_func is not None and with_images:
        raise ValueError(
            f"rollout_func with image prompts ({with_images[0]}): rollout_func returns token ids only, so the images' "
            f"vision tensors cannot be matched to the image tokens it wrote; use tools or environment_factory (their "
            f"rollouts carry the images, the tools' included), or train rollout_func on text rows"
        )
    if args.freeze_vision_tower:
        frozen = freeze_vision_tower(model)
        logger.info("freeze_vision_tower: %d vision-tower parameters frozen", frozen)


def check_backend(generator, vision: VisionPrompts | None) -> None:
    if vision is not None and not generator.supports_images:
        raise ValueError(
            f"the generation backend {type(generator).__name__} cannot send images with a prompt; for a "
            f"vision-language model use generation_backend: hf (transformers' generate) or vLLM"
        )


def freeze_vision_tower(model) -> int:
    """Turn off the gradient of the vision tower's parameters (not the projector's); returns how many."""
    frozen = 0
    for name, param in model.named_parameters():
        tower = any(piece in name for piece in VISION_TOWER_NAMES)
        if tower and not any(piece in name for piece in PROJECTOR_NAMES) and param.requires_grad:
            param.requires_grad_(False)
            frozen += 1
    if frozen == 0:
        raise ValueError(
            f"freeze_vision_tower: no parameter of {type(model).__name__} is named like a vision tower "
            f"({', '.join(VISION_TOWER_NAMES)})"
        )
    return frozen
