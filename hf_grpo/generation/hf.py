"""Generation with transformers' ``generate`` on the training processes.

It reads the live policy, so it never needs a weight sync. Prompts are left-padded and, as in TRL, all of a process's
sequences (prompts x n) go through one ``generate`` call: decoding a small model is bound by kernel launches, not
arithmetic, so two calls of 64 sequences take nearly twice as long as one of 128 (docs/benchmarks.md). ``chunk_size``
caps the sequences per call when KV-cache memory requires it. Gradient checkpointing is switched off while
generating (with it, ``generate`` cannot use its KV cache).

Under DeepSpeed ZeRO-3 and FSDP every forward pass gathers parameters from the other ranks, so all ranks must run
the same number of forward passes although their prompts finish at different steps (or they have different numbers
of prompts, e.g. in a dynamic-sampling refill): each ``generate`` call runs with ``synced_gpus`` (a rank that is done
keeps stepping until all are), and every rank makes the same number of calls, a rank out of prompts generating a
one-token dummy. Under ZeRO-3 the parameters are also gathered once per call instead of once per step per layer,
unless TRL's ``ds3_gather_for_generation`` is false: then each layer is gathered when its forward runs (ZeRO-3's own
hooks), for a model whose whole weights do not fit on one device. TRL's ``cache_implementation`` (e.g. ``static``)
is passed to ``generate``.
"""

from __future__ import annotations

import contextlib

import torch

from ..runtime.distributed import forward_is_collective, is_zero3, max_over_ranks
from ..vision.inputs import collate_vision
from .base import GenerationResult, Generator, SamplingParams
from .turns import BatchedTurns


class HFGenerator(Generator):
    supports_images = True

    def __init__(
        self,
        accelerator,
        model,
        tokenizer,
        chunk_size: int | None = None,
        checkpointing_kwargs: dict | None = None,
        cache_implementation: str | None = None,
        gather_for_generation: bool = True,
    ):
        self.accelerator = accelerator
        self.model = model  # the wrapped model the trainer holds; unwrapped per call
        self.tokenizer = tokenizer
        self.chunk_size = chunk_size
        self.checkpointing_kwargs = checkpointing_kwargs  # to switch gradient checkpointing back on as it was
        self.cache_implementation = cache_implementation  # TRL's: e.g. "static"; None keeps generate's default
        self.gather_for_generation = gather_for_generation  # TRL's ds3_gather_for_generation

    @classmethod
    def from_config(cls, args, accelerator, model, tokenizer, model_path: str) -> HFGenerator:
        return cls(
            accelerator,
            model,
            tokenizer,
            args.generation_chunk_size,
            args.gradient_checkpointing_kwargs,
            args.cache_implementation,
            args.ds3_gather_for_generation,
        )

    @contextlib.contextmanager
    def _generation_mode(self, unwrapped):
        was_training = unwrapped.training
        checkpointing = unwrapped.is_gradient_checkpointing
        unwrapped.eval()  # no dropout while sampling; the trainer's loss pass runs in train mode
        if checkpointing:
            unwrapped.gradient_checkpointing_disable()
        gather = contextlib.nullcontext()
        if is_zero3(self.accelerator) and self.gather_for_generation:
            import deepspeed

            gather = deepspeed.zero.GatheredParameters(list(unwrapped.parameters()))
        try:
            with gather:
                yield
        finally:
            if checkpointing:
                unwrapped.gradient_checkpointing_enable(gradient_checkpointing_kwargs=self.checkpointing_kwargs)
            unwrapped.train(was_training)

    def turns(self, lockstep_any_rank=None):
        """The pending turns of all rollouts generated together in waves (``generate`` decodes a fixed batch); under
        ZeRO-3/FSDP every process runs the same number of waves (`hf_grpo.generation.turns.BatchedTurns`)."""
        return BatchedTurns(self, lockstep_any_rank)

    @torch.no_grad()
    def describe(self) -> str:
        return "transformers generate"

    def generate(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, media: list | None = None
    ) -> GenerationResult:
        if sampling.greedy and n > 1:  # generate refuses greedy with num_return_sequences > 1: n copies of one
            return self.generate(prompt_ids, 1, sampling, media).repeat_each(n)
        if media is not None and n > 1:
            # generate's own expansion repeats every tensor along dim 0, which for flat per-image tensors (Qwen2-VL's
            # patches, several images per prompt) repeats images, not prompts: repeat the prompts instead.
            prompt_ids = [ids for ids in prompt_ids for _ in range(n)]
            media, n = [m for m in media for _ in range(n)], 1
        unwrapped = self.accelerator.unwrap_model(self.model)
        prompts_per_chunk = max(1, self.chunk_size // n) if self.chunk_size else max(1, len(prompt_ids))
        starts = range(0, len(prompt_ids), prompts_per_chunk)
        chunks = [prompt_ids[i : i + prompts_per_chunk] for i in starts]
        media_chunks = [None if media is None else media[i : i + prompts_per_chunk] for i in starts]
        lockstep = forward_is_collective(self.accelerator, unwrapped)
        calls = max_over_ranks(self.accelerator, len(chunks)) if lockstep else len(chunks)
        completions, finished = [], []
        with self._generation_mode(unwrapped):
            for k in range(calls):
                if k < len(chunks):
                    ids, done = self._generate_chunk(unwrapped, chunks[k], n, sampling, lockstep, media_chunks[k])
                    completions += ids
                    finished += done
                else:  # out of prompts: a dummy call keeps this rank's forward passes in step with the others
                    self._generate_chunk(unwrapped, [[self.tokenizer.eos_token_id]], 1, sampling, lockstep)
        return GenerationResult(completion_ids=completions, finished=finished)

    def _generate_chunk(
        self, model, prompts: list[list[int]], n: int, sampling: SamplingParams, synced: bool, media=None
    ):
        pad_id = self.tokenizer.pad_token_id
        eos_ids = stop_token_ids(model, self.tokenizer)
        width = max(len(p) for p in prompts)
        device = next(model.parameters()).device
        input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)  # [p, P]
        attention_mask = torch.zeros_like(input_ids)  # [p, P]
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, device=device)
            attention_mask[row, width - len(ids) :] = 1
        vision = {}
        if media is not None:
            lengths = [len(p) for p in prompts]
            vision = {k: v.to(device) for k, v in collate_vision(media, lengths, width, 0).items()}
        kwargs = dict(
            **vision,
            max_new_tokens=sampling.max_tokens,
            num_return_sequences=n,
            pad_token_id=pad_id,
            eos_token_id=eos_ids,
            use_cache=True,
            synced_gpus=synced,
        )
        if self.cache_implementation is not None:
            kwargs.update(cache_implementation=self.cache_implementation)
        kwargs.update(sampling.transformers_kwargs())
        if sampling.stop:
            kwargs.update(stop_strings=list(sampling.stop), tokenizer=self.tokenizer)
        kwargs.update(sampling.extra)  # TRL's generation_kwargs for generate (hf_grpo.generation.kwargs)
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)  # [p*n, P + C]
        generated = out[:, width:].tolist()
        ids_out, finished = [], []
        for row in generated:
            stop = next((i for i, t in enumerate(row) if t in eos_ids), None)
            if stop is not None:
                row = row[: stop + 1]  # keep the EOS: the policy must learn to stop
                done = True
            else:
                # Rows stopped by a stop string are right-padded; strip the padding.
                while row and row[-1] == pad_id:
                    row = row[:-1]
                done = len(row) < sampling.max_tokens
            ids_out.append(row)
            finished.append(done)
        return ids_out, finished


def stop_token_ids(model, tokenizer) -> list[int]:
    """The tokens generation stops on: the tokenizer's EOS and every id in the model's ``generation_config``
    (vLLM stops on the same set). Tool-calling families stop a call turn on its own token (GPT-OSS ``<|call|>``,
    GLM ``<|observation|>``, Gemma 4 ``<|tool_response>``), listed there beside the answer's EOS."""
    ids = [tokenizer.eos_token_id]
    config = model.generation_config
    extra = config.eos_token_id if config is not None else None
    ids += extra if isinstance(extra, list) else [extra]
    return list(dict.fromkeys(i for i in ids if i is not None))
