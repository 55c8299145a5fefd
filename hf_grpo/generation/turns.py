"""Turn-level access to a generation backend: submit one rollout's next turn, collect turns as they finish.

Each backend gives its own with `Generator.turns` (the agent loop, `hf_grpo.agents`, never asks which backend it has):

* `EngineTurns` (colocated vLLM; in `hf_grpo.generation.vllm_colocate`, next to the engine it drives): requests go
  straight into the in-process engine (``LLMEngine.add_request``) and the loop calls ``step()``; a rollout whose turn
  finishes is handed back at once while the others keep decoding, and its next turn joins the running batch as soon
  as its tools return. No batch-wide barrier between turns.
* `ServerTurns` (``vllm serve``): one ``/v1/completions`` request per turn on a thread pool; a rollout always goes to
  the same server (sticky routing: its earlier turns are in that server's prefix cache).
* `BatchedTurns` (HF ``generate``, and any `Generator` that decodes whole batches): the pending turns of all rollouts
  are generated together in waves, since ``generate`` decodes a fixed batch. Each wave asks for the largest remaining
  budget and cuts every turn to its own budget. Under ZeRO-3/FSDP, where each forward is a collective, every process
  must run the same number of waves: the processes agree once per wave whether anyone still has turns to generate,
  and a process with none joins with an empty wave (`hf_grpo.generation.hf`). This is the only cross-process step in
  a multi-turn round, and only there; the vLLM backends have none.

Every backend returns `Turn` records ``(key, token_ids, finished, logprobs, versions)``; ``finished`` is False when
the turn hit its ``max_tokens``; ``versions`` labels each token with the weight version that sampled it (vLLM
backends: the engine's own labels, which differ within a turn when a weight update lands while it decodes; partial
rollouts, `hf_grpo.rollout.pipeline`). Partial-rollout rounds use the same streams, one request per completion.

A vision-language policy's turn comes with its context's media (`hf_grpo.agents.media.RolloutMedia.snapshot`: the
images so far, prompt's and tools', and their vision tensors). HF ``generate`` gets the context's vision tensors; a
vLLM engine (colocated or served) gets the context's ids *before* image expansion with all its images, expands them
itself, and the ids it expanded must be the trainer's context, or the run stops naming the rollout (the trainer would
score other sequences than were sampled).
"""

from __future__ import annotations

import contextlib
import dataclasses
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from .base import GenerationResult, Generator, SamplingParams, Turn


class ServerTurns:
    streaming = True

    def __init__(self, generator, max_in_flight: int = 64):
        self.generator = generator
        self.pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="hf_grpo-turn")
        self._pending: dict[Future, int] = {}

    def session(self):
        return contextlib.nullcontext()

    def submit(self, key: int, prompt_ids: list[int], sampling: SamplingParams, media=None) -> None:
        self._pending[self.pool.submit(self.generator.complete_turn, prompt_ids, sampling, key, media)] = key

    def busy(self) -> bool:
        return bool(self._pending)

    def poll(self, timeout: float) -> list[Turn]:
        if not self._pending:
            return []
        done, _ = wait(list(self._pending), timeout=timeout, return_when=FIRST_COMPLETED)
        out = []
        for future in done:
            key = self._pending.pop(future)
            result: GenerationResult = future.result()  # server errors propagate: they name the URL
            out.append(
                Turn(
                    key,
                    result.completion_ids[0],
                    result.finished[0],
                    result.logprobs[0] if result.logprobs is not None else None,
                    result.versions[0] if result.versions is not None else None,
                )
            )
        return out

    def finish(self) -> None:
        self.pool.shutdown(wait=False)


class BatchedTurns:
    streaming = False

    def __init__(self, generator: Generator, any_rank=None):
        self.generator = generator
        self.any_rank = any_rank  # set for lock-step backends (ZeRO-3/FSDP HF generate), else None
        self._pending: list[tuple[int, list[int], SamplingParams, object]] = []  # (key, ids, sampling, media)

    def session(self):
        return contextlib.nullcontext()

    def submit(self, key: int, prompt_ids: list[int], sampling: SamplingParams, media=None) -> None:
        self._pending.append((key, prompt_ids, sampling, media))

    def busy(self) -> bool:
        return bool(self._pending)

    def more(self) -> bool:
        """Is another wave needed? Lock-step: on any process (the one collective of a multi-turn round)."""
        if self.any_rank is not None:
            return self.any_rank(bool(self._pending))
        return bool(self._pending)

    def poll(self, timeout: float) -> list[Turn]:
        """One wave: every pending turn in one ``generate`` call (lock-step: an empty call if this process has none)."""
        pending, self._pending = self._pending, []
        if not pending:
            if self.any_rank is not None:
                self.generator.generate([], 1, SamplingParams(max_tokens=1))
            return []
        budget = max(s.max_tokens for _, _, s, _ in pending)
        media = [m for *_, m in pending]  # a vision-language policy's: each context's images and tensors
        result = self.generator.generate(
            [p for _, p, _, _ in pending],
            1,
            dataclasses.replace(pending[0][2], max_tokens=budget),
            **({"media": media} if any(m is not None for m in media) else {}),
        )
        out = []
        for i, (key, _, own, _) in enumerate(pending):
            ids, done = result.completion_ids[i], result.finished[i]
            logprobs = result.logprobs[i] if result.logprobs else None
            if len(ids) > own.max_tokens:  # the wave's budget was larger than this turn's
                ids, done = ids[: own.max_tokens], False
                logprobs = logprobs[: own.max_tokens] if logprobs else logprobs
            out.append(Turn(key, ids, done, logprobs))
        return out

    def finish(self) -> None:
        pass
