"""The trainer's own log-probs of a fixed completion, the reference the vLLM tests compare the engine against."""

import torch

from hf_grpo.learner.logprobs import SamplingFilters, completion_logprobs


def trainer_logprobs(model, prompt: list[int], completion: list[int], temperature: float = 1.0,
                     filters: SamplingFilters | None = None) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])                                        # [1, P+C]
    with torch.no_grad():
        logp, _ = completion_logprobs(model, model.get_output_embeddings(), ids, torch.ones_like(ids), len(completion),
                                      temperature=temperature, filters=filters)
    return logp[0]                                                                   # [C]
