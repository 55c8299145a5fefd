"""From a scored rollout to padded training micro-batches.

Each micro-batch is padded only to its own longest prompt and completion, not to the longest of the whole
generation round, so short micro-batches cost less compute (the round's samples are shuffled first, which also
decorrelates micro-batches from prompt groups).
"""

from __future__ import annotations

import torch

from .algorithms import truncated_completion_mask


def build_samples(prompt_ids: list[list[int]], completion_ids: list[list[int]], finished: list[bool],
                  advantages: torch.Tensor, num_generations: int, mask_truncated: bool,
                  sampling_logprobs: list[list[float]] | None = None) -> list[dict]:
    """One dict per completion: its prompt ids, completion ids, loss mask, advantage and (from vLLM) the sampler's
    log-probs of its tokens."""
    samples = []
    for i, completion in enumerate(completion_ids):
        mask = torch.ones(len(completion))                                       # [C_i]
        if mask_truncated:
            mask = truncated_completion_mask(torch.tensor([finished[i]]), mask.unsqueeze(0))[0]
        sample = {"prompt_ids": prompt_ids[i // num_generations], "completion_ids": completion,
                  "completion_mask": mask, "advantage": float(advantages[i]), "index": i}
        if sampling_logprobs is not None:
            if len(sampling_logprobs[i]) != len(completion):
                raise ValueError(f"completion {i}: {len(sampling_logprobs[i])} sampling log-probs for "
                                 f"{len(completion)} tokens")
            sample["sampling_logp"] = sampling_logprobs[i]
        samples.append(sample)
    return samples


def collate(samples: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-pad prompts and right-pad completions into ``[B, P + C]`` model inputs."""
    P = max(len(s["prompt_ids"]) for s in samples)
    C = max(1, max(len(s["completion_ids"]) for s in samples))
    B = len(samples)
    input_ids = torch.full((B, P + C), pad_id, dtype=torch.long)                # [B, P+C]
    attention_mask = torch.zeros((B, P + C), dtype=torch.long)                  # [B, P+C]
    completion_mask = torch.zeros((B, C), dtype=torch.float32)                  # [B, C]
    for row, s in enumerate(samples):
        p, c = s["prompt_ids"], s["completion_ids"]
        input_ids[row, P - len(p):P] = torch.tensor(p, dtype=torch.long)
        attention_mask[row, P - len(p):P] = 1
        if c:
            input_ids[row, P:P + len(c)] = torch.tensor(c, dtype=torch.long)
            attention_mask[row, P:P + len(c)] = 1
            completion_mask[row, :len(c)] = s["completion_mask"]
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "completion_mask": completion_mask,
             "advantages": torch.tensor([s["advantage"] for s in samples], dtype=torch.float32),      # [B]
             "index": torch.tensor([s["index"] for s in samples], dtype=torch.long)}                 # [B]
    if "sampling_logp" in samples[0]:
        sampling_logp = torch.zeros((B, C), dtype=torch.float32)                # [B, C], 0 on padding
        for row, s in enumerate(samples):
            sampling_logp[row, :len(s["sampling_logp"])] = torch.tensor(s["sampling_logp"], dtype=torch.float32)
        batch["sampling_logp"] = sampling_logp
    return batch


def split_microbatches(samples: list[dict], num_micro: int, micro_per_step: int,
                       generator: torch.Generator | None = None,
                       skip_zero_advantage: bool = False) -> tuple[list[list[dict]], list[float], int]:
    """Shuffle (if a generator is given) and split into ``num_micro`` micro-batches, ``micro_per_step`` per optimizer
    step.

    The shuffled samples are first assigned to optimizer steps in equal contiguous blocks; loss normalisers count the
    tokens of exactly those samples. With ``skip_zero_advantage`` a step's samples whose advantage is exactly 0 are
    then left out of its micro-batches (the caller guarantees they have zero gradient) and the rest are spread evenly
    over the step's micro-batches; each micro-batch keeps at least one sample so each still runs a forward and
    backward (DDP and gradient accumulation expect one per micro-step). Skipping therefore never moves a sample to
    another step, and never changes a normaliser.

    Returns the micro-batches, the active (loss-mask) tokens of each optimizer step's samples, skipped ones included,
    and how many samples were left out.
    """
    if len(samples) % num_micro or num_micro % micro_per_step:
        raise ValueError(f"{len(samples)} samples do not split into {num_micro} equal micro-batches of "
                         f"{micro_per_step} per optimizer step")
    order = torch.randperm(len(samples), generator=generator).tolist() if generator is not None else range(len(samples))
    shuffled = [samples[i] for i in order]
    per_step = len(samples) // num_micro * micro_per_step
    micro: list[list[dict]] = []
    step_tokens: list[float] = []
    for start in range(0, len(shuffled), per_step):
        step = shuffled[start:start + per_step]
        step_tokens.append(float(sum(float(s["completion_mask"].sum()) for s in step)))
        if not skip_zero_advantage:
            size = per_step // micro_per_step
            micro += [step[k * size:(k + 1) * size] for k in range(micro_per_step)]
            continue
        active = [s for s in step if s["advantage"] != 0.0]
        idle = [s for s in step if s["advantage"] == 0.0]
        parts = [active[k::micro_per_step] for k in range(micro_per_step)]
        for part in parts:
            if not part:
                part.append(idle.pop())
        micro += parts
    kept = sum(len(m) for m in micro)
    return micro, step_tokens, len(samples) - kept
