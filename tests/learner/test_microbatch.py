"""The micro-batch record (hf_grpo.learner.microbatch): built once, completed once for its round, never changed in
place, and saved into a checkpoint that ``torch.load(weights_only=True)`` reads back."""

import dataclasses

import pytest
import torch

from hf_grpo.algorithms import Normalizers
from hf_grpo.learner.batching import collate, collate_packed
from hf_grpo.learner.microbatch import MicroBatch, OldAndReference, PTXRows


def samples() -> list[dict]:
    """Two completions of 2 and 3 tokens with their sampler log-probs, as `build_samples` makes them."""
    rows = [([5, 6, 7], [8, 9], 0.5), ([5], [10, 11, 12], -0.5)]
    return [
        {"prompt_ids": p, "completion_ids": c, "completion_mask": torch.ones(len(c)), "advantage": a, "index": i}
        | {"sampling_logp": [-0.1 * (k + 1) for k in range(len(c))]}
        for i, (p, c, a) in enumerate(rows)
    ]


def test_collate_builds_the_record_with_its_shapes():
    padded = collate(samples(), pad_id=0)
    assert padded.input_ids.shape == (2, 3 + 3) and padded.attention_mask.shape == (2, 6)
    assert padded.completion_length == 3 and not padded.packed
    torch.testing.assert_close(padded.sampling_logp, torch.tensor([[-0.1, -0.2, 0.0], [-0.1, -0.2, -0.3]]))
    assert padded.old_logp is None and padded.ptx is None and padded.normalizers == Normalizers()
    packed = collate_packed(samples(), 0, 16, one_row=False)
    assert packed.packed and packed.attention_mask is None and packed.packed_rows == 1
    assert packed.completion_index.shape == (2, 3) and packed.position_ids.shape == packed.input_ids.shape
    with pytest.raises(dataclasses.FrozenInstanceError):
        padded.temperature = 0.5


def test_for_round_adds_the_rounds_values_and_leaves_the_collated_record_alone():
    base = collate(samples(), pad_id=0)
    old = torch.full((2, 3), -1.0)
    ptx = PTXRows(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long), 3.0)
    done = base.for_round(0.7, OldAndReference(old_logp=old), Normalizers(2, 2.5, 5.0), ptx)
    assert done.temperature == 0.7 and done.old_logp is old and done.ref_logp is None
    # The scoring pass decides which sampler log-probs the loss sees (None: they became the old policy's).
    assert done.sampling_logp is None and base.sampling_logp is not None
    assert done.normalizers.token_normalizer == 5.0 and done.ptx is ptx
    assert base.temperature == 1.0 and base.old_logp is None and torch.equal(done.input_ids, base.input_ids)


def test_the_checkpoint_state_loads_with_weights_only(tmp_path):
    ptx = PTXRows(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long), 3.0)
    scores = OldAndReference(torch.zeros(2, 3), torch.ones(2, 3), None)
    micro = [
        collate(samples(), 0).for_round(0.9, scores, Normalizers(2, 2.5, torch.tensor(5.0)), ptx),
        collate_packed(samples(), 0, 16, one_row=False).for_round(1.0, OldAndReference(), Normalizers(), None),
    ]
    torch.save([m.state() for m in micro], tmp_path / "state.pt")
    loaded = [MicroBatch.from_state(s) for s in torch.load(tmp_path / "state.pt", weights_only=True)]
    for a, b in zip(micro, loaded):
        for field in dataclasses.fields(MicroBatch):
            x, y = getattr(a, field.name), getattr(b, field.name)
            if isinstance(x, torch.Tensor):
                assert torch.equal(x, y), field.name
            elif field.name == "ptx" and x is not None:
                assert torch.equal(x.input_ids, y.input_ids) and x.normalizer == y.normalizer
            else:
                assert x == y, field.name


def test_a_checkpoint_of_flat_dicts_still_resumes():
    """Checkpoints written before the record held one flat dict per micro-batch (normalisers and PTX rows among its
    keys): they load into the same record."""
    done = collate(samples(), 0).for_round(
        0.9,
        OldAndReference(torch.zeros(2, 3), None, None),
        Normalizers(2, 2.5, 5.0),
        PTXRows(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long), 3.0),
    )
    flat = {k: v for k, v in done.state().items() if v is not None and k not in ("normalizers", "ptx", "packed_rows")}
    flat |= {"token_normalizer": 5.0, "num_sequences": 2, "num_tokens": 2.5}
    flat |= {"ptx_input_ids": done.ptx.input_ids, "ptx_attention_mask": done.ptx.attention_mask, "ptx_normalizer": 3.0}
    loaded = MicroBatch.from_state(flat)
    assert loaded.normalizers == done.normalizers and loaded.ptx.normalizer == 3.0 and loaded.ref_logp is None
    assert torch.equal(loaded.old_logp, done.old_logp) and loaded.temperature == 0.9 and loaded.sampling_logp is None
    packed = collate_packed(samples(), 0, 16, one_row=False)
    flat = {k: v for k, v in packed.state().items() if v is not None and k not in ("normalizers", "ptx")}
    flat |= {"packed_rows": torch.tensor(1), "token_normalizer": 1.0, "num_sequences": 2, "num_tokens": 5.0}
    loaded = MicroBatch.from_state(flat)
    assert loaded.packed and loaded.attention_mask is None and loaded.packed_rows == 1
