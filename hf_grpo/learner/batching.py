"""From a scored rollout to padded or packed training micro-batches.

Each micro-batch is padded only to its own longest prompt and completion (rounded up to TRL's ``pad_to_multiple_of``
when set: prompt and completion lengths each, or a packed row's length), not to the longest of the whole generation
round, so short micro-batches cost less compute (the round's samples are shuffled first, which also decorrelates
micro-batches from prompt groups). With packing (``max_tokens_per_microbatch``) an optimizer step's samples are
instead split into its ``gradient_accumulation_steps`` micro-batches by token count (`balance_by_tokens`) and each
micro-batch is packed into rows of at most that many tokens (`hf_grpo.learner.packing`). The number of micro-batches per
optimizer step stays fixed because `transformers.Trainer` accumulates a fixed number of them per step; the token
budget bounds each row, not the number of rows in a micro-batch.

When ``steps_per_generation`` is not a multiple of ``gradient_accumulation_steps`` (TRL accepts it), a round ends
inside an optimizer step, whose other micro-batches come from a round not generated yet. Such a step's token count is
then unknown, and the micro-batches of a round share one normaliser instead: the round's tokens per micro-batch
(`normalizer_group`). With equal-length rounds it equals the exact per-step count used otherwise.
"""

from __future__ import annotations

import torch

from ..algorithms import Normalizers, truncated_completion_mask
from ..rollout.collector import RolloutBatch
from ..vision.inputs import collate_vision
from .microbatch import MicroBatch
from .packing import pack, padding_metrics


def build_samples(batch: RolloutBatch, advantages: torch.Tensor, mask_truncated: bool) -> list[dict]:
    """One dict per completion of ``batch`` (``P`` prompts, ``P*G`` completions, group-major): its prompt ids,
    completion ids, loss mask, advantage (``advantages``: ``[P*G]``), (from vLLM) the sampler's log-probs of its
    tokens and (vision-language policies) its `PromptMedia`: ``batch.media`` has one per prompt, or one per completion
    (multi-turn rollouts, whose tool turns add images of their own; `hf_grpo.agents.media`).

    Multi-turn rollouts (`hf_grpo.agents`) carry ``completion_mask`` (0 on tool and environment tokens): it multiplies
    the loss mask, so those tokens are out of the loss, the KL, the entropy, the token normalisers and the importance
    ratios, all of which read the loss mask. ``completion_prompt_ids`` gives each completion its own prompt.
    ``mask_truncated``: TRL's ``mask_truncated_completions``.
    """
    completion_ids, media, sampling_logprobs = batch.completion_ids, batch.media, batch.sampling_logprobs
    num_generations = len(completion_ids) // len(batch.prompt_ids)
    samples = []
    for i, completion in enumerate(completion_ids):
        mask = torch.ones(len(completion))  # [C_i]
        if batch.completion_mask is not None:
            if len(batch.completion_mask[i]) != len(completion):
                raise ValueError(
                    f"completion {i}: a mask of {len(batch.completion_mask[i])} entries for {len(completion)} tokens"
                )
            mask = torch.tensor(batch.completion_mask[i], dtype=torch.float32)  # [C_i] 1 sampled, 0 tool
        if mask_truncated:
            mask = truncated_completion_mask(torch.tensor([batch.finished[i]]), mask.unsqueeze(0))[0]
        own_prompt = batch.completion_prompt_ids
        prompt = own_prompt[i] if own_prompt is not None else batch.prompt_ids[i // num_generations]
        sample = {
            "prompt_ids": prompt,
            "completion_ids": completion,
            "completion_mask": mask,
            "advantage": float(advantages[i]),
            "index": i,
        }
        if sampling_logprobs is not None:
            if len(sampling_logprobs[i]) != len(completion):
                raise ValueError(
                    f"completion {i}: {len(sampling_logprobs[i])} sampling log-probs for {len(completion)} tokens"
                )
            sample["sampling_logp"] = sampling_logprobs[i]
        if media is not None:
            sample["media"] = media[i] if len(media) == len(completion_ids) else media[i // num_generations]
        samples.append(sample)
    return samples


def round_up(length: int, multiple: int | None) -> int:
    return length if multiple is None else -(-length // multiple) * multiple


def collate(samples: list[dict], pad_id: int, multiple: int | None = None) -> MicroBatch:
    """Left-pad prompts and right-pad completions into ``[B, P + C]`` model inputs; ``multiple``: P and C are rounded
    up to a multiple of it (TRL's ``pad_to_multiple_of``)."""
    P = round_up(max(len(s["prompt_ids"]) for s in samples), multiple)
    C = round_up(max(1, max(len(s["completion_ids"]) for s in samples)), multiple)
    B = len(samples)
    input_ids = torch.full((B, P + C), pad_id, dtype=torch.long)  # [B, P+C]
    attention_mask = torch.zeros((B, P + C), dtype=torch.long)  # [B, P+C]
    for row, s in enumerate(samples):
        p, c = s["prompt_ids"], s["completion_ids"]
        input_ids[row, P - len(p) : P] = torch.tensor(p, dtype=torch.long)
        attention_mask[row, P - len(p) : P] = 1
        if c:
            input_ids[row, P : P + len(c)] = torch.tensor(c, dtype=torch.long)
            attention_mask[row, P : P + len(c)] = 1
    vision = None
    if "media" in samples[0]:  # vision-language rows: their tensors, concatenated (hf_grpo.vision.inputs)
        vision = collate_vision([s["media"] for s in samples], [len(s["prompt_ids"]) for s in samples], P, C)
    return MicroBatch(input_ids, attention_mask, **completion_fields(samples, C), vision=vision)


def collate_packed(
    samples: list[dict], pad_id: int, max_tokens: int, one_row: bool, multiple: int | None = None
) -> MicroBatch:
    """Packed model inputs (`hf_grpo.learner.packing.pack`, rows ``multiple``-padded) with `collate`'s ``[B, C]`` loss
    fields."""
    if "media" in samples[0]:  # the trainer refuses packing for vision-language models at init; a backstop
        raise ValueError("packing (max_tokens_per_microbatch) does not carry vision tensors")
    packed = pack(
        [s["prompt_ids"] for s in samples],
        [s["completion_ids"] for s in samples],
        max_tokens,
        pad_id,
        one_row,
        multiple,
    )
    return MicroBatch(
        packed["input_ids"],
        None,
        **completion_fields(samples),
        position_ids=packed["position_ids"],
        completion_index=packed["completion_index"],
        packed_rows=packed["packed_rows"],
    )


def completion_fields(samples: list[dict], C: int | None = None) -> dict[str, torch.Tensor]:
    """The loss's per-sample tensors, in the order of ``samples``: completion mask (and sampler log-probs) ``[B, C]``
    (``C``: the longest completion unless given), advantages and indices ``[B]``."""
    C = C or max(1, max(len(s["completion_ids"]) for s in samples))
    B = len(samples)
    completion_mask = torch.zeros((B, C), dtype=torch.float32)  # [B, C]
    for row, s in enumerate(samples):
        completion_mask[row, : len(s["completion_ids"])] = s["completion_mask"]
    fields = {
        "completion_mask": completion_mask,
        "advantages": torch.tensor([s["advantage"] for s in samples], dtype=torch.float32),  # [B]
        "index": torch.tensor([s["index"] for s in samples], dtype=torch.long),  # [B]
    }
    if "sampling_logp" in samples[0]:
        sampling_logp = torch.zeros((B, C), dtype=torch.float32)  # [B, C], 0 on padding
        for row, s in enumerate(samples):
            sampling_logp[row, : len(s["sampling_logp"])] = torch.tensor(s["sampling_logp"], dtype=torch.float32)
        fields["sampling_logp"] = sampling_logp
    return fields


def balance_by_tokens(samples: list[dict], parts: int) -> list[list[dict]]:
    """Split into ``parts`` groups of near-equal prompt + completion tokens (longest first, each to the lightest
    group; ties go to the lowest group, so the split is deterministic). Every group gets a sample when there are at
    least ``parts`` of them."""
    groups: list[list[dict]] = [[] for _ in range(parts)]
    load = [0] * parts
    for s in sorted(samples, key=lambda s: -(len(s["prompt_ids"]) + len(s["completion_ids"]))):
        k = min(range(parts), key=lambda g: (load[g], len(groups[g]), g))
        groups[k].append(s)
        load[k] += len(s["prompt_ids"]) + len(s["completion_ids"])
    return groups


def normalizer_group(steps_per_generation: int, accumulation_steps: int) -> int:
    """How many consecutive micro-batches of a round share a loss normaliser: an optimizer step's when rounds end on
    step boundaries, else the whole round's (the module docstring)."""
    if steps_per_generation % accumulation_steps == 0:
        return accumulation_steps
    return steps_per_generation


def split_microbatches(
    samples: list[dict],
    num_micro: int,
    micro_per_step: int,
    generator: torch.Generator | None = None,
    skip_zero_advantage: bool = False,
    balance_tokens: bool = False,
) -> tuple[list[list[dict]], list[float], int]:
    """Shuffle (if a generator is given) and split into ``num_micro`` micro-batches, ``micro_per_step`` per optimizer
    step.

    The shuffled samples are first assigned to optimizer steps in equal contiguous blocks; loss normalisers count the
    tokens of exactly those samples. With ``skip_zero_advantage`` a step's samples whose advantage is exactly 0 are
    then left out of its micro-batches (the caller guarantees they have zero gradient) and the rest are spread evenly
    over the step's micro-batches; each micro-batch keeps at least one sample so each still runs a forward and
    backward (DDP and gradient accumulation expect one per micro-step). Skipping therefore never moves a sample to
    another step, and never changes a normaliser. With ``balance_tokens`` a step's (kept) samples are spread over its
    micro-batches by token count instead of by number (packing); the step's samples, and so its normalisers, are the
    same either way.

    Returns the micro-batches, the active (loss-mask) tokens of each optimizer step's samples, skipped ones included,
    and how many samples were left out.
    """
    if len(samples) % num_micro or num_micro % micro_per_step:
        raise ValueError(
            f"{len(samples)} samples do not split into {num_micro} equal micro-batches of "
            f"{micro_per_step} per optimizer step"
        )
    order = torch.randperm(len(samples), generator=generator).tolist() if generator is not None else range(len(samples))
    shuffled = [samples[i] for i in order]
    per_step = len(samples) // num_micro * micro_per_step
    micro: list[list[dict]] = []
    step_tokens: list[float] = []
    for start in range(0, len(shuffled), per_step):
        step = shuffled[start : start + per_step]
        step_tokens.append(float(sum(float(s["completion_mask"].sum()) for s in step)))
        if not skip_zero_advantage:
            size = per_step // micro_per_step
            micro += (
                balance_by_tokens(step, micro_per_step)
                if balance_tokens
                else [step[k * size : (k + 1) * size] for k in range(micro_per_step)]
            )
            continue
        active = [s for s in step if s["advantage"] != 0.0]
        idle = [s for s in step if s["advantage"] == 0.0]
        parts = (
            balance_by_tokens(active, micro_per_step)
            if balance_tokens
            else [active[k::micro_per_step] for k in range(micro_per_step)]
        )
        for part in parts:
            if not part:
                part.append(idle.pop())
        micro += parts
    kept = sum(len(m) for m in micro)
    return micro, step_tokens, len(samples) - kept


def collate_microbatches(
    parts: list[list[dict]], pad_id: int, max_tokens: int | None, one_row: bool, multiple: int | None = None
) -> tuple[list[MicroBatch], dict[str, float]]:
    """Padded micro-batches (``max_tokens`` None) or packed ones, lengths rounded up to ``multiple`` when set, and
    their padding metrics (`hf_grpo.learner.packing.padding_metrics`)."""
    if max_tokens is None:
        micro = [collate(m, pad_id, multiple) for m in parts]
    else:
        micro = [collate_packed(m, pad_id, max_tokens, one_row, multiple) for m in parts]
    real = sum(len(s["prompt_ids"]) + len(s["completion_ids"]) for m in parts for s in m)
    return micro, padding_metrics(real, micro, max_tokens)


def step_normalizers(
    count: int, step_tokens: list[float], num_samples: int, group: int, accelerator
) -> list[Normalizers]:
    """Loss denominators of a round's ``count`` micro-batches, from the samples planned for each optimizer step
    (each ``group`` of micro-batches, see `normalizer_group`), skipped ones included (see `split_microbatches`).

    ``dapo``: that optimizer step's active tokens over all processes, scaled by (accumulation steps x processes)
    because Trainer divides by the former and DDP/DeepSpeed/FSDP average the latter (per group of micro-batches:
    the group's tokens x accumulation steps / group size, the same thing). ``grpo``/``dr_grpo``: the configured
    micro-batch size. ``bnpo``: this process's active tokens of the step per micro-batch (the local token mean,
    independent of how the step's samples were split into micro-batches).
    """
    world = accelerator.num_processes
    local = torch.tensor(step_tokens, dtype=torch.float64)  # [steps in the round]
    total = local
    if world > 1:
        total = accelerator.reduce(local.to(accelerator.device), reduction="sum").cpu()
    return [
        Normalizers(
            num_sequences=num_samples // count,
            num_tokens=float(local[k // group]) / group,
            token_normalizer=max(float(total[k // group]), 1.0) / (group * world),
        )
        for k in range(count)
    ]
