"""TRL's data and reward shapes in agent runs: what reward functions receive (the prompt with reset()'s text, only
well-formed calls in ``tool_calls``), and which prompts train when tool descriptions and reset() text make them long
(they count toward ``max_prompt_length`` only when it is set; otherwise the engine's context bounds them).

The trainer runs the tiny random Llama with the scripted policy (tests/helpers/scripted_agent.py) in place of its
generation; the loop-level tests drive `AgentRollouts` directly.
"""

import copy
from pathlib import Path

import pytest
import trl
from datasets import Dataset

from hf_grpo import DistributedGRPOTrainer as GRPOTrainer  # was: from trl import GRPOTrainer
from hf_grpo.agents import AgentRollouts, calculator
from hf_grpo.config import GRPOConfig
from hf_grpo.data import DataFormatError
from hf_grpo.data.checks import prepare_datasets
from hf_grpo.generation import SamplingParams
from tests.helpers.scripted_agent import EXCHANGE, ScriptedToolUse, agent_args, scripted
from tests.helpers.scripted_agent import agent_trainer_config as config


def user(text):
    return [{"role": "user", "content": text}]


def zero(completions, **kwargs):
    return [0.0] * len(completions)


# ---- reward functions' prompts: reset()'s text included (TRL) --------------------------------------------------------
class Briefing:
    def reset(self, brief_words: int = 4, **row) -> str:
        self.total = 0
        return " Brief:" + " detail" * brief_words

    def increment(self, step: int) -> str:
        """Add to the counter.

        Args:
            step: How much to add.
        """
        self.total += step
        return f"total={self.total}"


def test_reward_functions_get_the_prompt_with_the_reset_text(tiny_llama_path, tmp_path):
    seen = []

    def reward(prompts, completions, **kwargs):
        seen.extend(prompts)
        return [0.0] * len(completions)

    dataset = Dataset.from_list([{"prompt": user("Count. calls=0")}] * 8)
    trainer = scripted(
        GRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[reward],
            args=config(tmp_path),
            train_dataset=dataset,
            environment_factory=Briefing,
        ),
        real_backend=False,
    )
    trainer.collector.collect([dataset[0], dataset[1]])
    assert seen == [user("Count. calls=0 Brief: detail detail detail detail")] * 4
    assert dataset[0]["prompt"] == user("Count. calls=0")  # the row itself is left as it was


# ---- malformed calls: text in content, out of tool_calls, no tool turn (TRL's shape) ---------------------------------
GOOD = '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>'
BROKEN = '<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>'


def rollouts(tokenizer, tmp_path, prompt: str):
    args = agent_args(tmp_path)
    agent = AgentRollouts(tokenizer, args, [calculator])
    try:
        return agent.generate(
            ScriptedToolUse(tokenizer), [{"prompt": user(prompt)}], 2, SamplingParams(max_tokens=256), 0, 0
        )
    finally:
        agent.close()


def observation_text(tokenizer, result) -> str:
    return tokenizer.decode([t for t, m in zip(result.completion_ids[0], result.completion_mask[0]) if m == 0])


def test_an_unparsed_call_stays_text_and_gets_no_tool_turn(tmp_path, tokenizer):
    result = rollouts(tokenizer, tmp_path, f"q calls=1\ncall={BROKEN}")
    assert result.completions[0] == [
        {"role": "assistant", "content": BROKEN},  # no tool_calls: nothing in it parsed
        {"role": "assistant", "content": "The answer is 42."},
    ]
    assert "could not parse the tool call" in observation_text(tokenizer, result)  # the model is still told
    assert result.metrics["tools/errors/parse_error"] == 2.0  # and it is counted, in both rollouts


def test_a_turn_with_a_parsed_and_an_unparsed_call_lists_only_the_parsed_one(tmp_path, tokenizer):
    result = rollouts(tokenizer, tmp_path, f"q calls=1\ncall={GOOD}{BROKEN}")
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "6 * 7"}}}
    assert result.completions[0] == [
        {"role": "assistant", "content": GOOD + BROKEN, "tool_calls": [call]},  # the raw text keeps the broken one
        {"role": "tool", "name": "calculator", "content": "42"},
        {"role": "assistant", "content": "The answer is 42."},
    ]
    observation = observation_text(tokenizer, result)
    assert "42" in observation and "could not parse the tool call" in observation
    assert result.metrics["tools/errors/parse_error"] == 2.0 and result.metrics["tools/calculator/calls"] == 2.0


# ---- prompt limits: tools and reset() text count toward max_prompt_length only when it is set ------------------------
def search(query: str, limit: int = 5) -> str:
    """Search the encyclopedia for passages about a topic and return the best matches, most relevant first, each
    with its article title and a short excerpt.

    Args:
        query: The words to search for, for example "boiling point of water at high altitude".
        limit: The most passages to return, between 1 and 20.
    """
    return "no passages"


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a quantity between units of length, mass, volume, temperature or time, exactly, and return the
    converted value with its unit.

    Args:
        value: The number to convert, for example 3.5.
        from_unit: The unit it is in, for example "miles", "kg", "fahrenheit" or "hours".
        to_unit: The unit to convert it to, of the same kind as from_unit.
    """
    return "no conversion"


THREE_TOOLS = [calculator, search, convert_units]
WORDS = (
    "A farmer plants wheat on a rectangular field that is three hundred and twenty metres long and one hundred and "
    "forty five metres wide, then sells the harvest at the market for a price per kilogram that changes with the "
    "season."
).split()
QUESTION = " ".join((WORDS * 5)[:130]) + " calls=1"  # 130 words, then the scripted policy's instruction


@pytest.fixture(scope="module")
def qwen_tokenizer(tokenizer):
    """The embedded tokenizer with TRL's Qwen2.5 chat template (as bench/agentic.py): tools render as JSON schemas in
    the system prompt, about 550 tokens for the three tools here."""
    qwen = copy.deepcopy(tokenizer)
    qwen.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    return qwen


def long_questions(n=8):
    return Dataset.from_list([{"prompt": user(QUESTION)}] * n)


def test_a_130_word_question_with_three_tool_schemas_trains_at_the_default_limit(
    tiny_llama_path, tmp_path, qwen_tokenizer
):
    """TRL trains it: ~720 tokens with the schemas, over max_prompt_length's default 512 but within what the model's
    1024 positions leave after max_completion_length=200 (HF generate's context)."""
    trainer = scripted(
        GRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[zero],
            args=config(tmp_path),
            train_dataset=long_questions(),
            processing_class=qwen_tokenizer,
            tools=THREE_TOOLS,
        ),
        real_backend=False,
    )
    assert len(trainer.train_dataset) == 8  # none dropped
    batch = trainer.collector.collect([trainer.train_dataset[0], trainer.train_dataset[1]])
    assert 512 < len(batch.completion_prompt_ids[0]) <= 824
    assert batch.completions[0][1] == {"role": "tool", "name": "calculator", "content": "42"}


def test_a_max_prompt_length_the_user_set_counts_the_tool_schemas(tiny_llama_path, tmp_path, qwen_tokenizer):
    with pytest.raises(
        DataFormatError,
        match=r"all 8 prompts are longer than 512 tokens \(max_prompt_length=512; raise it: tool descriptions .*"
        r"e\.g\. train_dataset\[0\], \d+ tokens \(\d+ of the prompt, \d+ of tool descriptions\)",
    ):
        GRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[zero],
            args=config(tmp_path, max_prompt_length=512),  # set: the same number as the default, on purpose
            train_dataset=long_questions(),
            processing_class=qwen_tokenizer,
            tools=THREE_TOOLS,
        )


def test_a_prompt_over_the_colocated_engines_context_is_reported_at_init(tmp_path, qwen_tokenizer):
    """The colocated engine is sized for 512 prompt tokens + max_completion_length unless vllm_max_model_len says
    otherwise: the message gives the prompt's and the tools' tokens, the context and the field to change."""
    args = GRPOConfig(
        output_dir=str(tmp_path), max_completion_length=200, generation_backend="vllm", vllm_mode="colocate"
    )
    agent = AgentRollouts(qwen_tokenizer, args, THREE_TOOLS)
    with pytest.raises(
        DataFormatError,
        match=r"all 8 prompts are longer than 512 tokens \(the colocated vLLM engine's context is 712 tokens, sized "
        r"for 512 prompt tokens \+ max_completion_length=200; set vllm_max_model_len to hold longer prompts\) .*"
        r"train_dataset\[0\], 7\d\d tokens \(1\d\d of the prompt, 5\d\d of tool descriptions\)",
    ):
        prepare_datasets(long_questions(), None, qwen_tokenizer, args, 32768, encode=agent.encode_prompt)
    args = GRPOConfig(
        output_dir=str(tmp_path), max_completion_length=200, generation_backend="vllm", vllm_max_model_len=1024
    )
    train, _ = prepare_datasets(long_questions(), None, qwen_tokenizer, args, 32768, encode=agent.encode_prompt)
    assert len(train) == 8
    agent.close()


@pytest.mark.parametrize(
    "words, max_prompt_length, error",
    [
        # Over 512 with its reset() text, within the model's 1024 positions - 200: trains (TRL does).
        (500, None, None),
        (
            800,
            None,
            r"environment Briefing: prompt 0 of this round is \d+ tokens \(\d+ of the prompt, \d+ of tool "
            r"descriptions, \d+ of the text reset\(\) returned\), over the 824 tokens a prompt may have: the model's "
            r"1024 positions minus max_completion_length=200; lower max_completion_length",
        ),
        (300, 400, r"environment Briefing: prompt 0 .* over the 400 tokens a prompt may have: max_prompt_length=400"),
    ],
)
def test_reset_text_over_the_limit_names_the_environment_sizes_and_field(
    tiny_llama_path, tmp_path, words, max_prompt_length, error
):
    dataset = Dataset.from_list([{"prompt": user("Count. calls=0"), "brief_words": words}] * 8)
    kw = {} if max_prompt_length is None else {"max_prompt_length": max_prompt_length}
    trainer = scripted(
        GRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[zero],
            args=config(tmp_path, **kw),
            train_dataset=dataset,
            environment_factory=Briefing,
        ),
        real_backend=False,
    )
    if error is None:
        batch = trainer.collector.collect([dataset[0], dataset[1]])
        assert len(batch.completion_prompt_ids[0]) > 512
    else:
        with pytest.raises(ValueError, match=error):
            trainer.collector.collect([dataset[0], dataset[1]])


# ---- Arrow-stored tool exchanges reach the chat template without Arrow's None keys -----------------------------------
def test_an_arrow_stored_exchange_renders_as_the_list_it_was_built_from(tmp_path, qwen_tokenizer):
    """Arrow gives one call's arguments the other call's argument names, set to None; rendered as they are stored, the
    prompt would show the model ``"query": null`` in a calculator call."""
    from hf_grpo.agents.protocol import ToolProtocol

    stored = Dataset.from_list([{"prompt": EXCHANGE}])[0]["prompt"]
    assert stored[2]["tool_calls"][0]["function"]["arguments"]["query"] is None  # what the trainer reads
    protocol = ToolProtocol.for_tokenizer(qwen_tokenizer, "template")
    tools = AgentRollouts(qwen_tokenizer, config(tmp_path), [calculator, search]).tools
    assert protocol.encode_prompt(stored, tools) == protocol.encode_prompt(EXCHANGE, tools)
    assert '"query": null' not in qwen_tokenizer.decode(protocol.encode_prompt(stored, tools))
