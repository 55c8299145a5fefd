"""The interface every generation backend fills: token ids in, ``n`` completions per prompt out.

Backends see token ids only (the trainer owns chat templates and decoding), so HF ``generate`` and vLLM produce
interchangeable results; a vision-language prompt's ids come with its images and vision tensors (``media``).
Completions come back group-major: the ``n`` samples of prompt ``i`` are rows ``i*n .. i*n+n-1``.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import InputError


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: disabled
    min_p: float = 0.0  # 0: disabled
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    greedy: bool = False  # evaluation, or generation_kwargs do_sample false: argmax decoding
    regex: str | None = None  # TRL's vllm_structured_outputs_regex: every completion matches it (vLLM backends only)
    # TRL's generation_kwargs left for the backend (hf_grpo.generation.kwargs): (name, value) pairs passed unchanged.
    extra: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_config(cls, args, greedy: bool = False) -> SamplingParams:
        extra = dict(args.generation_kwargs or {})
        greedy = greedy or extra.pop("do_sample", True) is False
        return cls(
            max_tokens=args.max_completion_length,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            min_p=args.min_p,
            repetition_penalty=args.repetition_penalty,
            stop=tuple(args.stop or ()),
            greedy=greedy,
            regex=args.vllm_structured_outputs_regex,
            extra=tuple(extra.items()),
        )

    def transformers_kwargs(self) -> dict:
        """The same settings as transformers' sampling arguments (``generate`` keywords or a ``GenerationConfig``),
        for both transformers backends. Every knob is passed, so a model's own ``generation_config`` (a default
        temperature or repetition penalty) never applies underneath; greedy unsets the sampling ones (``None``), which
        ``generate`` would otherwise warn about with ``do_sample=False``. A repetition penalty of 1.0 adds no logits
        processor (the one continuous batching drops)."""
        if self.greedy:
            return dict(do_sample=False, temperature=None, top_p=None, top_k=None)
        return dict(
            do_sample=True,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k or None,
            min_p=self.min_p or None,
            repetition_penalty=self.repetition_penalty,
        )

    def vllm_kwargs(self, n: int) -> dict:
        """The same settings as vLLM sampling arguments (for ``vllm.SamplingParams`` or a /v1/completions body).

        ``logprobs=0`` returns the sampled token's log-prob; the stop string stays in the output so the token ids
        and the text agree (as with the HF backend). ``structured_outputs`` is the request body's form (a dict); an
        in-process engine needs `vllm_requests.engine_sampling_params`, which builds vLLM's object from it.
        """
        structured = {} if self.regex is None else {"structured_outputs": {"regex": self.regex}}
        return dict(
            **structured,
            n=n,
            max_tokens=self.max_tokens,
            temperature=0.0 if self.greedy else self.temperature,
            top_p=1.0 if self.greedy else self.top_p,
            top_k=0 if self.greedy else self.top_k,
            min_p=0.0 if self.greedy else self.min_p,
            repetition_penalty=self.repetition_penalty,
            stop=list(self.stop),
            include_stop_str_in_output=True,
            logprobs=0,
            **dict(self.extra),
        )


@dataclass
class GenerationResult:
    completion_ids: list[list[int]]  # [P*n] ragged; includes the EOS token when one was produced
    finished: list[bool]  # [P*n] ended by EOS or a stop string (False: hit max_tokens)
    logprobs: list[list[float]] | None = None  # [P*n] sampling log-probs per completion token, if the backend has them
    # [P*n] per completion token, the weight version (trainer step) that sampled it; None where the backend does not
    # label tokens (one call, one version: the generator's ``weight_version``). Partial rollouts mix versions.
    versions: list[list[int]] | None = None

    def repeat_each(self, n: int) -> GenerationResult:
        """Each completion ``n`` times in a row: greedy decoding's ``n`` samples (vLLM rejects greedy with n > 1)."""

        def rep(xs: list | None) -> list | None:
            return None if xs is None else [x for x in xs for _ in range(n)]

        return GenerationResult(rep(self.completion_ids), rep(self.finished), rep(self.logprobs), rep(self.versions))


class Turn(NamedTuple):
    """One finished turn of a rollout (or one completion of a partial-rollout round)."""

    key: int
    token_ids: list[int]
    finished: bool  # ended by EOS or a stop string; False: hit its max_tokens
    logprobs: list[float] | None
    versions: list[int] | None = None  # per token, the weight version that sampled it (vLLM backends)


def span_versions(spans, num_tokens: int, fallback: int) -> list[int]:
    """vLLM's ``weight_versions`` (contiguous ``(version, start, end)`` spans over a completion's tokens, objects or
    dicts) as one version per token. ``fallback`` labels the tokens no span covers and those of an engine whose
    version was never set (vLLM's label is then ``"default"``): the generator's own ``weight_version``."""
    out = [fallback] * num_tokens
    for span in spans or ():
        version, start, end = (
            (span["version"], span["start"], span["end"])
            if isinstance(span, dict)
            else (span.version, span.start, span.end)
        )
        out[start:end] = [int(version) if str(version).lstrip("-").isdigit() else fallback] * (end - start)
    return out


class EngineCannotLoadModel(InputError):
    """A backend's engine cannot load the model's architecture in this environment (`build_generator` may fall back
    to HF generate)."""


class Generator(ABC):
    """A generation backend.

    ``weight_version`` is the trainer's ``global_step`` whose weights the backend holds; -1 until the first sync, so
    the first generation always starts from the trainer's weights (which may differ from the checkpoint on disk).
    """

    weight_version: int = -1

    # Taken around each step of an in-process engine by its turn streams; the partial-rollout pipeline sets its engine
    # lock here, so that a weight update lands between two engine steps (`hf_grpo.rollout.pipeline`).
    step_lock = contextlib.nullcontext()

    # Whether ``generate`` takes vision-language prompts (``media``, `hf_grpo.vision.inputs.PromptMedia`).
    supports_images: bool = False

    @classmethod
    def from_config(cls, args, accelerator, model, tokenizer, model_path: str) -> Generator:
        """The constructor every backend shares (`hf_grpo.generation.build_generator` calls it): the trainer's config,
        the process's accelerator, the wrapped policy, its tokenizer, and a checkpoint an engine can load (the base
        model under PEFT). Each backend reads what it needs; its own ``__init__`` takes only that."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from a trainer config")

    @abstractmethod
    def generate(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, media: list | None = None
    ) -> GenerationResult:
        """Sample ``n`` completions for each prompt. Called on every process, possibly with no prompts. ``media``:
        one `PromptMedia` per prompt for a vision-language policy (its ids then hold the expanded image tokens)."""

    def describe(self) -> str:
        """What generates, in a few words, for the run's setup line (`hf_grpo.reporting.run_setup`)."""
        return type(self).__name__

    def update_weights(self, model, version: int) -> None:
        """Receive the trainer's current weights. Called on every process (gathers are collectives).

        The base implementation suits backends that read the live model and only records the version.
        """
        self.weight_version = version

    def turns(self, lockstep_any_rank=None):
        """Turn-level access for multi-turn rollouts: submit one rollout's next turn, collect turns as they finish
        (`hf_grpo.generation.turns`). ``lockstep_any_rank`` (under ZeRO-3/FSDP, where each forward is a collective)
        tells whether any process still has turns to generate, for backends whose processes must run the same
        number of forward passes. A backend that cannot generate turn by turn refuses here, saying so."""
        raise NotImplementedError(
            f"{type(self).__name__} generates whole batches only: multi-turn rollouts (tools, environments) need a "
            f"backend with turns() (HF generate, colocated vLLM, vllm serve)"
        )

    def close(self) -> None:  # noqa: B027 (optional: a backend without an engine has nothing to release)
        """Release engines and connections (end of training)."""
