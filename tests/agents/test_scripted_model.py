"""The scripted model (tests/helpers/scripted_model.py) writes its script under both real generation backends.

Four chat-template conversations, each a script of turns: sampled tokens ending in ``<|im_end|>``, the observation
the agent loop would append (a ``<tool_response>`` user turn), the next sampled turn. They hold what makes a script
hard to follow: two prompts with the same tokens in another order and the same tool call and result (only the prompt
tells their answers apart), a run of one repeated token, and the same call and result twice in one conversation
(only the turn tells the second call from the answer). Greedy HF ``generate`` and a colocated vLLM engine (fp32,
enforce_eager, as the repo's other engine tests) must write every turn token for token and stop at its eos; vLLM
sampling at temperature 1 too.
"""

import json
import time

import pytest
import torch

from tests.helpers.scripted_model import scripted_model

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>'
OBSERVATION = "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
SCRIPTS = {
    "What is 6 * 7?": [CALL, "6 * 7 = 42."],
    "What is 7 * 6?": [CALL, "7 * 6 = 42."],
    "Say hi, many times.": ["hi hi hi hi hi hi hi hi hi hi hi hi!!!!!!!!"],
    "Check twice: what is 6 * 7?": [CALL, CALL, "Still 42, twice."],
}


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def script(tokenizer):
    """Per conversation the prompt and the sampled turns (each ending in eos); and the observation's ids."""
    conversations = []
    for user, turns in SCRIPTS.items():
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True)
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        conversations.append((prompt, [encode(tokenizer, t) + [tokenizer.eos_token_id] for t in turns]))
    return conversations, encode(tokenizer, OBSERVATION)


def sequences(script):
    """The helper's input: each prompt, and its turns joined by the observation."""
    conversations, observation = script
    return [(p, [t for turn in turns[:-1] for t in turn + observation] + turns[-1]) for p, turns in conversations]


def turns(script):
    """(context, wanted turn) for every turn: the prompt, then each earlier turn followed by the observation."""
    conversations, observation = script
    for prompt, wanted in conversations:
        context = list(prompt)
        for turn in wanted:
            yield context, turn
            context = context + turn + observation


@pytest.fixture(scope="module")
def model_path(script, tokenizer, tmp_path_factory):
    start = time.perf_counter()
    path = scripted_model(tmp_path_factory.mktemp("scripted"), tokenizer, sequences(script), [tokenizer.eos_token_id])
    print(f"scripted model built in {time.perf_counter() - start:.1f} s")
    return path


def test_hf_generate_writes_every_turn(model_path, script, tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    assert model.generation_config.eos_token_id == [tokenizer.eos_token_id]
    pairs = list(turns(script))
    # One left-padded batch: generate derives positions from the attention mask, so padding moves nothing.
    width = max(len(c) for c, _ in pairs)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(c)) + c for c, _ in pairs])
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c, _ in pairs])
    longest = max(len(t) for _, t in pairs)
    out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=longest + 8)[:, width:].tolist()
    for (_, turn), row in zip(pairs, out):
        assert row[: len(turn)] == turn, tokenizer.decode(row)
        assert set(row[len(turn) :]) <= {tokenizer.pad_token_id}  # stopped at the eos (then padding)


@pytest.mark.slow
def test_colocated_vllm_writes_every_turn(model_path, script, tmp_path):
    pytest.importorskip("vllm")
    from accelerate import Accelerator

    from hf_grpo.generation import SamplingParams
    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator
    from tests.helpers.models import colocated_vllm_config

    args = colocated_vllm_config(tmp_path, max_prompt_length=256, max_completion_length=64)
    assert args.engine_dtype == "float32"  # the model's one-hot attention needs fp32
    pairs = list(turns(script))
    generator = VLLMColocateGenerator(args, Accelerator(cpu=True), model_path)
    try:
        greedy = generator.generate([c for c, _ in pairs], 1, SamplingParams(max_tokens=64, greedy=True))
        sampled = generator.generate([c for c, _ in pairs], 1, SamplingParams(max_tokens=64, temperature=1.0))
    finally:
        generator.close()
    assert greedy.completion_ids == [t for _, t in pairs] and all(greedy.finished)
    assert sampled.completion_ids == [t for _, t in pairs] and all(sampled.finished)


def test_build_is_cached_deterministic_and_checked(model_path, script, tokenizer, tmp_path):
    facts = json.loads(open(f"{model_path}/scripted.json").read())
    assert facts["smallest_lead"] > 40 and facts["flags"] == {"seq": 4, "turn": 1}, facts
    again = scripted_model(tmp_path, tokenizer, sequences(script), [tokenizer.eos_token_id])
    assert again != model_path
    with open(f"{model_path}/model.safetensors", "rb") as a, open(f"{again}/model.safetensors", "rb") as b:
        assert a.read() == b.read()  # the same weights, byte for byte
    start = time.perf_counter()
    assert scripted_model(tmp_path, tokenizer, sequences(script), [tokenizer.eos_token_id]) == again
    assert time.perf_counter() - start < 1.0  # from the cache


def test_refuses_what_no_weights_can_do(tokenizer, tmp_path):
    eos = tokenizer.eos_token_id
    prompt = encode(tokenizer, "Hello")
    with pytest.raises(ValueError, match="want different tokens"):
        scripted_model(tmp_path, tokenizer, [(prompt, encode(tokenizer, "a") + [eos]), (prompt, [eos])], [eos])
    run = encode(tokenizer, "x") * 40 + [eos]  # its end looks like its middle to a model that sees 33 tokens back
    with pytest.raises(ValueError, match="repeats an earlier stretch of its own sequence"):
        scripted_model(tmp_path, tokenizer, [(prompt, run)], [eos])
