"""Generation with transformers' continuous batching (``model.generate_batch``, a paged KV cache): TRL's
``use_transformers_continuous_batching`` (``use_transformers_paged`` is its deprecated name).

Like the HF backend it reads the live policy (no weight sync) and switches dropout and gradient checkpointing off while
sampling. Every prompt is a request with ``n`` forked children that share its prompt's cache blocks, and finished
requests free their blocks for queued ones instead of padding until the longest is done.

Departures from TRL:

* The KV cache is sized to the call's workload on a machine without an accelerator. transformers sizes it from free
  *device* memory and, with no device, from host memory: about 20 GiB on a 24 GiB machine, and a tiny model's first
  call then took 41 s instead of 0.6 s. On an accelerator TRL's default (``max_memory_percent`` 0.5) is kept.
  ``transformers_continuous_batching_config`` overrides both.
* transformers drops the logits processors continuous batching does not support (``repetition_penalty``) with only
  a warning, and has no stop strings: the config refuses both (`check_config`) instead of sampling from a different
  distribution than the one asked for.
* A request that fails is only logged by ``generate_batch``, which then returns fewer outputs; here it is an error.
* Sampling is seeded from torch's generator, so a run seeded with ``seed`` samples the same completions again.
* The sampler's log-probs are not returned (as in TRL): the trainer recomputes them, as for the HF backend.
* Under DeepSpeed ZeRO-3 or FSDP every forward pass is a collective and the ranks' continuous-batching schedules
  differ, so this backend is refused there (use ``hf``, which runs in lockstep, or ``vllm``).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..errors import InputError
from ..runtime.distributed import forward_is_collective
from .base import GenerationResult, SamplingParams
from .hf import HFGenerator

ACCELERATOR_MEMORY_PERCENT = 0.5  # TRL's training-aware default: the backward pass needs the rest


def cb_config_fields() -> set[str]:
    from transformers.generation import ContinuousBatchingConfig

    return {f.name for f in dataclasses.fields(ContinuousBatchingConfig) if f.init}


def check_config(args) -> None:
    """The sampling settings continuous batching cannot honour, and unknown config keys: errors naming the field."""
    if args.stop:
        raise InputError(
            f"GRPOConfig (checked by {__name__}): "
            f"stop={args.stop!r}: transformers' continuous batching has no stop strings; "
            f"use generation_backend: hf or vllm"
        )
    if args.repetition_penalty != 1.0:
        raise InputError(
            f"GRPOConfig (checked by {__name__}): "
            f"repetition_penalty={args.repetition_penalty}: transformers' continuous "
            f"batching drops that logits processor; use generation_backend: hf or vllm"
        )
    unknown = sorted(set(args.transformers_continuous_batching_config or {}) - cb_config_fields())
    if unknown:
        raise InputError(
            f"GRPOConfig (checked by {__name__}): "
            f"transformers_continuous_batching_config has unknown keys {unknown}; they are "
            f"transformers.generation.ContinuousBatchingConfig's fields: {sorted(cb_config_fields())}"
        )


def workload_cache(prompt_ids: list[list[int]], n: int, max_tokens: int, page_size: int) -> dict:
    """A cache holding every request of one call at full length (no preemption), and a prefill of every prompt in
    one forward pass. The ``n`` children of a prompt are counted as separate requests (block sharing may need less)."""
    blocks = sum(n * math.ceil((len(p) + max_tokens) / page_size) for p in prompt_ids)
    prefill = sum(len(p) for p in prompt_ids) * n
    return dict(num_blocks=blocks + 1, max_batch_tokens=max(prefill, len(prompt_ids) * n, page_size))


class ContinuousBatchingGenerator(HFGenerator):
    # transformers' continuous batching takes token ids only: no pixel_values per request.
    supports_images = False

    @classmethod
    def from_config(cls, args, accelerator, model, tokenizer, model_path: str) -> ContinuousBatchingGenerator:
        return cls(
            accelerator,
            model,
            tokenizer,
            args.transformers_continuous_batching_config,
            args.gradient_checkpointing_kwargs,
        )

    def __init__(
        self, accelerator, model, tokenizer, cb_config: dict | None = None, checkpointing_kwargs: dict | None = None
    ):
        super().__init__(accelerator, model, tokenizer, None, checkpointing_kwargs)
        self.cb_config = dict(cb_config or {})
        fields = cb_config_fields()
        unknown = sorted(set(self.cb_config) - fields)
        if unknown:
            raise InputError(
                f"transformers_continuous_batching_config has unknown keys {unknown}; expected "
                f"ContinuousBatchingConfig fields: {sorted(fields)}"
            )

    def _cb_config(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, device: torch.device):
        from transformers.generation import ContinuousBatchingConfig

        kwargs = dict(self.cb_config)
        kwargs.setdefault("page_size", 64 if device.type == "cpu" else 256)
        if device.type == "cpu":
            sized = workload_cache(prompt_ids, n, sampling.max_tokens, kwargs["page_size"])
            if "max_memory_percent" not in kwargs:
                for key, value in sized.items():
                    kwargs.setdefault(key, value)
        else:
            kwargs.setdefault("max_memory_percent", ACCELERATOR_MEMORY_PERCENT)
        # Drawn from torch's generator: reproducible under the trainer's seed, different at every call.
        kwargs.setdefault("seed", int(torch.randint(0, 2**31 - 1, ()).item()))
        return ContinuousBatchingConfig(**kwargs)  # a new one per call: the manager writes its sizes into it

    def _generation_config(self, n: int, sampling: SamplingParams):
        from transformers import GenerationConfig

        return GenerationConfig(
            max_new_tokens=sampling.max_tokens,
            num_return_sequences=n,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            **sampling.transformers_kwargs(),  # repetition_penalty is 1.0 here: other values are refused above
        )

    @torch.no_grad()
    def describe(self) -> str:
        return "transformers continuous batching"

    def generate(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, media: list | None = None
    ) -> GenerationResult:
        if sampling.stop or sampling.repetition_penalty != 1.0:
            raise InputError(
                "transformers' continuous batching supports neither stop strings nor "
                "repetition_penalty; use generation_backend: hf or vllm"
            )
        if sampling.greedy and n > 1:
            return self.generate(prompt_ids, 1, sampling).repeat_each(n)
        if not prompt_ids:
            return GenerationResult(completion_ids=[], finished=[])
        unwrapped = self.accelerator.unwrap_model(self.model)
        if forward_is_collective(self.accelerator, unwrapped):
            raise InputError(
                "generation_backend hf_continuous cannot run under DeepSpeed ZeRO-3 or FSDP (each "
                "rank's schedule differs, and their forward passes are collectives); use hf or vllm"
            )
        device = next(unwrapped.parameters()).device
        with self._generation_mode(unwrapped):
            outputs = unwrapped.generate_batch(
                [list(p) for p in prompt_ids],
                generation_config=self._generation_config(n, sampling),
                continuous_batching_config=self._cb_config(prompt_ids, n, sampling, device),
                progress_bar=False,
            )
        return self._collect(list(outputs.values()), prompt_ids, n, sampling.max_tokens)

    def _collect(self, outputs: list, prompt_ids: list[list[int]], n: int, max_tokens: int) -> GenerationResult:
        failed = [(o.request_id, o.error) for o in outputs if o.error is not None]
        if failed or len(outputs) != len(prompt_ids) * n:
            raise RuntimeError(
                f"transformers' continuous batching returned {len(outputs) - len(failed)} of "
                f"{len(prompt_ids) * n} completions; failed requests: {failed[:3]} (see the "
                f"transformers log above)"
            )
        eos_id = self.tokenizer.eos_token_id
        completions, finished = [], []
        for i, out in enumerate(outputs):  # group-major: a prompt's forked children, then the prompt itself
            if list(out.prompt_ids) != list(prompt_ids[i // n]):
                raise RuntimeError(f"continuous batching returned request {out.request_id} out of order")
            row = list(out.generated_tokens)
            if eos_id in row:
                row = row[: row.index(eos_id) + 1]  # keep the EOS: the policy must learn to stop
            completions.append(row)
            finished.append((bool(row) and row[-1] == eos_id) or len(row) < max_tokens)
        return GenerationResult(completion_ids=completions, finished=finished)
