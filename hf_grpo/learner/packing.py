"""Sequence packing (padding-free training): several prompt + completion sequences share one row.

A micro-batch's sequences (prompt without left padding, completion without right padding) are placed into rows of at
most ``max_tokens_per_microbatch`` tokens by first-fit decreasing. Position ids restart at 0 for every sequence, and
attention never crosses a sequence boundary:

* ``eager`` / ``sdpa`` (CPU, or GPU without flash kernels): an explicit block-diagonal causal 4D mask
  ``[R, 1, L, L]`` (bool for sdpa, additive float for eager, as transformers' own masks are), built from the position
  ids just before the forward so the round's buffered micro-batches do not hold ``L x L`` masks.
* every other implementation (``flash_attention_2/3``, ``kernels-community/...``, ``flex_attention``): the rows are
  concatenated into a single ``[1, N]`` row without padding and only ``position_ids`` are passed; transformers
  infers the sequence boundaries (``cu_seqlens``) from the restarts at 0, which it only does for a batch of one row.

A sequence longer than the row budget is an error (`first_fit_decreasing`), never truncated or split: its log-probs
would otherwise change. ``GRPOConfig`` refuses a budget below ``max_prompt_length + max_completion_length`` up front.

`completion_index` maps each completion token back to the loss layout: entry ``[b, j]`` is the flat position (in
``input_ids.view(-1)``) of the token whose output predicts completion token ``j`` of sample ``b`` (-1 past its end).
Log-probs are computed at those positions and scattered back into ``[B, C]`` (`unpack`), so the loss code and every
``[B, C]`` tensor (mask, old/ref/sampler log-probs) is the same as in the padded path.

Departures from TRL's ``padding_free``: TRL flattens a whole padded batch into one row (no budget, flash attention
only); here rows are bounded by a token budget, the CPU attention kernels get an exact block mask, and the
micro-batches of an optimizer step are balanced by tokens before packing (see `hf_grpo.learner.batching`).
"""

from __future__ import annotations

import torch

from .microbatch import MicroBatch

# Implementations that receive an explicit 4D mask; all others get position ids alone in a single row.
MASKED_IMPLEMENTATIONS = ("eager", "sdpa")


def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into rows whose lengths sum to at most ``capacity`` (longest first, each into
    the first row with room; ties keep their input order, so the packing is deterministic)."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda k: (-lengths[k], k)):
        n = lengths[i]
        if n > capacity:
            raise ValueError(
                f"sequence {i} has {n} prompt + completion tokens, more than max_tokens_per_microbatch="
                f"{capacity}; raise max_tokens_per_microbatch to at least max_prompt_length + "
                f"max_completion_length"
            )
        for r, free in enumerate(room):
            if n <= free:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(capacity - n)
    return rows


def single_row(attn_implementation: str | None) -> bool:
    """Whether packed inputs must be one ``[1, N]`` row with position ids only (see the module docstring)."""
    return (attn_implementation or "sdpa") not in MASKED_IMPLEMENTATIONS


def pack(
    prompts: list[list[int]],
    completions: list[list[int]],
    capacity: int,
    pad_id: int,
    one_row: bool = False,
    multiple: int | None = None,
) -> dict[str, torch.Tensor | int]:
    """Pack ``prompt + completion`` sequences into rows of at most ``capacity`` tokens.

    Returns ``input_ids`` and ``position_ids`` ``[R, L]`` (rows right-padded to the longest; a padding tail gets
    positions restarting at 0, so it is a separate block that no real token attends to) and ``completion_index``
    ``[B, C]`` with ``C = max(1, longest completion)``. With ``one_row`` the rows are concatenated into ``[1, N]``
    without padding. ``multiple`` (TRL's ``pad_to_multiple_of``): ``L`` is rounded up to a multiple of it (a padding
    tail). ``packed_rows`` counts the budget's rows either way.
    """
    for b, prompt in enumerate(prompts):
        if not prompt:
            raise ValueError(
                f"sample {b} has an empty prompt: its first completion token has no position to be "
                f"predicted from, so it cannot be packed"
            )
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    rows = first_fit_decreasing(lengths, capacity)
    budget_rows = len(rows)
    if one_row:
        rows = [[i for row in rows for i in row]]
    width = max(sum(lengths[i] for i in row) for row in rows)
    if multiple is not None:
        width = -(-width // multiple) * multiple
    C = max(1, max(len(c) for c in completions))
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # [R, L]
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)  # [R, L]
    completion_index = torch.full((len(prompts), C), -1, dtype=torch.long)  # [B, C]
    for r, row in enumerate(rows):
        start = 0
        for b in row:
            n, p = lengths[b], len(prompts[b])
            input_ids[r, start : start + n] = torch.tensor(prompts[b] + list(completions[b]), dtype=torch.long)
            position_ids[r, start : start + n] = torch.arange(n)
            # Completion token j sits at start + p + j and is predicted by the output one position earlier.
            completion_index[b, : n - p] = r * width + start + p - 1 + torch.arange(n - p)
            start += n
        position_ids[r, start:] = torch.arange(width - start)
    return {
        "input_ids": input_ids,
        "position_ids": position_ids,
        "completion_index": completion_index,
        "packed_rows": budget_rows,
    }


def block_causal_mask(position_ids: torch.Tensor, attn_implementation: str | None, dtype: torch.dtype) -> torch.Tensor:
    """``[R, 1, L, L]`` mask letting each token see the earlier tokens of its own sequence only: bool (True = attend)
    for sdpa, additive (0 or the dtype's minimum) for eager, the forms transformers' Llama passes through as given."""
    # A sequence starts wherever the position does not continue the previous one (always a restart at 0 here).
    starts = torch.ones_like(position_ids, dtype=torch.bool)  # [R, L]
    starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    segment = starts.cumsum(-1)  # [R, L]
    L = position_ids.shape[1]
    causal = torch.ones((L, L), dtype=torch.bool, device=position_ids.device).tril()  # [L, L]
    allowed = (segment[:, :, None] == segment[:, None, :]) & causal  # [R, L, L]
    allowed = allowed.unsqueeze(1)  # [R, 1, L, L]
    if attn_implementation == "eager":
        return torch.zeros(allowed.shape, dtype=dtype, device=position_ids.device).masked_fill(
            ~allowed, torch.finfo(dtype).min
        )  # [R, 1, L, L]
    return allowed


def model_inputs(
    batch: MicroBatch, device: torch.device, attn_implementation: str | None, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """What a log-prob pass needs from a micro-batch, on ``device``: padded ``input_ids``/``attention_mask``, or the
    packed ``input_ids``/``position_ids``/``completion_index`` plus (eager/sdpa) the block mask."""
    if not batch.packed:
        inputs = {"input_ids": batch.input_ids.to(device), "attention_mask": batch.attention_mask.to(device)}
        if batch.vision is not None:  # a vision-language micro-batch's tensors (hf_grpo.vision.inputs.collate_vision)
            inputs["vision"] = {k: v.to(device) for k, v in batch.vision.items()}
        return inputs
    inputs = {
        "input_ids": batch.input_ids.to(device),
        "position_ids": batch.position_ids.to(device),
        "completion_index": batch.completion_index.to(device),
    }
    if not single_row(attn_implementation):
        inputs["attention_mask"] = block_causal_mask(inputs["position_ids"], attn_implementation, dtype)
    return inputs


def unpack(values: torch.Tensor, completion_index: torch.Tensor) -> torch.Tensor:
    """Per-token ``values`` ``[N]`` (in the row-major order of ``completion_index >= 0``) into ``[B, C]``, 0 past
    each completion's end. Differentiable in ``values``."""
    valid = completion_index >= 0  # [B, C]
    return values.new_zeros(completion_index.shape).index_put((valid,), values)  # [B, C]


def first_sequence(inputs: dict) -> tuple[dict[str, torch.Tensor], int]:
    """The first sample with completion tokens of packed ``inputs`` as an unpacked ``[1, P + C]`` batch, and its
    completion length (for the start-up check of the chunked log-prob path against the model's own logits)."""
    lengths = (inputs["completion_index"] >= 0).sum(-1)  # [B]
    if not bool((lengths > 0).any()):
        raise ValueError("first_sequence: no packed sample has completion tokens to check")
    b = int((lengths > 0).nonzero()[0])
    completion = int(lengths[b])
    flat = inputs["input_ids"].reshape(-1)  # [R*L]
    end = int(inputs["completion_index"][b, completion - 1]) + 2
    position = inputs["position_ids"].reshape(-1)  # [R*L]
    start = end - 1 - int(position[end - 1])
    ids = flat[start:end].unsqueeze(0)  # [1, P+C]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, completion


def padding_metrics(real_tokens: int, micro: list[MicroBatch], capacity: int | None) -> dict[str, float]:
    """``packing/padding_fraction``: padding share of the model inputs' tokens (either path, so they compare);
    ``packing/packed_ratio`` (packed only): real tokens over the rows' capacity."""
    slots = sum(m.input_ids.numel() for m in micro)
    metrics = {"packing/padding_fraction": 1.0 - real_tokens / max(slots, 1)}
    if capacity is not None:
        rows = sum(m.packed_rows for m in micro)
        metrics["packing/packed_ratio"] = real_tokens / max(rows * capacity, 1)
    return metrics
