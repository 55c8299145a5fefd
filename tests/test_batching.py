"""`split_microbatches`: samples are planned per optimizer step, and skipping zero-advantage samples never moves a
sample to another step or changes what a step's loss is normalised by."""

import pytest
import torch

from hf_grpo.batching import split_microbatches


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
