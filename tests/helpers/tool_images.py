"""A tool that returns an image, image rows that call it, and tiny vision-language policies whose turns end on their
family's end-of-turn token: shared by the tests of tools returning images (tests/agents/test_vision_tools.py) and the
one that runs them against a real `vllm serve` (tests/generation/test_vllm_server_vlm.py, whose server loads the same
policy).

The tool returns ``[{"type": "image", "image": <PIL>}, {"type": "text", "text": ...}]``, as in TRL's
``test_train_with_tools_multimodal_response``.
"""

import shutil
from pathlib import Path

import torch
from datasets import Dataset
from PIL import Image
from transformers import AutoProcessor, GenerationConfig

from tests.helpers.vlm_models import tiny_vlm

# The token each family's template ends an assistant turn with: a tool-call turn must stop on it. SmolVLM's and
# Idefics3's own tokenizers end on <end_of_utterance>, Gemma 3's generation config stops on <end_of_turn>; the tiny
# builds keep SmolLM2's <|im_end|> (`policy` makes a copy that stops on the family's token).
STOP = {"idefics3": "<end_of_utterance>", "qwen2_vl": "<|im_end|>", "gemma3": "<end_of_turn>"}
# What a turn starts with after the generation prompt: Idefics3's template writes "Assistant:" and renders an
# assistant message as "Assistant: " + content, so its model answers after a space.
LEAD = {"idefics3": " ", "qwen2_vl": "", "gemma3": ""}
CALL = '<tool_call>{"name": "screenshot", "arguments": {}}</tool_call>'
# The call as a regex (vllm_structured_outputs_regex) for Idefics3, with its leading space: the engine writes it.
IDEFICS3_CALL_REGEX = LEAD["idefics3"] + CALL.replace("{", r"\{").replace("}", r"\}")
ANSWER = "The answer is 42."
SHOWN = "Here is the screenshot"


def noise(seed, size=(64, 64)):
    g = torch.Generator().manual_seed(seed)
    return Image.fromarray(torch.randint(0, 256, (size[1], size[0], 3), generator=g, dtype=torch.uint8).numpy())


SCREEN = noise(7)


def screenshot() -> list:
    """
    Takes a screenshot and returns it.

    Returns:
        A list of content blocks with the screenshot image.
    """
    return [{"type": "image", "image": SCREEN}, {"type": "text", "text": SHOWN}]


def length_reward(completions, **kwargs):
    return [float(len(c[-1]["content"])) for c in completions]


def policy(family: str, root) -> str:
    """The tiny ``family`` model whose turns end on `STOP` (a copy with that EOS when the tiny build has another)."""
    path = tiny_vlm(family, root)
    processor = AutoProcessor.from_pretrained(path)
    if processor.tokenizer.eos_token == STOP[family]:
        return path
    target = Path(root) / f"{family}-stop"
    if not (target / "config.json").is_file():
        shutil.copytree(path, target)
        processor.tokenizer.eos_token = STOP[family]
        processor.save_pretrained(target)
        generation = GenerationConfig.from_pretrained(target)
        generation.eos_token_id = processor.tokenizer.convert_tokens_to_ids(STOP[family])
        generation.save_pretrained(target)
    return str(target)


def rows(family: str, n: int = 2) -> Dataset:
    """Image rows; even rows call the screenshot tool once (the scripted policy's ``calls=``/``call=``), odd rows
    answer at once: half the rollouts call, as in TRL's test."""
    return Dataset.from_list(
        [
            {
                "prompt": [
                    {"role": "user", "content": f"What changed? calls={1 - i % 2}\ncall={LEAD[family]}{CALL}\n"}
                ],
                "image": noise(i),
            }
            for i in range(n)
        ]
    )
