"""Turns of a colocated engine (`hf_grpo.generation.turns`): one rollout's next turn, or one partial-rollout
completion, at a time, straight into the in-process engine."""

from __future__ import annotations

import itertools

from .base import SamplingParams, Turn, span_versions
from .vllm_requests import check_expanded_prompts, engine_sampling_params, version_labels


class EngineTurns:
    """Turns of the colocated engine (`hf_grpo.generation.turns`): requests go straight into the in-process engine
    (``LLMEngine.add_request``) and the loop calls ``step()``; a rollout whose turn finishes is handed back at once
    while the others keep decoding, and its next turn joins the running batch as soon as its tools return."""

    streaming = True

    def __init__(self, generator):
        self.generator = generator
        self.engine = generator.llm.llm_engine
        self.tag = f"hf_grpo-turns{next(generator._owners)}"
        self._keys: dict[str, int] = {}
        self._expanded: dict[str, list[int]] = {}  # request -> the trainer's context, for requests with images
        self._ids = itertools.count()

    def session(self):
        return self.generator.engine_session()

    def submit(self, key: int, prompt_ids: list[int], sampling: SamplingParams, media=None) -> None:
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = engine_sampling_params(sampling, 1, output_kind=RequestOutputKind.FINAL_ONLY)
        request_id = f"{self.tag}:{next(self._ids)}"
        self._keys[request_id] = key
        if media is not None and media.images:  # the engine expands the images itself (module docstring)
            prompt = TokensPrompt(prompt_token_ids=list(media.engine_ids), multi_modal_data={"image": media.images})
            self._expanded[request_id] = list(prompt_ids)
        else:
            prompt = TokensPrompt(prompt_token_ids=list(prompt_ids))
        if self.generator.partial:
            # Salted with the weights' version: a request never reuses prefix-cache blocks computed under other
            # weights (the blocks of requests in flight outlive a weight update).
            prompt["cache_salt"] = f"v{self.generator.weight_version}"
        with self.generator.step_lock:  # the scorer thread's evaluation may be stepping the engine
            self.engine.add_request(request_id, prompt, params, lora_request=self.generator.lora_request)

    def busy(self) -> bool:
        return bool(self._keys)

    def poll(self, timeout: float) -> list[Turn]:
        """One engine step (``timeout`` is not needed: a step is the work itself), between weight updates."""
        if not self._keys:
            return []
        out = []
        with self.generator.step_lock:
            self.generator.step_engine()
            finished = self.generator.collect_finished(self.tag)
        for request in finished:
            key = self._keys.pop(request.request_id)
            expanded = self._expanded.pop(request.request_id, None)
            if expanded is not None:
                check_expanded_prompts([request], [expanded], names=[f"rollout {key}'s context"])
            sample = request.outputs[0]
            ids = list(sample.token_ids)
            logprobs = (
                [step[t].logprob for step, t in zip(sample.logprobs, ids)] if sample.logprobs is not None else None
            )
            versions = span_versions(version_labels(sample), len(ids), self.generator.weight_version)
            out.append(Turn(key, ids, sample.finish_reason == "stop", logprobs, versions))
        return out

    def finish(self) -> None:
        """Abort the requests still in flight (a partial-rollout stream stopped mid-round): nobody collects them."""
        if self._keys:
            with self.generator.step_lock:
                self.engine.abort_request(list(self._keys))
            self._keys.clear()
