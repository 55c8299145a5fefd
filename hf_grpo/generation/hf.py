"""Generation with transformers' ``generate`` on the training processes.

It reads the live policy, so it never needs a weight sync. Prompts are left-padded and generated in chunks of at
most ``chunk_size`` sequences (prompts x n) to bound KV-cache memory. Under DeepSpeed ZeRO-3 the parameters are
gathered once per call instead of once per decoding step per layer.
"""

from __future__ import annotations

import contextlib

import torch

from .base import GenerationResult, Generator, SamplingParams
from .weights import is_zero3


class HFGenerator(Generator):
    def __init__(self, accelerator, model, tokenizer, chunk_size: int = 64):
        self.accelerator = accelerator
        self.model = model            # the wrapped model the trainer holds; unwrapped per call
        self.tokenizer = tokenizer
        self.chunk_size = chunk_size

    def _gathered(self, unwrapped):
        if is_zero3(self.accelerator):
            import deepspeed
            return deepspeed.zero.GatheredParameters(list(unwrapped.parameters()))
        return contextlib.nullcontext()

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> GenerationResult:
        unwrapped = self.accelerator.unwrap_model(self.model)
        was_training = unwrapped.training
        unwrapped.eval()      # no dropout while sampling; the trainer's loss pass runs in train mode
        completions, finished = [], []
        prompts_per_chunk = max(1, self.chunk_size // n)
        try:
            with self._gathered(unwrapped):
                for start in range(0, len(prompt_ids), prompts_per_chunk):
                    chunk = prompt_ids[start:start + prompts_per_chunk]
                    ids, done = self._generate_chunk(unwrapped, chunk, n, sampling)
                    completions += ids
                    finished += done
        finally:
            unwrapped.train(was_training)
        return GenerationResult(completion_ids=completions, finished=finished)

    def _generate_chunk(self, model, prompts: list[list[int]], n: int, sampling: SamplingParams):
        pad_id = self.tokenizer.pad_token_id
        eos_id = self.tokenizer.eos_token_id
        width = max(len(p) for p in prompts)
        device = next(model.parameters()).device
        input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)   # [p, P]
        attention_mask = torch.zeros_like(input_ids)                                            # [p, P]
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids):] = torch.tensor(ids, device=device)
            attention_mask[row, width - len(ids):] = 1
        kwargs = dict(max_new_tokens=sampling.max_tokens, num_return_sequences=n, pad_token_id=pad_id,
                      eos_token_id=eos_id, use_cache=True)
        if sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                          top_k=sampling.top_k or None, min_p=sampling.min_p or None,
                          repetition_penalty=sampling.repetition_penalty)
        if sampling.stop:
            kwargs.update(stop_strings=list(sampling.stop), tokenizer=self.tokenizer)
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)   # [p*n, P + C]
        generated = out[:, width:].tolist()
        ids_out, finished = [], []
        for row in generated:
            if eos_id in row:
                row = row[:row.index(eos_id) + 1]          # keep the EOS: the policy must learn to stop
                done = True
            else:
                # Rows stopped by a stop string are right-padded; strip the padding.
                while row and row[-1] == pad_id:
                    row = row[:-1]
                done = len(row) < sampling.max_tokens
            ids_out.append(row)
            finished.append(done)
        return ids_out, finished
