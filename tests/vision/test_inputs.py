"""Per-prompt vision tensors (hf_grpo/vision/inputs.py) against each family's own processor and model.

The property the trainer relies on: a micro-batch built by concatenating its rows' own tensors (`collate_vision`,
through the trainer's `collate`) gives every row the log-probs that row gets alone, whatever the rows beside it hold
(images of other sizes, several images, none). And each prompt's ids are what the family's processor gives.
"""

import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from hf_grpo.data import load_prompt_dataset
from hf_grpo.learner.batching import build_samples, collate
from hf_grpo.learner.logprobs import completion_logprobs
from hf_grpo.rollout.collector import RolloutBatch
from hf_grpo.vision.inputs import VisionPrompts, causal_token_type
from tests.helpers.vlm_models import FAMILIES, IMAGE_TOKENS, tiny_vlm


def sampled(prompt_ids: list[list[int]], completions: list[list[int]], media: list) -> RolloutBatch:
    """One finished completion per prompt, unscored: what `build_samples` reads of a rollout."""
    n = len(completions)
    return RolloutBatch(
        rows=[{} for _ in prompt_ids],
        prompt_ids=prompt_ids,
        completion_ids=completions,
        finished=[True] * n,
        completions=[""] * n,
        rewards_per_func=torch.zeros(n, 1),
        rewards=torch.zeros(n),
        overlong=torch.zeros(n),
        media=media,
    )


def noise(size, seed):
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (size[1], size[0], 3), generator=g, dtype=torch.uint8)
    return Image.fromarray(pixels.numpy())


def user(text):
    return [{"role": "user", "content": text}]


def rows_of_every_kind(text_only: bool = True):
    """One image, another size, two images, and a text-only row: what one micro-batch may hold (PaliGemma's
    processor refuses a prompt without an image: ``text_only`` False gives it a fourth image row instead)."""
    last = None if text_only else [noise((48, 48), 4)]
    return load_prompt_dataset(
        [
            {"prompt": user("What colour is it?"), "images": [noise((64, 64), 0)]},
            {"prompt": user("And this one, taller?"), "images": [noise((64, 96), 1)]},
            {"prompt": user("Compare them."), "images": [noise((64, 64), 2), noise((96, 64), 3)]},
            {"prompt": user("No picture here."), "images": last},
        ]
    )


def logprobs(model, batch):
    with torch.no_grad():
        logp, _ = completion_logprobs(
            model,
            model.get_output_embeddings(),
            {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask, "vision": batch.vision},
            batch.completion_mask.shape[1],
        )
    return logp * batch.completion_mask  # [B, C], 0 on padding


@pytest.mark.parametrize("family", FAMILIES)
def test_a_batch_of_mixed_rows_scores_each_row_as_alone(family, vlm_root):
    path = tiny_vlm(family, vlm_root)
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    vision = VisionPrompts(processor, completion_token_type=causal_token_type(model.config))
    text_only = family != "paligemma"
    rows = rows_of_every_kind(text_only)
    prompt_ids, media = vision.encode(rows)

    # Each prompt's ids are the family processor's own for that prompt and its images.
    token, per_image = IMAGE_TOKENS[family]
    image_id = processor.tokenizer.convert_tokens_to_ids(token)
    assert prompt_ids[0].count(image_id) >= per_image and (prompt_ids[3].count(image_id) == 0) == text_only
    assert prompt_ids[2].count(image_id) > prompt_ids[0].count(image_id)
    alone = processor(text=[vision.text(rows[1]["prompt"])], images=[[rows[1]["images"][0]]], return_tensors="pt")
    assert prompt_ids[1] == alone["input_ids"][0].tolist()
    # Lengths: estimated within a few tokens, exact near the limit (what the length filter compares).
    estimates = [vision.prompt_length(row) for row in rows]
    assert all(abs(e - len(ids)) <= 2 for e, ids in zip(estimates, prompt_ids))
    assert [len(ids) for ids in prompt_ids] == [
        vision.prompt_length(row, limit=len(ids)) for row, ids in zip(rows, prompt_ids)
    ]

    completions = [[11, 12, 13, 14, 15], [21, 22], [31, 32, 33], [41, 42, 43, 44]]
    samples = build_samples(sampled(prompt_ids, completions, media), torch.zeros(4), False)  # one completion per prompt
    pad = processor.tokenizer.pad_token_id
    batched = logprobs(model, collate(samples, pad))  # [4, C]
    for row, sample in enumerate(samples):
        single = logprobs(model, collate([sample], pad))  # [1, c]
        c = len(completions[row])
        torch.testing.assert_close(batched[row, :c], single[0, :c], atol=2e-5, rtol=1e-4)
    # The rows' images matter: another image in row 0 changes its log-probs (a batch that dropped them would not).
    other = vision.encode_one(rows[0]["prompt"], [noise((64, 64), 9)])
    swapped = build_samples(sampled([other[0]], completions[:1], [other[1]]), torch.zeros(1), False)
    assert not torch.allclose(logprobs(model, collate(swapped, pad))[0, :5], batched[0, :5])


@pytest.mark.parametrize("family", ["gemma3", "paligemma"])  # the families whose token_type_ids shape the mask
def test_a_completion_token_never_sees_a_later_one(family, vlm_root):
    """Completions are causal in every family: a completion token's log-prob does not change when a later completion
    token does. PaliGemma's prefix (image and prompt) is bidirectional, marked 0 in ``token_type_ids``, and its
    generated suffix causal, marked 1; padding the completion with 0 (as TRL 1.16 does) let each completion position
    attend to the ones after it. Gemma 3 marks its image tokens (bidirectional) 1 and text 0."""
    path = tiny_vlm(family, vlm_root)
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).train()  # the loss pass's mode
    for module in model.modules():  # train mode for the masks some families build only in training; no dropout
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    vision = VisionPrompts(processor, completion_token_type=causal_token_type(model.config))
    row = rows_of_every_kind(text_only=False)[0]  # the prompt with its image part, as the data loader writes it
    ids, media = vision.encode_one(row["prompt"], row["images"])
    pad = processor.tokenizer.pad_token_id
    first, second = [11, 12, 13, 14, 15], [11, 12, 13, 14, 99]
    batch = collate(build_samples(sampled([ids, ids], [first, second], [media, media]), torch.zeros(2), False), pad)
    logp = logprobs(model, batch)  # [2, 5]
    torch.testing.assert_close(logp[0, :4], logp[1, :4], atol=1e-6, rtol=0)
    assert not torch.allclose(logp[0, 4], logp[1, 4])  # the changed token's own log-prob does change
