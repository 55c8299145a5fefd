"""Images in multi-turn rollouts: image prompts, and tools or environment methods that return images (TRL's
"multimodal tool responses"), for a vision-language policy (docs/agents.md, "Images").

* `content_blocks`: TRL's contract. A tool may return a list of content blocks, ``[{"type": "image", "image":
  <PIL.Image>}, {"type": "text", "text": "Here is the screenshot"}]``; the tool turn then carries those blocks and the
  image reaches the policy through its processor.
* `ImageText`: token ids of chat-template text whose ``{"type": "image"}`` parts the template drew as image
  placeholders, expanded by the policy's processor, with the images' vision tensors (``pixel_values``, ...) and the
  per-token ones (``mm_token_type_ids``, Gemma 3's ``token_type_ids``). A prompt is expanded as a whole, as the
  single-turn path does; an observation is rendered and cut as text observations are (`hf_grpo.agents.protocol`)
  and the processor expands the whole rendered observation, so its ids are what the processor gives that text when
  it processes the full conversation (a placeholder and its expansion never cross the cut, which sits right after a
  special token, where tokenization splits anyway). Tool text that holds special-token strings stays text
  (`hf_grpo.agents.encoding`): the processor then expands each template piece between such literals.
* `RolloutMedia`: one rollout's images, its context before expansion (what a vLLM engine is sent with the images) and
  its vision tensors, kept in step with its token ledger. A completion's media covers its prompt and its completion:
  per-token tensors span both, and the images are the prompt's followed by every tool image, in order.

Departures from TRL: TRL re-runs the image processor on every image of the batch before each turn and rebuilds
``mm_token_type_ids`` from Qwen's ``<|image_pad|>`` id; here each image is processed once, when it enters the context,
and its per-token tensors come from the processor itself (any family). TRL passes a tool's list to a text-only policy's
template (which prints the list, PIL object address included) and then fails in the forward pass (``KeyError:
'pixel_values'``); here a text-only policy given an image block stops the run with an error naming the tool
(`hf_grpo.agents.loop`). Blocks must be text or image (TRL passes any list); other lists are JSON as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..data.images import check_image, load_image
from ..vision.inputs import PER_TOKEN_KEYS, PromptMedia, VisionPrompts, pad_cat
from .encoding import encode_with_literals, special_strings

BLOCK_TYPES = ("text", "image")


def content_blocks(value) -> list[dict] | None:
    """A tool's value as content blocks (``{"type": "text", "text": str}`` and ``{"type": "image", "image": ...}``,
    the image a PIL image, a file path or a ``datasets`` image dict, returned as an RGB PIL image), or None when the
    value is not a list of such blocks (it is shown as JSON, as before). Raises ValueError naming a malformed block."""
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(b, dict) and b.get("type") in BLOCK_TYPES for b in value):
        return None
    parts = []
    for k, block in enumerate(value):
        if block["type"] == "text":
            if not isinstance(block.get("text"), str):
                raise ValueError(f"block {k} is a text block whose 'text' is not a string")
            parts.append({"type": "text", "text": block["text"]})
            continue
        if block.get("image") is None:
            raise ValueError(f"block {k} is an image block without an 'image'")
        image = load_image(check_image(block["image"], f"[{k}]['image']", None))
        # RGB as vLLM loads it (its processor converts), so the trainer and the engine see the same pixels.
        parts.append({"type": "image", "image": image if image.mode == "RGB" else image.convert("RGB")})
    return parts


def result_images(results) -> list:
    """The images of a tool round's results, in order."""
    return [p["image"] for r in results for p in (r.parts or []) if p["type"] == "image"]


@dataclass
class Encoded:
    """Ids of one piece of context with its images expanded, and what a model and an engine need with them."""

    ids: list[int]  # images expanded (what the trainer scores)
    engine_ids: list[int]  # before expansion (what a vLLM engine is sent, with the images)
    images: list = field(default_factory=list)
    tensors: list[dict] = field(default_factory=list)  # per-image tensors of each processor call, in order
    token_tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # [len(ids)] each


class _Pieces:
    """`encode_with_literals`'s ``encode`` for one text: template pieces through the processor with the images their
    placeholders stand for (in order), literal pieces (tool text with special-token strings) as text."""

    def __init__(self, text: ImageText, images: list):
        self.text, self.images, self.used = text, images, 0
        self.tensors: list[dict] = []
        self.segments: list[tuple[int, dict]] = []  # (tokens, per-token tensors) of each piece

    def __call__(self, piece: str, split: bool) -> list[int]:
        tokenizer = self.text.tokenizer
        if not piece:
            return []
        ids = list(tokenizer(piece, add_special_tokens=False, split_special_tokens=split)["input_ids"])
        n = 0 if split or self.used == len(self.images) else ids.count(self.text.marker())
        if n == 0:
            self.segments.append((len(ids), {}))
            return ids
        images = self.images[self.used : self.used + n]
        if len(images) < n:
            raise ValueError(
                f"the chat template drew more image placeholders than there are images ({len(self.images)})"
            )
        self.used += n
        out = self.text.processor(text=[piece], images=[images], return_tensors="pt", add_special_tokens=False)
        ids = out["input_ids"][0].tolist()  # [piece tokens]
        tensors = {
            k: v for k, v in out.items() if isinstance(v, torch.Tensor) and k not in ("input_ids", "attention_mask")
        }
        self.tensors.append({k: v for k, v in tensors.items() if k not in PER_TOKEN_KEYS})
        self.segments.append((len(ids), {k: v[0] for k, v in tensors.items() if k in PER_TOKEN_KEYS}))
        return ids


def per_token(segments: list[tuple[int, dict]]) -> dict[str, torch.Tensor]:
    """Per-token tensors over consecutive segments: each key's values, zeros where a segment has none."""
    keys = dict.fromkeys(k for _, values in segments for k in values)
    return {
        key: torch.cat([values.get(key, torch.zeros(n, dtype=torch.long)) for n, values in segments])  # [T]
        for key in keys
    }


def concat_tensors(parts: list[dict]) -> dict[str, torch.Tensor]:
    """Per-image tensors of several processor calls as one row's (`hf_grpo.vision.inputs.pad_cat`: along dim 0)."""
    keys = dict.fromkeys(k for p in parts for k in p)
    return {key: pad_cat([p[key] for p in parts if key in p]) for key in keys}


class ImageText:
    """Expands the image placeholders of an agent's prompts and observations with the policy's processor (see the
    module docstring). ``protocol``: the `ToolProtocol` whose renders are expanded."""

    def __init__(self, processor, protocol):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.protocol = protocol
        self._marker: int | None = None

    def marker(self) -> int:
        """The token an image part is drawn as, once per image, before expansion (Qwen's ``<|vision_start|>``,
        Idefics3's ``<image>``, Gemma 3's ``<start_of_image>``): found by rendering a user turn with and without one."""
        if self._marker is None:
            kwargs = self.protocol.chat_template_kwargs or {}
            text = {"type": "text", "text": "x"}

            def ids(content: list[dict]) -> list[int]:
                rendered = self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False, **kwargs
                )
                return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])

            with_image, without = ids([{"type": "image"}, text]), ids([text])
            special = set(self.tokenizer.convert_tokens_to_ids(special_strings(self.tokenizer)))
            found = [t for t in with_image if t in special and with_image.count(t) - without.count(t) == 1]
            if not found:
                raise ValueError(
                    f"the chat template draws no special token for an {{'type': 'image'}} part of a user message "
                    f"(rendered: {self.tokenizer.decode(with_image)!r}); images cannot be placed in this policy's "
                    f"context"
                )
            self._marker = found[0]
        return self._marker

    def encode(self, render, literals: list[str], images: list) -> Encoded:
        """``render(literals)`` with its images expanded (see `encode_with_literals` for ``render``)."""
        pieces = _Pieces(self, images)
        ids = encode_with_literals(self.tokenizer, render, literals, pieces)
        if pieces.used != len(images):
            raise ValueError(
                f"the chat template drew {pieces.used} image placeholder(s) for {len(images)} image(s): it does not "
                f"render every {{'type': 'image'}} part (a tool message's included)"
            )
        engine_ids = encode_with_literals(self.tokenizer, render, literals) if images else ids
        return Encoded(ids, engine_ids, list(images), pieces.tensors, per_token(pieces.segments))

    def prompt(self, messages: list[dict], tools: dict, observation: str | None, images: list):
        """``(ids, PromptMedia)`` of an agent's prompt: the protocol's render (tools, ``reset()`` text) expanded."""
        capture = _Capture(self, images)
        ids = self.protocol.encode_prompt(messages, tools, observation, encode=capture)
        got = capture.last
        media = PromptMedia(list(images), got.engine_ids, concat_tensors(got.tensors), got.token_tensors)
        return ids, media

    def observation(self, calls, results, end_of_turn: int) -> Encoded:
        """The observation of a tool round (`ToolProtocol.observation_ids`) with the results' images expanded."""
        images = result_images(results)
        capture = _Capture(self, images)
        ids = self.protocol.observation_ids(calls, results, end_of_turn, encode=capture)
        full = capture.last
        cut = len(full.ids) - len(ids)
        if full.engine_ids[:cut] != full.ids[:cut]:  # the dummy turns before the cut hold no image
            raise ValueError("an image placeholder was drawn before the tool results in the chat template's render")
        token_tensors = {k: v[cut:] for k, v in full.token_tensors.items()}  # [len(ids)]
        return Encoded(ids, full.engine_ids[cut:], images, full.tensors, token_tensors)


class _Capture:
    """A protocol's ``encode(render, literals)``: `ImageText.encode` with these images, keeping the last result (a
    protocol may render twice: `ToolProtocol.observation_ids` retries with one plain call)."""

    def __init__(self, text: ImageText, images: list):
        self.text, self.images = text, images
        self.last: Encoded | None = None

    def __call__(self, render, literals: list[str]) -> list[int]:
        self.last = self.text.encode(render, literals, self.images)
        return self.last.ids


class RolloutMedia:
    """One rollout's images, context before expansion and vision tensors, in step with its ledger (`add_turn` for a
    sampled turn, `add_observation` for a tool round); `snapshot` is the `PromptMedia` of its context so far."""

    def __init__(self, prompt_ids: list[int], media: PromptMedia):
        self.images = list(media.images)
        self.engine_ids = list(media.engine_ids)
        self._tensors = [media.tensors] if media.tensors else []
        self._segments = [(len(prompt_ids), media.token_tensors)]

    def add_turn(self, ids: list[int]) -> None:
        self.engine_ids += ids  # sampled tokens are the same before and after expansion
        self._segments.append((len(ids), {}))

    def add_observation(self, seen: Encoded) -> None:
        self.images += seen.images
        self.engine_ids += seen.engine_ids
        self._tensors += [t for t in seen.tensors if t]
        self._segments.append((len(seen.ids), seen.token_tensors))

    def snapshot(self) -> PromptMedia:
        return PromptMedia(
            images=list(self.images),
            engine_ids=list(self.engine_ids),
            tensors=concat_tensors(self._tensors),
            token_tensors=per_token(self._segments),
        )


class AgentPrompts(VisionPrompts):
    """`VisionPrompts` whose prompt text is an agent's: rendered by its protocol with the tool descriptions, which
    is what the data checks then measure (`VisionPrompts.prompt_length`)."""

    def __init__(self, vision: VisionPrompts, protocol, tools: dict):
        super().__init__(vision.processor, vision.chat_template_kwargs)
        self.protocol, self.tools = protocol, tools

    def text(self, prompt) -> str:
        return prompt if isinstance(prompt, str) else self.protocol.prompt_text(prompt, self.tools)
