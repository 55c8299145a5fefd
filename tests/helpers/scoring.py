"""The trainer's own log-probs of a fixed completion, the reference the vLLM tests compare the engine against, and
a colocated engine's log-probs of the same completion (under the policy's adapter when the engine serves one)."""

import torch

from hf_grpo.learner.logprobs import Readout, SamplingFilters, completion_logprobs


def trainer_logprobs(
    model, prompt: list[int], completion: list[int], temperature: float = 1.0, filters: SamplingFilters | None = None
) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])  # [1, P+C]
    with torch.no_grad():
        logp, _ = completion_logprobs(
            model,
            model.get_output_embeddings(),
            {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
            len(completion),
            Readout(temperature=temperature, filters=filters),
        )
    return logp[0]  # [C]


def vllm_logprobs(generator, prompt, completion):
    from vllm import SamplingParams as VSP
    from vllm.inputs import TokensPrompt

    out = generator.llm.generate(
        [TokensPrompt(prompt_token_ids=prompt + completion)],
        VSP(max_tokens=1, prompt_logprobs=0, temperature=1.0),
        use_tqdm=False,
        lora_request=generator.lora_request,  # a LoRA policy's adapter, when the engine serves it (adapter sync)
    )[0]
    ids = prompt + completion
    return torch.tensor([out.prompt_logprobs[i][ids[i]].logprob for i in range(len(prompt), len(ids))])
