"""vLLM requests and their outputs for the in-process engine: our sampling settings as vLLM's, finished requests as our
records (with the weight version of each token), and the check that vLLM expanded image prompts as the trainer did.
Shared by the colocated generator and its turn stream (`hf_grpo.generation.engine_turns`)."""

from __future__ import annotations

from .base import GenerationResult, SamplingParams, span_versions


def check_expanded_prompts(outputs, prompt_ids: list[list[int]], names: list[str] | None = None) -> None:
    """The prompt ids a vLLM engine expanded from images must equal the trainer's processor's (the sequences the
    trainer scores); a mismatch (a processor configured differently in the engine) is an error naming the prompt
    (``names[i]``, default ``prompt i``: a multi-turn rollout's context is named by its rollout)."""
    for i, (request, ids) in enumerate(zip(outputs, prompt_ids)):
        got = list(request.prompt_token_ids)
        if got != list(ids):
            raise RuntimeError(
                f"{names[i] if names else f'prompt {i}'}: vLLM expanded its images into {len(got)} prompt tokens, "
                f"the trainer's processor into "
                f"{len(ids)}{'' if len(got) != len(ids) else ' (different ids)'}; the engine's processor must match "
                f"the trainer's (same processor config in the model folder)"
            )


def parse_request_outputs(outputs, version: int = -1) -> GenerationResult:
    """vLLM ``RequestOutput``s (in prompt order, ``n`` samples each) -> a group-major `GenerationResult`; each token
    labelled with the engine's weight version when it was sampled (``version``: where the engine has no label)."""
    ids, finished, logprobs, versions = [], [], [], []
    for request in outputs:
        for sample in sorted(request.outputs, key=lambda o: o.index):
            tokens = list(sample.token_ids)
            ids.append(tokens)
            finished.append(sample.finish_reason == "stop")  # EOS or a stop string; "length" = truncated
            logprobs.append(
                [step[t].logprob for step, t in zip(sample.logprobs, tokens)] if sample.logprobs is not None else []
            )
            versions.append(span_versions(version_labels(sample), len(tokens), version))
    return GenerationResult(completion_ids=ids, finished=finished, logprobs=logprobs, versions=versions)


def version_labels(sample) -> list | None:
    """A completion's weight-version spans; vLLM < 0.32 (the GPU kit's 0.26) labels none (partial rollouts, which need
    them, are refused there when the engine is built)."""
    return getattr(sample, "weight_versions", None)


# vLLM's level when ``verbose`` is off. WARNING would still print, at every step, the reload's "<Layer>: Failed to
# load weights" (harmless: buffers the checkpoint format does not carry, which vLLM puts back) and the CPU worker's
# "doesn't allow torch.set_num_threads"; a newcomer should see the progress bar and the metrics lines.


def engine_sampling_params(sampling: SamplingParams, n: int, **extra):
    """``vllm.SamplingParams`` for an in-process engine: the regex constraint as vLLM's `StructuredOutputsParams`."""
    from vllm import SamplingParams as VLLMSamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    kwargs = sampling.vllm_kwargs(n)
    if "structured_outputs" in kwargs:
        kwargs["structured_outputs"] = StructuredOutputsParams(**kwargs["structured_outputs"])
    return VLLMSamplingParams(**kwargs, **extra)
