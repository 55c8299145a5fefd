"""`split_microbatches`: samples are planned per optimizer step, and skipping zero-advantage samples never moves a
sample to another step or changes what a step's loss is normalised by."""

import pytest
import torch

from hf_grpo.learner.batching import split_microbatches


def sample(i: int, tokens: int, advantage: float) -> dict:
    return {"index": i, "completion_mask": torch.ones(tokens), "advantage": advantage}


SAMPLES = [sample(i, tokens=i + 1, advantage=0.0 if i % 3 == 0 else 1.0) for i in range(12)]


@pytest.mark.parametrize("skip", [False, True])
def test_each_step_is_normalised_by_exactly_its_own_samples(skip):
    # 12 samples, 4 micro-batches, 2 per optimizer step: steps hold samples 0-5 and 6-11 (no shuffle).
    micro, step_tokens, skipped = split_microbatches(SAMPLES, 4, 2, skip_zero_advantage=skip)
    assert step_tokens == [sum(range(1, 7)), sum(range(7, 13))]
    steps = [{s["index"] for m in micro[0:2] for s in m}, {s["index"] for m in micro[2:4] for s in m}]
    assert steps[0] <= set(range(6)) and steps[1] <= set(range(6, 12))
    if skip:
        kept = {i for i in range(12) if i % 3} | {s["index"] for m in micro for s in m if s["advantage"] == 0.0}
        assert steps[0] | steps[1] == kept and skipped == 12 - len(kept) > 0
    else:
        assert steps[0] | steps[1] == set(range(12)) and skipped == 0


def test_skipping_keeps_one_sample_per_micro_batch_and_balances_the_rest():
    samples = [sample(i, 3, 0.0) for i in range(7)] + [sample(7, 3, 1.0)]
    micro, step_tokens, skipped = split_microbatches(samples, 2, 2, skip_zero_advantage=True)
    assert [len(m) for m in micro] == [1, 1] and step_tokens == [24.0] and skipped == 6
    assert any(s["advantage"] == 1.0 for m in micro for s in m)


def test_shuffle_is_seeded_and_a_bad_split_is_refused():
    a = split_microbatches(SAMPLES, 4, 2, torch.Generator().manual_seed(3))[0]
    b = split_microbatches(SAMPLES, 4, 2, torch.Generator().manual_seed(3))[0]
    assert [[s["index"] for s in m] for m in a] == [[s["index"] for s in m] for m in b]
    with pytest.raises(ValueError, match="micro-batches"):
        split_microbatches(SAMPLES, 5, 1)


def padded_sample(prompt: int, completion: int, i: int = 0) -> dict:
    return {
        "prompt_ids": list(range(1, prompt + 1)),
        "completion_ids": list(range(10, 10 + completion)),
        "completion_mask": torch.ones(completion),
        "advantage": 1.0,
        "index": i,
    }


def test_pad_to_multiple_of_pads_prompt_and_completion_lengths():
    from hf_grpo.learner.batching import collate

    samples = [padded_sample(3, 5), padded_sample(6, 2, 1)]
    plain = collate(samples, pad_id=0)
    padded = collate(samples, pad_id=0, multiple=4)
    assert plain.input_ids.shape == (2, 6 + 5)
    assert padded.input_ids.shape == (2, 8 + 8) and padded.completion_mask.shape == (2, 8)
    # The same tokens, shifted by the extra left padding of the prompt; masks count only real tokens.
    assert padded.attention_mask.sum() == plain.attention_mask.sum() == 3 + 5 + 6 + 2
    assert padded.input_ids[0, 8:13].tolist() == list(range(10, 15)) and padded.input_ids[0, 13:].eq(0).all()
    assert padded.input_ids[1, 2:8].tolist() == list(range(1, 7))
    assert padded.completion_mask.sum(1).tolist() == [5.0, 2.0]
    assert collate(samples, pad_id=0, multiple=1).input_ids.shape == plain.input_ids.shape


def test_pad_to_multiple_of_pads_packed_rows():
    from hf_grpo.learner.batching import collate_packed

    samples = [padded_sample(3, 5), padded_sample(6, 2, 1)]
    plain = collate_packed(samples, pad_id=0, max_tokens=32, one_row=False)
    padded = collate_packed(samples, pad_id=0, max_tokens=32, one_row=False, multiple=8)
    assert plain.input_ids.shape == (1, 16) and padded.input_ids.shape == (1, 16)
    padded = collate_packed(samples, pad_id=0, max_tokens=32, one_row=False, multiple=12)
    assert padded.input_ids.shape == (1, 24)
    # Completion tokens are found at the same places (the tail is padding).
    flat = padded.input_ids.view(-1)
    assert flat[padded.completion_index[0]].tolist() == [3, 10, 11, 12, 13]  # predicted from the previous token


@pytest.mark.parametrize("value, expected", [("auto", None), (None, None), ("none", None), ("16", 16), (8, 8)])
def test_pad_to_multiple_of_values(value, expected):
    from hf_grpo.trl_compat.config import resolve_pad_to_multiple_of

    assert resolve_pad_to_multiple_of(value) == expected


@pytest.mark.parametrize("value", [0, -2, "x", 2.5, True])
def test_pad_to_multiple_of_bad_values_name_the_field(value):
    from hf_grpo.trl_compat.config import resolve_pad_to_multiple_of

    with pytest.raises(ValueError, match="pad_to_multiple_of=.* must be an integer >= 1"):
        resolve_pad_to_multiple_of(value)


def test_rounds_ending_inside_a_step_share_the_rounds_normaliser():
    from hf_grpo.learner.batching import normalizer_group, step_normalizers

    class OneProcess:
        num_processes = 1

    assert [normalizer_group(spg, 2) for spg in (2, 4, 1, 3)] == [2, 2, 1, 3]
    assert normalizer_group(4, 3) == 4  # TRL's test_prepare_input_called_with_correct_data
    # spg 3, GA 2: the round's 3 micro-batches form one group; each is normalised by the round's tokens per
    # micro-batch times the 2 accumulation steps Trainer divides by, i.e. by (round tokens x 2 / 3) / 2.
    parts, step_tokens, _ = split_microbatches(SAMPLES, 3, normalizer_group(3, 2))
    normalizers = step_normalizers(len(parts), step_tokens, len(SAMPLES), normalizer_group(3, 2), OneProcess())
    assert step_tokens == [sum(range(1, 13))]
    assert [n.token_normalizer for n in normalizers] == pytest.approx([78 / 3] * 3)
    assert [n.num_tokens for n in normalizers] == pytest.approx([78 / 3] * 3)
