"""One live colocated vLLM engine per process (hf_grpo.generation.vllm_colocate, "One live engine").

An engine's shutdown tears down vLLM's process-wide parallel state. It runs from vLLM's finalizer whenever the
garbage collector reaches the engine; when that was during a later engine's start-up, TRL's test file (run against
this trainer) failed with "pipeline model parallel group is not initialized" right after a test that left a trainer
behind. The finalizer is called here by hand, which is what a late collection does."""

import pytest
from accelerate import Accelerator

from hf_grpo.generation import SamplingParams
from tests.helpers.models import colocated_vllm_config

pytestmark = pytest.mark.slow


def test_an_earlier_engine_is_shut_down_before_a_later_one_is_built(vllm_tiny_path, tokenizer, tmp_path):
    from vllm.distributed import parallel_state

    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator

    args = colocated_vllm_config(tmp_path, max_prompt_length=64, max_completion_length=4)
    prompts, sampling = [tokenizer("hello")["input_ids"]], SamplingParams(max_tokens=4)
    first = VLLMColocateGenerator(args, Accelerator(cpu=True), vllm_tiny_path)
    late_collection = first.llm.llm_engine.engine_core._finalizer  # vLLM's: EngineCore.shutdown
    second = VLLMColocateGenerator(args, Accelerator(cpu=True), vllm_tiny_path)  # the first is still held
    with pytest.raises(RuntimeError, match="a later trainer in this process built its own colocated engine"):
        first.generate(prompts, 2, sampling)
    late_collection()
    assert parallel_state.model_parallel_is_initialized()
    assert len(second.generate(prompts, 2, sampling).completion_ids) == 2
    second.close()
