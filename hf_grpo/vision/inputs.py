"""A vision-language prompt as the model consumes it: token ids with the image tokens expanded, and its vision tensors.

`VisionPrompts` runs the model's processor (``AutoProcessor``) on one prompt at a time, so every prompt owns exactly
its own tensors: a micro-batch of any rows is then built by concatenating theirs (`collate_vision`), whatever the
generation round, the shuffle or the micro-batch split did to the order. What the processor returns falls in two
kinds, told apart by shape, never by a family table:

* per-token tensors (``token_type_ids``, ``mm_token_type_ids``: Gemma 3 marks its image tokens for bidirectional
  attention) are ``[1, P]`` like the ids; they are padded as the ids are (left over the prompt, zeros over the
  completion, which holds no image token; a multi-turn rollout's, whose tool turns may hold images, cover its
  completion too: `hf_grpo.agents.media`);
* everything else is per image (``pixel_values``, ``image_grid_thw``, ``pixel_attention_mask``, ``image_sizes``):
  a micro-batch concatenates the rows' tensors along dim 0, zero-padding the other dims to the largest. That is what
  each family's processor does for a batch: Qwen2-VL's patches and grids are flat over images; Idefics3/SmolVLM's
  ``[1, N, C, H, W]`` rows pad N with all-zero images, which the model drops as padding; LLaVA-NeXT's patch count
  pads with zeros that ``image_sizes`` tells the model to ignore; Gemma 3's images have one size.

Departure from TRL: TRL runs the processor on the whole batch of prompts and then splits ``pixel_values`` per
micro-batch with family knowledge (``image_grid_thw`` for Qwen, ``num_images`` otherwise); here the per-prompt
tensors are the unit, so no split is needed and a micro-batch may mix rows of any generation rounds.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from ..data.images import image_sizes, images_of
from ..data.schema import without_nulls

# `VisionPrompts.prompt_length`: how far, per image, an estimated length may be from the exact one.
SLACK = 8
# Processor outputs that are per token, by name (their shape alone cannot tell them from a one-image tensor).
PER_TOKEN_KEYS = ("token_type_ids", "mm_token_type_ids")
# Processor outputs that are training targets, not inputs: PaliGemma's processor returns ``labels`` (its prompt
# masked with -100); passed to the forward, the model would compute its own loss on shapes that do not match.
TARGET_KEYS = ("labels",)


def causal_token_type(config) -> int:
    """The ``token_type_ids`` value of a causal text token, which a completion's positions get. Gemma 3 marks image
    tokens 1 (attended bidirectionally) and text 0; PaliGemma marks its bidirectional prefix (image and prompt) 0 and
    the suffix it generates 1, so a completion padded with 0 would see its own later tokens (TRL 1.16 pads with 0)."""
    return 1 if config.model_type == "paligemma" else 0


@dataclass
class PromptMedia:
    """One prompt's media: its images (what a vLLM engine is sent) and the processor's tensors for it alone."""

    images: list  # PIL images, in the order of the prompt's image parts
    # The prompt's ids before the processor expanded its image tokens: what a vLLM engine is sent with the images
    # (it expands them itself; sent expanded ids, it would expand them again).
    engine_ids: list[int] = field(default_factory=list)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # per image, batch of one
    token_tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # [P] per token, aligned with the ids
    completion_token_type: int = 0  # a per-token tensor's value over the completion (`causal_token_type`)


def is_vision_model(config) -> bool:
    """A model whose config has a vision tower (Qwen2-VL, Idefics3/SmolVLM, Gemma 3, LLaVA-NeXT, ...)."""
    return getattr(config, "vision_config", None) is not None


class VisionPrompts:
    """Encodes prompts with their images through the model's processor (``processor.tokenizer`` for the text)."""

    def __init__(self, processor, chat_template_kwargs: dict | None = None, completion_token_type: int = 0):
        if not hasattr(processor, "image_processor"):
            raise ValueError(
                f"a vision-language model needs its processor (AutoProcessor) as processing_class, got "
                f"{type(processor).__name__}, which has no image_processor"
            )
        self.processor = processor
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._image_tokens: dict[tuple[int, int], int] = {}  # image size -> tokens its expansion adds
        self.completion_token_type = completion_token_type  # `causal_token_type` of the model

    def text(self, prompt: list[dict] | str) -> str:
        if isinstance(prompt, str):
            return prompt
        # A Dataset stores typed parts as one Arrow struct: {"type": "image", "text": None}; templates get the part.
        return self.processor.apply_chat_template(
            without_nulls(prompt), add_generation_prompt=True, tokenize=False, **self.chat_template_kwargs
        )

    def encode_one(self, prompt, images: list) -> tuple[list[int], PromptMedia]:
        """``(ids with image tokens expanded, media)`` for one prompt and its PIL images."""
        text = self.text(prompt)
        kwargs = {"images": [images]} if images else {}
        # A chat template writes its own BOS; a plain-string prompt gets the tokenizer's, as the text path gives it.
        special = isinstance(prompt, str)
        try:
            out = self.processor(text=[text], return_tensors="pt", add_special_tokens=special, **kwargs)
        except ValueError as e:
            if images:
                raise
            # PaliGemma's processor takes no prompt without an image; say so with the family, not only its words.
            raise ValueError(
                f"{type(self.processor).__name__} refuses a prompt without an image ({e}); give every row of this "
                f"model's datasets an image (`image` or `images`)"
            ) from e
        ids = out["input_ids"][0]  # [P]
        engine_ids = self.processor.tokenizer(text, add_special_tokens=special)["input_ids"]
        media = PromptMedia(images=list(images), engine_ids=list(engine_ids))
        media.completion_token_type = self.completion_token_type
        for key, value in out.items():
            if key in ("input_ids", "attention_mask", *TARGET_KEYS) or not isinstance(value, torch.Tensor):
                continue
            if key in PER_TOKEN_KEYS:
                media.token_tensors[key] = value[0]  # [P]
            else:
                media.tensors[key] = value
        return ids.tolist(), media

    def prompt_length(self, row: Mapping, limit: int | None = None) -> int:
        """Tokens of the row's prompt with its images expanded. Estimated without the image processor: the text's own
        ids plus, per image, the tokens an image of that size adds (measured once per size, on a blank image). The
        estimate can be off by a token or two where an expansion's text merges with its neighbours' (Gemma 3 writes
        newlines around each image), so within ``SLACK`` tokens per image of ``limit`` the row is encoded exactly."""
        special = isinstance(row["prompt"], str)
        text = len(self.processor.tokenizer(self.text(row["prompt"]), add_special_tokens=special)["input_ids"])
        sizes = image_sizes(row)
        estimate = text + sum(self._added_tokens(size) for size in sizes)
        if limit is None or abs(estimate - limit) > SLACK * len(sizes):
            return estimate
        return len(self.encode_one(row["prompt"], images_of(row))[0])

    def _added_tokens(self, size: tuple[int, int]) -> int:
        if size not in self._image_tokens:
            from PIL import Image

            probe = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "?"}]}]
            ids, media = self.encode_one(probe, [Image.new("RGB", size)])
            self._image_tokens[size] = len(ids) - len(media.engine_ids)
        return self._image_tokens[size]

    def check_outputs(self, model) -> None:
        """Refuse, at init, a processor output that ``model``'s forward does not take by name: it would otherwise
        reach the forward through ``**kwargs`` (or fail there at step one). Probed on one blank image."""
        from PIL import Image

        probe = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "?"}]}]
        _, media = self.encode_one(probe, [Image.new("RGB", (64, 64))])
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT model's is generic
        taken = inspect.signature(base.forward).parameters
        for key in [*media.tensors, *media.token_tensors]:
            if key not in taken:
                raise ValueError(
                    f"{type(self.processor).__name__} returns `{key}`, which {type(base).__name__}.forward does not "
                    f"take by name; hf_grpo passes a processor's per-image and per-token inputs to the forward and "
                    f"leaves out its training targets ({', '.join(TARGET_KEYS)}). Please report this family"
                )

    def encode(self, rows: list[Mapping]) -> tuple[list[list[int]], list[PromptMedia]]:
        """Each row's prompt ids and media (``images_of`` the row: none for a text-only row)."""
        pairs = [self.encode_one(row["prompt"], images_of(row)) for row in rows]
        return [ids for ids, _ in pairs], [media for _, media in pairs]


def pad_cat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate along dim 0, zero-padding every other dim to the largest (see the module docstring)."""
    if len({t.shape[1:] for t in tensors}) == 1:
        return torch.cat(tensors)
    shape = [max(t.shape[d] for t in tensors) for d in range(1, tensors[0].dim())]
    out = []
    for t in tensors:
        padded = t.new_zeros((t.shape[0], *shape))
        padded[(slice(None), *(slice(0, n) for n in t.shape[1:]))] = t
        out.append(padded)
    return torch.cat(out)


def collate_vision(media: list[PromptMedia], prompt_lengths: list[int], P: int, C: int) -> dict[str, torch.Tensor]:
    """The vision inputs of a padded micro-batch whose row ``b`` holds a prompt of ``prompt_lengths[b]`` tokens
    left-padded to ``P``, then ``C`` completion positions. Rows without images contribute nothing per image. A row's
    per-token tensors start at its first prompt token and cover the prompt, or (a multi-turn rollout's media, whose
    tool turns hold images: `hf_grpo.agents.media`) the prompt and the completion; zeros elsewhere."""
    out: dict[str, torch.Tensor] = {}
    keys = dict.fromkeys(k for m in media for k in m.tensors)
    for key in keys:
        parts = [m.tensors[key] for m in media if key in m.tensors]
        out[key] = pad_cat(parts)
    for key in dict.fromkeys(k for m in media for k in m.token_tensors):
        rows = torch.zeros((len(media), P + C), dtype=torch.long)  # [B, P+C]
        for b, m in enumerate(media):
            value = m.token_tensors.get(key)
            if value is not None:
                if len(value) > prompt_lengths[b] + C:
                    raise ValueError(
                        f"row {b}: {key} covers {len(value)} tokens, more than its prompt ({prompt_lengths[b]}) and "
                        f"the micro-batch's completion positions ({C})"
                    )
                start = P - prompt_lengths[b]
                rows[b, start : start + len(value)] = value
                rows[b, start + len(value) :] = m.completion_token_type  # the completion (`causal_token_type`)
        out[key] = rows
    return out
