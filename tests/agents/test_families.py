"""Every tool-calling family's round trip through HF generate and colocated vLLM, token-exact (issue 36's proof).

One scripted model (tests/helpers/scripted_model.py) writes, for each family, that family's call to ``add(a=2, b=3)``
after the family's real prompt, then the answer after the observation. The tokenizer knows every family's control
tokens (so token ids agree across families) and the model stops on every family's stop tokens; each family's rollout
uses that tokenizer with the family's real chat template and EOS. Everything else is the real code: detection, the
family's parser, the tool's execution, observation tokens and both backends.
"""

import copy

import pytest
from accelerate import Accelerator

from hf_grpo.agents import AgentRollouts
from hf_grpo.agents.tools import ToolResult
from hf_grpo.config import GRPOConfig
from hf_grpo.generation import SamplingParams
from tests.helpers.scripted_model import scripted_model
from tests.helpers.tool_families import FAMILIES, add, family_tokenizer

pytestmark = pytest.mark.slow


def make_args(tmp_path, backend):
    return GRPOConfig(
        output_dir=str(tmp_path),
        generation_backend=backend,
        num_generations=2,
        per_device_train_batch_size=2,
        max_prompt_length=None,
        max_completion_length=160,
        vllm_max_model_len=1536,
        vllm_enforce_eager=True,
        vllm_kv_cache_gib=0.25,
        use_cpu=True,
        report_to="none",
    )


@pytest.fixture(scope="module")
def scripted(tokenizer, tmp_path_factory):
    """``(model path, {family: (tokenizer, user message, expected completion ids, mask)})``."""
    union = copy.deepcopy(tokenizer)
    tokens = list(dict.fromkeys(t for f in FAMILIES for t in f.tokens))
    union.add_special_tokens({"additional_special_tokens": [t for t in tokens if t not in union.get_vocab()]})
    args = make_args(tmp_path_factory.mktemp("families"), "hf")
    cases, sequences, stops = {}, [], set()
    for family in FAMILIES:
        tok = family_tokenizer(union, family)
        stops |= {tok.convert_tokens_to_ids(s) for s in family.stops}
        agent = AgentRollouts(tok, args, [add])
        user = [{"role": "user", "content": f"{family.name}: what is 2 + 3?"}]
        prompt = agent.encode_prompt(user)
        call = tok(family.call, add_special_tokens=False)["input_ids"]
        _, calls = agent.protocol.parse(call, prompt, agent.tools)
        obs = agent.protocol.observation_ids(calls, [ToolResult("add", "5")], call[-1])
        answer = tok(family.answer, add_special_tokens=False)["input_ids"]
        cases[family.name] = (tok, user, call + obs + answer, [1] * len(call) + [0] * len(obs) + [1] * len(answer))
        sequences.append((prompt, call + obs + answer))
    path = scripted_model(tmp_path_factory.getbasetemp() / "scripted-families", union, sequences, sorted(stops))
    return path, cases


def round_trip(generator, tok, user, args):
    agent = AgentRollouts(tok, args, [add])
    try:
        return agent.generate(
            generator, [{"prompt": user}], 1, SamplingParams(max_tokens=160, greedy=True), round_key=0, process=0
        )
    finally:
        agent.close()


def check(result, expected, mask):
    assert result.completion_ids[0] == expected
    assert result.completion_mask[0] == mask
    assert result.metrics["rollout/termination/eos"] == 1.0 and result.metrics["tools/call_frequency"] == 1.0
    assert result.metrics["tools/failure_frequency"] == 0.0
    messages = result.completions[0]  # what reward functions receive: TRL's message shapes
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"]
    assert messages[0]["tool_calls"] == [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    ]
    assert messages[1] == {"role": "tool", "name": "add", "content": "5"}
    assert messages[2]["content"].strip() == "5" and "tool_calls" not in messages[2]


@pytest.fixture(scope="module")
def hf_model(scripted):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(scripted[0])


@pytest.mark.parametrize("family", [f.name for f in FAMILIES])
def test_round_trip_on_hf_generate(scripted, hf_model, family, tmp_path):
    from hf_grpo.generation.hf import HFGenerator

    tok, user, expected, mask = scripted[1][family]
    args = make_args(tmp_path, "hf")  # before the Accelerator: TrainingArguments resets accelerate's state
    generator = HFGenerator(Accelerator(cpu=True), hf_model, tok)
    check(round_trip(generator, tok, user, args), expected, mask)


@pytest.fixture(scope="module")
def engine(scripted, tmp_path_factory):
    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator

    args = make_args(tmp_path_factory.mktemp("engine"), "vllm")
    generator = VLLMColocateGenerator(args, Accelerator(cpu=True), scripted[0])
    yield generator
    generator.close()


@pytest.mark.parametrize("family", [f.name for f in FAMILIES])
def test_round_trip_on_colocated_vllm(scripted, engine, family, tmp_path):
    tok, user, expected, mask = scripted[1][family]
    check(round_trip(engine, tok, user, make_args(tmp_path, "vllm")), expected, mask)
