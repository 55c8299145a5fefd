"""An Idefics3 (SmolVLM-shaped) vision-language policy built offline around the embedded SmolLM2-135M-Instruct.

No pretrained vision model is available offline, so :func:`build_embedded_vlm` assembles one from what is:

* **pretrained**: the language model. Every tensor of SmolLM2-135M-Instruct (SmolVLM's own text backbone) is copied
  into ``model.text_model``; on a text-only prompt the VLM's logits equal SmolLM2's. The tokenizer is SmolLM2's,
  with the special tokens ``Idefics3Processor`` uses appended; their new embedding rows are the mean of the old rows
  (a neutral start that does not shift the output distribution), and ``lm_head`` stays tied to the embeddings, as
  in SmolLM2.
* **random** (``torch.manual_seed(0)``): the vision tower (a tiny SigLIP-style encoder, sizes below) and the
  connector (pixel shuffle + one linear projection). The connector's projection is rescaled so that image-token
  embeddings have the RMS of SmolLM2's text embeddings: at transformers' default init they are ~10x larger, and
  16 such tokens in the prompt pull the language model off its chat behaviour before any training.

It is a demo policy: what it learns about pixels it learns from the RL reward alone. Departures from SmolVLM: no
image splitting (one 64x64 image is one global view, ``IMAGE_TOKENS`` tokens), a tiny random vision tower instead of
SigLIP-B/16 at 512 px, and a chat template in SmolLM2's own format (``<|im_start|>role ... <|im_end|>``, SmolLM2's
default system prompt included) rather than SmolVLM's ``User:``/``Assistant:`` turns ending in
``<end_of_utterance>``, because that is the format the pretrained language model knows.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3ImageProcessorPil,
    Idefics3Processor,
    LlamaForCausalLM,
)

# The vision tower. Patches of 8 px on a 64 px image give an 8x8 grid; pixel shuffle with scale factor 2 (SmolVLM
# uses 4 at 512 px) folds each 2x2 block into one token, so one image is 16 tokens in the language model.
VISION_IMAGE_SIZE = 64
VISION_PATCH_SIZE = 8
VISION_HIDDEN_SIZE = 256
VISION_INTERMEDIATE_SIZE = 1024
VISION_LAYERS = 3
VISION_HEADS = 4
SCALE_FACTOR = 2
IMAGE_TOKENS = (VISION_IMAGE_SIZE // VISION_PATCH_SIZE) ** 2 // SCALE_FACTOR**2
SEED = 0

# What Idefics3Processor inserts around each image: <fake_token_around_image><global-img><image>*16<fake_...>.
# The row/column tags are only used with image splitting (off here); they are added so that switching it on works.
IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = ["<fake_token_around_image>", IMAGE_TOKEN, "<end_of_utterance>", "<global-img>"] + [
    f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)
]

SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# SmolLM2's template, extended to content given as a list of {"type": "text"} / {"type": "image"} parts (the form
# TRL builds for vision prompts); an image part renders as <image>, which the processor expands.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\n" + SYSTEM_PROMPT + "<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{ '" + IMAGE_TOKEN + "' }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def build_embedded_vlm(target: Path, text_model: str | Path) -> None:
    """Write an Idefics3 model, processor and chat template to the folder ``target`` (which must not exist or be empty),
    around the SmolLM2-135M-Instruct safetensors folder ``text_model``; loadable with ``AutoModelForImageTextToText``
    / ``AutoProcessor``. Deterministic: the random parts use ``torch.manual_seed(0)``. Written to a sibling ``.tmp``
    folder first, then renamed, so a crash leaves no half-written model at ``target``. Takes a few seconds on CPU."""
    target = Path(target)
    source = Path(text_model)
    tokenizer = AutoTokenizer.from_pretrained(source)
    text_lm = LlamaForCausalLM.from_pretrained(source, dtype=torch.float32)
    old_vocab = text_lm.config.vocab_size
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    tokenizer.chat_template = CHAT_TEMPLATE

    text_config = text_lm.config.to_dict()
    text_config["vocab_size"] = len(tokenizer)
    text_config["tie_word_embeddings"] = True
    text_config.pop("architectures", None)
    text_config.pop("_name_or_path", None)
    text_config.pop("_model_name_or_path", None)
    text_config.pop("quantization_config", None)
    config = Idefics3Config(
        text_config=text_config,
        vision_config={
            "hidden_size": VISION_HIDDEN_SIZE,
            "intermediate_size": VISION_INTERMEDIATE_SIZE,
            "num_hidden_layers": VISION_LAYERS,
            "num_attention_heads": VISION_HEADS,
            "image_size": VISION_IMAGE_SIZE,
            "patch_size": VISION_PATCH_SIZE,
        },
        scale_factor=SCALE_FACTOR,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(SEED)
    model = Idefics3ForConditionalGeneration(config).to(torch.float32).eval()

    with torch.no_grad():
        text_state = {k.removeprefix("model."): v for k, v in text_lm.state_dict().items() if k.startswith("model.")}
        old_embed = text_state.pop("embed_tokens.weight")
        missing, unexpected = model.model.text_model.load_state_dict(text_state, strict=False)
        if missing != ["embed_tokens.weight"] or unexpected:
            raise RuntimeError(f"SmolLM2 -> Idefics3 text model: missing {missing}, unexpected {unexpected}")
        embed = model.get_input_embeddings().weight
        embed[:old_vocab] = old_embed
        embed[old_vocab:] = old_embed.mean(dim=0)
        model.tie_weights()
        if model.lm_head.weight.data_ptr() != embed.data_ptr():
            raise RuntimeError("lm_head is not tied to the input embeddings")
        _match_text_embedding_rms(model, old_embed)

    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": VISION_IMAGE_SIZE},
        max_image_size={"longest_edge": VISION_IMAGE_SIZE},
    )
    processor = Idefics3Processor(
        image_processor=image_processor, tokenizer=tokenizer, image_seq_len=IMAGE_TOKENS, chat_template=CHAT_TEMPLATE
    )

    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # a previous build that crashed
    model.save_pretrained(tmp, safe_serialization=True)
    processor.save_pretrained(tmp)
    (tmp / "embedded_vlm.json").write_text(
        json.dumps({"text_model": "SmolLM2-135M-Instruct", "vision_tower": "random", "seed": SEED}, indent=2) + "\n"
    )
    tmp.rename(target)


def _match_text_embedding_rms(model: Idefics3ForConditionalGeneration, text_embed: torch.Tensor) -> None:
    """Scale the connector's projection so that image tokens from a typical input have the per-entry RMS of the text
    embeddings. The vision tower ends in a LayerNorm, so its outputs (and therefore this ratio) hardly depend on the
    image; a random image stands in for the data."""
    pixels = torch.rand(4, 1, 3, VISION_IMAGE_SIZE, VISION_IMAGE_SIZE) * 2 - 1  # normalised range [-1, 1]
    image_embeds = model.model.get_image_features(pixel_values=pixels).pooler_output
    scale = text_embed.pow(2).mean().sqrt() / image_embeds.pow(2).mean().sqrt()
    model.model.connector.modality_projection.proj.weight.mul_(scale)
