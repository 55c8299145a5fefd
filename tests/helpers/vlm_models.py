"""Tiny random-init vision-language models of the families TRL's GRPO tests use, built offline.

:func:`tiny_vlm` writes ``root/<family>``: a model (float32 safetensors, ``torch.manual_seed(0)``) that
``AutoModelForImageTextToText.from_pretrained`` loads and a processor (the embedded SmolLM2 tokenizer plus the family's
special tokens, a small image processor, a chat template in the family's style) that ``AutoProcessor.from_pretrained``
loads. Every text model is the same size (hidden 128, 2 layers, 2 heads of 64, 1 KV head: vLLM's CPU attention needs
head_dim 64); every vision tower has hidden 64, 2 layers, 2 heads. :data:`HUB_IDS` maps TRL's test hub ids to families.

What the processor returns for ``processor(text=[prompt] * B, images=[[64x64 image]] * B, return_tensors="pt")``, the
prompt being the chat template applied to one user turn holding one image part and "What colour?" (B = 1 | B = 2;
"per token" keys have the shape of ``input_ids``, the rest are per image):

=========== ======= ============================================================================================
family      image   keys besides input_ids / attention_mask (shapes B=1 | B=2)
            tokens
=========== ======= ============================================================================================
idefics3    16      pixel_values (1,1,3,64,64) | (2,1,3,64,64); pixel_attention_mask (1,1,64,64) | (2,1,64,64)
smolvlm     16      same as idefics3
qwen2_vl    16      pixel_values (64,1176) | (128,1176) (flattened patches of all images); image_grid_thw (1,3) |
                    (2,3); mm_token_type_ids per token
qwen2_5_vl  16      same as qwen2_vl
gemma3      16      pixel_values (1,3,64,64) | (2,3,64,64); token_type_ids per token (the processor renames
                    mm_token_type_ids; the model needs it in training mode for the bidirectional image mask)
llava_next  36      pixel_values (1,2,3,32,32) | (2,2,3,32,32) (base view + 1 anyres tile); image_sizes (1,2) | (2,2)
llava       16      pixel_values (1,3,32,32) | (2,3,32,32)
=========== ======= ============================================================================================

Missing packages: transformers 5.19 builds and loads no processor that takes a ``video_processor`` (Qwen2-VL,
Qwen2.5-VL, SmolVLM) without torchvision, which cannot be installed beside the CPU torch here. For those families
the folder's processor is an image-only subclass (``ImageOnlyQwen2VLProcessor`` ...), registered for the family's
config with transformers' public ``AutoProcessor.register`` by :func:`register_image_only_processors`; a process
that loads such a folder calls it first (:func:`tiny_vlm` does). Idefics3, Gemma 3, LLaVA and LLaVA-NeXT need nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
import transformers
from filelock import FileLock
from transformers.processing_utils import ProcessorMixin

FAMILIES = ("idefics3", "qwen2_vl", "qwen2_5_vl", "gemma3", "llava_next", "smolvlm", "llava", "paligemma")

_TRL = "trl-internal-testing/tiny-"
HUB_IDS: dict[str, str] = {
    _TRL + "Qwen2VLForConditionalGeneration": "qwen2_vl",
    _TRL + "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
    _TRL + "Gemma3ForConditionalGeneration": "gemma3",
    _TRL + "LlavaNextForConditionalGeneration": "llava_next",
    _TRL + "LlavaForConditionalGeneration": "llava",
    _TRL + "SmolVLMForConditionalGeneration": "smolvlm",
    _TRL + "Idefics3ForConditionalGeneration": "idefics3",
    _TRL + "PaliGemmaForConditionalGeneration": "paligemma",
}

# Placeholder token the processor repeats for one image, and how many times for a 64x64 image.
IMAGE_TOKENS: dict[str, tuple[str, int]] = {
    "idefics3": ("<image>", 16),
    "smolvlm": ("<image>", 16),
    "qwen2_vl": ("<|image_pad|>", 16),
    "qwen2_5_vl": ("<|image_pad|>", 16),
    "gemma3": ("<image_soft_token>", 16),
    "llava_next": ("<image>", 36),
    "llava": ("<image>", 16),
    "paligemma": ("<image>", 16),
}

TEXT = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 4096,
}
# SigLIP / CLIP style towers (idefics3, smolvlm, gemma3, llava, llava_next).
VISION = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}
SEED = 0

# ---------------------------------------------------------------------------------------------------------- templates
# Every template renders message content given as a string or as a list of {"type": "text"} / {"type": "image"}
# parts (TRL builds the latter for vision prompts); {IMAGE} is replaced by the family's image placeholder.
_CONTENT_MACRO = (
    "{%- macro render(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'image' -%}{{ '{IMAGE}' }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)

# Qwen: ChatML with the default system prompt; tool results go in a user turn, as Qwen2.5's template does.
_QWEN_TEMPLATE = _CONTENT_MACRO.replace("{IMAGE}", "<|vision_start|><|image_pad|><|vision_end|>") + (
    "{%- if messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + render(message['content']) + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + render(message['content']) + '<|im_end|>\\n' }}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# Idefics3 / SmolVLM: "User:<image>text<end_of_utterance>\nAssistant:" (role capitalised, as in SmolVLM's).
_IDEFICS_TEMPLATE = _CONTENT_MACRO.replace("{IMAGE}", "<image>") + (
    "{%- for message in messages -%}"
    "{%- set text = render(message['content']) -%}"
    "{{ message['role'] | capitalize }}{{ ':' if text.startswith('<image>') else ': ' }}"
    "{{ text + '<end_of_utterance>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}"
)

# Gemma3: the system prompt is folded into the first user turn and the assistant is "model", as in Gemma3's.
_GEMMA3_TEMPLATE = _CONTENT_MACRO.replace("{IMAGE}", "<start_of_image>") + (
    "{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{%- set ns.system = render(message['content']) + '\\n\\n' -%}"
    "{%- else -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' + ns.system + render(message['content']) + '<end_of_turn>\\n' }}"
    "{%- set ns.system = '' -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)

# Llava / Llava-Next (llava-1.5 style): "USER: <image>\ntext ASSISTANT:"; a system prompt is a bare first line.
_LLAVA_TEMPLATE = _CONTENT_MACRO.replace("{IMAGE}", "<image>\\n") + (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{ render(message['content']) + '\\n' }}"
    "{%- elif message['role'] == 'assistant' -%}{{ 'ASSISTANT: ' + render(message['content']) + eos_token }}"
    "{%- else -%}{{ message['role'] | upper + ': ' + render(message['content']) + ' ' }}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}"
)


# PaliGemma has no chat template of its own (its processor writes "<image>"s, BOS, the prefix and "\n"): the turns'
# text in order, images first as its processor expects them, a newline before the answer.
_PALIGEMMA_TEMPLATE = _CONTENT_MACRO.replace("{IMAGE}", "<image>") + (
    "{%- for message in messages -%}{{ render(message['content']) }}"
    "{%- if message['role'] == 'assistant' -%}{{ eos_token }}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '\n' }}{%- endif -%}"
)


# ------------------------------------------------------------------------------------------------- missing packages
class ImageOnlyQwen2VLProcessor(transformers.Qwen2VLProcessor):
    """Qwen2-VL's processor without its video processor: what its ``__init__`` sets for images and text, then
    `ProcessorMixin.__init__` with the image processor and the tokenizer only (see `register_image_only_processors`)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token, self.video_token = "<|image_pad|>", "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
        self.video_processor = None


class ImageOnlyQwen2_5_VLProcessor(ImageOnlyQwen2VLProcessor, transformers.Qwen2_5_VLProcessor):
    """Qwen2.5-VL's processor without its video processor (its image path is Qwen2-VL's)."""


class ImageOnlySmolVLMProcessor(transformers.SmolVLMProcessor):
    """SmolVLM's processor without its video processor (see `register_image_only_processors`)."""

    def __init__(self, image_processor=None, tokenizer=None, image_seq_len: int = 169, chat_template=None, **kwargs):
        self.fake_image_token, self.image_token = "<fake_token_around_image>", "<image>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.end_of_utterance_token, self.global_image_token = "<end_of_utterance>", "<global-img>"
        self.image_seq_len, self.video_token = image_seq_len, "<video>"
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
        self.video_processor = None

    def apply_chat_template(self, conversation, chat_template=None, **kwargs):
        # SmolVLM's own reads the video processor's frame defaults first; with images only there are none to read.
        return ProcessorMixin.apply_chat_template(self, conversation, chat_template, **kwargs)


def register_image_only_processors() -> None:
    """Register, through transformers' public ``AutoProcessor.register``, image-only subclasses of the processors
    that take a video processor (Qwen2-VL, Qwen2.5-VL, SmolVLM). transformers 5.19 builds no such processor without
    torchvision, which cannot be installed beside the CPU torch here (the PyPI wheel is a CUDA build); with torchvision
    installed (any GPU machine) none of this is needed. Idempotent; a process that loads such a folder (a trainer, a
    colocated vLLM engine) calls it first. The subclasses change no behaviour for images: the tests that use them
    compare against the families' own outputs."""
    for config, processor in (
        (transformers.Qwen2VLConfig, ImageOnlyQwen2VLProcessor),
        (transformers.Qwen2_5_VLConfig, ImageOnlyQwen2_5_VLProcessor),
        (transformers.SmolVLMConfig, ImageOnlySmolVLMProcessor),
    ):
        transformers.AutoProcessor.register(config, processor, exist_ok=True)


# ------------------------------------------------------------------------------------------------------- the builds
def _tokenizer(special: list[str], named: dict[str, str] | None = None):
    """The embedded SmolLM2 tokenizer with ``special`` added; ``named`` also sets attributes such as
    ``tokenizer.image_token`` that some processors read (saved in tokenizer_config.json)."""
    from hf_grpo.models import load_tokenizer, resolve_model_path

    tok = load_tokenizer(resolve_model_path("smollm2-135m"))
    tok.add_special_tokens({"additional_special_tokens": special})
    if named:
        tok._set_model_specific_special_tokens(special_tokens=named)
    return tok


def _ids(tok) -> dict[str, int]:
    return {"pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}


def _text(tok, **extra) -> dict:
    return {**TEXT, "vocab_size": len(tok), **_ids(tok), **extra}


def _idefics3(family: str):
    size, patch, scale = 64, 8, 2  # 8x8 patches, pixel shuffle 2 -> 16 tokens
    cls = {"idefics3": "Idefics3", "smolvlm": "SmolVLM"}[family]
    special = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
    special += [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]  # used only with image splitting
    tok = _tokenizer(special)
    config = getattr(transformers, cls + "Config")(
        text_config={**_text(tok), "model_type": "llama"},
        vision_config={**VISION, "image_size": size, "patch_size": patch},
        scale_factor=scale,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        **_ids(tok),
    )
    image_processor = getattr(transformers, cls + "ImageProcessorPil")(
        do_image_splitting=False, size={"longest_edge": size}, max_image_size={"longest_edge": size}
    )
    parts = {"image_processor": image_processor, "tokenizer": tok, "image_seq_len": (size // patch) ** 2 // scale**2}
    processor_cls = ImageOnlySmolVLMProcessor if family == "smolvlm" else transformers.Idefics3Processor
    processor = processor_cls(**parts, chat_template=_IDEFICS_TEMPLATE)
    return config, processor


def _qwen(family: str):
    tok = _tokenizer(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"])
    # mrope splits head_dim / 2 = 32 rotary frequencies over (time, height, width); Qwen's own is [16, 24, 24] for 128.
    rope = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [8, 12, 12]}
    ids = {f"{k}_token_id": tok.convert_tokens_to_ids(f"<|{k}|>") for k in ("vision_start", "vision_end")}
    ids |= {"image_token_id": tok.convert_tokens_to_ids("<|image_pad|>")}
    ids |= {"video_token_id": tok.convert_tokens_to_ids("<|video_pad|>")}
    common = {"depth": 2, "num_heads": 2, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
    if family == "qwen2_vl":
        vision = {**common, "embed_dim": 64, "hidden_size": TEXT["hidden_size"], "mlp_ratio": 2}
        config = transformers.Qwen2VLConfig(
            text_config=_text(tok, rope_parameters=rope), vision_config=vision, **ids, **_ids(tok)
        )
        processor_cls = ImageOnlyQwen2VLProcessor
    else:
        vision = {**common, "hidden_size": 64, "intermediate_size": 128, "out_hidden_size": TEXT["hidden_size"]}
        vision |= {"window_size": 56, "fullatt_block_indexes": [1]}
        config = transformers.Qwen2_5_VLConfig(
            text_config=_text(tok, rope_parameters=rope), vision_config=vision, **ids, **_ids(tok)
        )
        processor_cls = ImageOnlyQwen2_5_VLProcessor
    # 64x64 is below min_pixels, so it is scaled up to 112x112: 8x8 patches of 14 px, merged 2x2 -> 16 tokens.
    image_processor = transformers.Qwen2VLImageProcessorPil(min_pixels=112 * 112, max_pixels=224 * 224)
    processor = processor_cls(image_processor=image_processor, tokenizer=tok, chat_template=_QWEN_TEMPLATE)
    return config, processor


def _gemma3(family: str):
    named = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
    tok = _tokenizer([*named.values(), "<start_of_turn>", "<end_of_turn>"], named)
    size, patch, tokens = 64, 8, 16  # 8x8 patches, average-pooled to 4x4 by the projector
    text = _text(tok, query_pre_attn_scalar=TEXT["head_dim"], sliding_window=512)
    text["layer_types"] = ["sliding_attention", "full_attention"]
    config = transformers.Gemma3Config(
        text_config=text,
        vision_config={
            **VISION,
            "image_size": size,
            "patch_size": patch,
            "model_type": "siglip_vision_model",
            "vision_use_head": False,
        },
        mm_tokens_per_image=tokens,
        boi_token_index=tok.convert_tokens_to_ids(named["boi_token"]),
        eoi_token_index=tok.convert_tokens_to_ids(named["eoi_token"]),
        image_token_index=tok.convert_tokens_to_ids(named["image_token"]),
        **_ids(tok),
    )
    image_processor = transformers.Gemma3ImageProcessorPil(size={"height": size, "width": size})
    processor = transformers.Gemma3Processor(
        image_processor=image_processor, tokenizer=tok, image_seq_length=tokens, chat_template=_GEMMA3_TEMPLATE
    )
    return config, processor


def _llava(family: str):
    tok = _tokenizer(["<image>"])
    size, patch = 32, 8  # 4x4 patches + CLS; the "default" strategy drops CLS -> 16 tokens per view
    vision = {
        **VISION,
        "image_size": size,
        "patch_size": patch,
        "projection_dim": 64,
        "model_type": "clip_vision_model",
    }
    common = {
        "text_config": {**_text(tok), "model_type": "llama"},
        "vision_config": vision,
        "image_token_index": tok.convert_tokens_to_ids("<image>"),
        "vision_feature_select_strategy": "default",
        "vision_feature_layer": -1,
        "image_seq_length": (size // patch) ** 2,
        **_ids(tok),
    }
    parts = {"tokenizer": tok, "patch_size": patch, "vision_feature_select_strategy": "default"}
    parts |= {"num_additional_image_tokens": 1, "chat_template": _LLAVA_TEMPLATE}
    image_kwargs = {"size": {"shortest_edge": size}, "crop_size": {"height": size, "width": size}}
    if family == "llava":
        config = transformers.LlavaConfig(**common)
        processor = transformers.LlavaProcessor(
            image_processor=transformers.CLIPImageProcessorPil(**image_kwargs), **parts
        )
        return config, processor
    # A 64x64 image picks the 32x32 grid: one tile (4x4 + a newline per row = 20 tokens) plus the base view (16).
    pinpoints = [[size, size], [size, 2 * size], [2 * size, size]]
    config = transformers.LlavaNextConfig(**common, image_grid_pinpoints=pinpoints)
    image_processor = transformers.LlavaNextImageProcessorPil(**image_kwargs, image_grid_pinpoints=pinpoints)
    return config, transformers.LlavaNextProcessor(image_processor=image_processor, **parts)


def _paligemma(family: str):
    tok = _tokenizer(["<image>"], {"image_token": "<image>"})
    size, patch = 32, 8  # 4x4 patches -> 16 image tokens
    config = transformers.PaliGemmaConfig(
        text_config={**_text(tok), "model_type": "gemma"},
        vision_config={
            **VISION,
            "image_size": size,
            "patch_size": patch,
            "model_type": "siglip_vision_model",
            "projection_dim": TEXT["hidden_size"],
            "vision_use_head": False,  # PaliGemma reads the last hidden state, never the pooled head
        },
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        projection_dim=TEXT["hidden_size"],
        **_ids(tok),
    )
    image_processor = transformers.SiglipImageProcessorPil(size={"height": size, "width": size})
    image_processor.image_seq_length = (size // patch) ** 2  # what PaliGemmaProcessor reads
    processor = transformers.PaliGemmaProcessor(
        image_processor=image_processor, tokenizer=tok, chat_template=_PALIGEMMA_TEMPLATE
    )
    return config, processor


_BUILDERS = {
    "idefics3": _idefics3,
    "smolvlm": _idefics3,
    "qwen2_vl": _qwen,
    "qwen2_5_vl": _qwen,
    "gemma3": _gemma3,
    "llava_next": _llava,
    "llava": _llava,
    "paligemma": _paligemma,
}


def build(family: str, target: str | Path) -> None:
    """Write the tiny ``family`` model and its processor to the folder ``target`` (not atomic: see :func:`tiny_vlm`)."""
    register_image_only_processors()
    config, processor = _BUILDERS[family](family)
    processor.tokenizer.chat_template = processor.chat_template  # so a tokenizer loaded alone renders it too
    torch.manual_seed(SEED)
    model = transformers.AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    if family == "gemma3":  # its projection starts at zero (images have no effect until trained): give it values
        with torch.no_grad():
            model.model.multi_modal_projector.mm_input_projection_weight.normal_(std=0.5)
    tok = processor.tokenizer
    model.generation_config.update(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    model.generation_config.update(bos_token_id=tok.bos_token_id)
    model.save_pretrained(target)
    processor.save_pretrained(target)


def tiny_vlm(family: str, root: str | Path) -> str:
    """The folder ``root/<family>``, built on first use (see :func:`_built_once`)."""
    if family not in _BUILDERS:
        raise ValueError(f"unknown family {family!r}; one of {FAMILIES}")
    register_image_only_processors()  # the caller will load it in this process
    return _built_once(root, family, lambda tmp: build(family, tmp))


def _built_once(root: str | Path, family: str, write) -> str:
    """``root/<family>``, written by ``write(folder)`` on first use. Safe when several processes ask at once: one
    writes into a ``.tmp`` sibling under a file lock and renames it, the others wait and then find it."""
    root = Path(root)
    target = root / family
    if (target / "config.json").is_file():
        return str(target)
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{family}.lock")):
        if not (target / "config.json").is_file():
            tmp = root / f"{family}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)  # a build that crashed
            write(tmp)
            tmp.rename(target)
    return str(target)


# ------------------------------------------------------------------------------------------------------ Qwen3.5 family
# Added for bench/trl_tests.py (TRL's VLM tests use tiny Qwen3.5 and Qwen3.5-MoE models): built like the families
# above, by their own functions (`tiny_qwen3_5`, `register_qwen3_5_processors`). Qwen3.5 mixes gated-delta-net linear
# attention with full attention (2 layers: one of each, as TRL's tiny models); without flash-linear-attention and
# causal-conv1d transformers runs its reference PyTorch kernels. The processor is Qwen3-VL's, image-only like
# Qwen2-VL's above.
QWEN3_5_HUB_IDS: dict[str, str] = {
    _TRL + "Qwen3_5ForConditionalGeneration-NoThink": "qwen3_5",
    _TRL + "Qwen3_5MoeForConditionalGeneration-3.6": "qwen3_5_moe",
}


class ImageOnlyQwen3VLProcessor(transformers.Qwen3VLProcessor):
    """Qwen3-VL's processor (Qwen3.5's) without its video processor: what its ``__init__`` sets for images and text,
    then `ProcessorMixin.__init__` with the image processor and the tokenizer only."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token, self.video_token = "<|image_pad|>", "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
        self.video_processor = None
        self.vision_start_token, self.vision_end_token = "<|vision_start|>", "<|vision_end|>"
        self.vision_start_token_id = tokenizer.convert_tokens_to_ids(self.vision_start_token)
        self.vision_end_token_id = tokenizer.convert_tokens_to_ids(self.vision_end_token)


def register_qwen3_5_processors() -> None:
    """`register_image_only_processors` for Qwen3.5 and Qwen3.5-MoE (their processor takes a video processor)."""
    for config in (transformers.Qwen3_5Config, transformers.Qwen3_5MoeConfig):
        transformers.AutoProcessor.register(config, ImageOnlyQwen3VLProcessor, exist_ok=True)


def _qwen3_5(family: str):
    tok = _tokenizer(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"])
    ids = {f"{k}_token_id": tok.convert_tokens_to_ids(f"<|{k}|>") for k in ("vision_start", "vision_end")}
    ids |= {"image_token_id": tok.convert_tokens_to_ids("<|image_pad|>")}
    ids |= {"video_token_id": tok.convert_tokens_to_ids("<|video_pad|>")}
    # A quarter of head_dim 64 is rotary: 8 frequencies over (time, height, width), interleaved as Qwen3.5's.
    rope = {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25}
    rope |= {"mrope_section": [2, 3, 3], "mrope_interleaved": True}
    text = _text(tok, rope_parameters=rope, layer_types=["linear_attention", "full_attention"])
    text |= {"linear_key_head_dim": 32, "linear_value_head_dim": 32, "linear_num_key_heads": 2}
    text |= {"linear_num_value_heads": 2}
    vision = {"depth": 2, "hidden_size": 64, "num_heads": 2, "intermediate_size": 128}
    vision |= {"out_hidden_size": TEXT["hidden_size"], "patch_size": 16, "num_position_embeddings": 64}
    if family == "qwen3_5_moe":
        text |= {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
        text |= {"shared_expert_intermediate_size": 32}
        config = transformers.Qwen3_5MoeConfig(text_config=text, vision_config=vision, **ids, **_ids(tok))
    else:
        config = transformers.Qwen3_5Config(text_config=text, vision_config=vision, **ids, **_ids(tok))
    # 16 px patches merged 2x2; small images are scaled up to 64x64: 4x4 patches -> 4 tokens.
    image_processor = transformers.Qwen2VLImageProcessorPil(
        patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=64 * 64, max_pixels=128 * 128
    )
    processor = ImageOnlyQwen3VLProcessor(image_processor=image_processor, tokenizer=tok, chat_template=_QWEN_TEMPLATE)
    return config, processor


def tiny_qwen3_5(family: str, root: str | Path) -> str:
    """`tiny_vlm` for ``family`` "qwen3_5" or "qwen3_5_moe": the folder ``root/<family>``, built on first use
    (registers the image-only processor in this process first)."""
    if family not in ("qwen3_5", "qwen3_5_moe"):
        raise ValueError(f"unknown Qwen3.5 family {family!r}; one of {tuple(QWEN3_5_HUB_IDS.values())}")
    register_qwen3_5_processors()

    def write(folder: Path) -> None:
        config, processor = _qwen3_5(family)
        processor.tokenizer.chat_template = processor.chat_template
        torch.manual_seed(SEED)
        model = transformers.AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
        tok = processor.tokenizer
        model.generation_config.update(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        model.generation_config.update(bos_token_id=tok.bos_token_id)
        model.save_pretrained(folder)
        processor.save_pretrained(folder)

    return _built_once(root, family, write)
