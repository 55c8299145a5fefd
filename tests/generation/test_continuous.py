"""transformers' continuous batching backend (TRL's use_transformers_continuous_batching / use_transformers_paged):
real ``generate_batch`` on the tiny Llama and on the embedded SmolLM2-135M, one training step, the config mapping,
and the HF backend's ``cache_implementation``."""

import pytest
import torch
from accelerate import Accelerator

from hf_grpo import GRPOConfig
from hf_grpo.data import encode_prompts
from hf_grpo.errors import InputError
from hf_grpo.generation import HFGenerator, SamplingParams
from hf_grpo.generation.continuous import ContinuousBatchingGenerator, workload_cache
from hf_grpo.models import load_model
from tests.helpers.models import make_tiny_llama
from tests.helpers.trainers import make_trainer

PROMPTS = [[{"role": "user", "content": "What is 12+7?"}], [{"role": "user", "content": "Name a color."}]]


@pytest.fixture(scope="module")
def tiny(tokenizer):
    model = make_tiny_llama(len(tokenizer)).eval()
    return ContinuousBatchingGenerator(Accelerator(cpu=True), model, tokenizer), encode_prompts(tokenizer, PROMPTS)


def test_groups_of_n_with_shapes_and_lengths(tiny):
    generator, prompts = tiny
    result = generator.generate(prompts, 3, SamplingParams(max_tokens=9))
    assert len(result.completion_ids) == len(result.finished) == 6 and result.logprobs is None
    for ids, done in zip(result.completion_ids, result.finished):
        assert 1 <= len(ids) <= 9
        assert done == (ids[-1] == generator.tokenizer.eos_token_id or len(ids) < 9)
    assert len({tuple(c) for c in result.completion_ids[:3]}) > 1, "the 3 samples of a prompt are identical"
    assert generator.generate([], 3, SamplingParams(max_tokens=9)).completion_ids == []


def test_sampling_follows_torchs_seed(tiny):
    generator, prompts = tiny
    runs = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        runs.append(generator.generate(prompts, 2, SamplingParams(max_tokens=6)).completion_ids)
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_refuses_what_it_would_drop(tiny):
    generator, prompts = tiny
    for bad in (SamplingParams(max_tokens=4, stop=("x",)), SamplingParams(max_tokens=4, repetition_penalty=1.2)):
        with pytest.raises(InputError, match="stop strings nor repetition_penalty"):
            generator.generate(prompts, 2, bad)
    with pytest.raises(InputError, match="unknown keys \\['pages'\\]"):
        ContinuousBatchingGenerator(Accelerator(cpu=True), generator.model, generator.tokenizer, {"pages": 3})


def test_workload_cache_holds_every_request():
    sized = workload_cache([[1] * 10, [1] * 70], n=4, max_tokens=60, page_size=64)
    # ceil(70/64)=2 and ceil(130/64)=3 blocks per request; the prefill of all 4 x (10 + 70) prompt tokens at once
    assert sized == dict(num_blocks=4 * 2 + 4 * 3 + 1, max_batch_tokens=320)


@pytest.mark.slow
def test_greedy_matches_hf_generate_and_stops_at_eos(smol_path, tokenizer):
    """Same model, same prompts: the paged backend's greedy completions are HF generate's, EOS included."""
    model = load_model(smol_path).eval()
    prompts = encode_prompts(tokenizer, PROMPTS[:1])
    greedy = SamplingParams(max_tokens=32, greedy=True)
    accelerator = Accelerator(cpu=True)
    ours = ContinuousBatchingGenerator(accelerator, model, tokenizer).generate(prompts, 2, greedy)
    hf = HFGenerator(accelerator, model, tokenizer).generate(prompts, 1, greedy).repeat_each(2)
    assert ours.completion_ids == hf.completion_ids and ours.finished == hf.finished
    assert ours.completion_ids[0][-1] == tokenizer.eos_token_id and ours.finished[0]
    assert model.config._attn_implementation == "sdpa", "the paged attention leaked into the training model"


def test_cache_implementation_reaches_generate(tiny):
    """TRL's cache_implementation (HF backend): a static cache decodes the same tokens; an unknown one is generate's
    error (so the value does reach generate)."""
    model, tokenizer = tiny[0].model, tiny[0].tokenizer
    prompts = tiny[1][:1]
    greedy = SamplingParams(max_tokens=6, greedy=True)
    accelerator = Accelerator(cpu=True)
    dynamic = HFGenerator(accelerator, model, tokenizer).generate(prompts, 1, greedy)
    static = HFGenerator(accelerator, model, tokenizer, cache_implementation="static").generate(prompts, 1, greedy)
    assert static.completion_ids == dynamic.completion_ids
    with pytest.raises(ValueError, match="bogus"):
        HFGenerator(accelerator, model, tokenizer, cache_implementation="bogus").generate(prompts, 1, greedy)


def test_trl_flags_choose_the_backend(tmp_path):
    base = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    assert GRPOConfig(**base, use_transformers_paged=True).generation_backend == "hf_continuous"
    config = GRPOConfig(
        **base,
        use_vllm=False,
        use_transformers_continuous_batching=True,
        transformers_continuous_batching_config='{"page_size": 32}',
    )
    assert config.generation_backend == "hf_continuous"
    assert config.transformers_continuous_batching_config == {"page_size": 32}
    with pytest.raises(ValueError, match="set only one"):
        GRPOConfig(**base, use_vllm=True, use_transformers_continuous_batching=True)
    with pytest.raises(InputError, match="no stop strings"):
        GRPOConfig(**base, use_transformers_continuous_batching=True, stop=["\n"])
    with pytest.raises(InputError, match="repetition_penalty"):
        GRPOConfig(**base, use_transformers_continuous_batching=True, repetition_penalty=1.1)
    with pytest.raises(InputError, match="unknown keys \\['nope'\\]"):
        GRPOConfig(
            **base, use_transformers_continuous_batching=True, transformers_continuous_batching_config={"nope": 1}
        )
    with pytest.raises(InputError, match="transformers_continuous_batching_config=.*generation_backend='hf'"):
        GRPOConfig(**base, generation_backend="hf", transformers_continuous_batching_config={"page_size": 32})
    with pytest.raises(InputError, match="cache_implementation='static' applies to generation_backend='hf'"):
        GRPOConfig(**base, use_transformers_continuous_batching=True, cache_implementation="static")


def test_trains_one_step(tiny_llama_path, tmp_path):
    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        generation_backend="auto",
        use_transformers_paged=True,
        max_steps=1,
        transformers_continuous_batching_config={"page_size": 16},
    )
    assert type(trainer.generator).__name__ == "ContinuousBatchingGenerator"
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    log = next(r for r in trainer.state.log_history if "reward" in r)
    assert log["completions/mean_length"] > 0
