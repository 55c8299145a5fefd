"""The agent loop's ledger, masks, budgets and fault handling (scripted policy, real protocol/tools/templates)."""

import asyncio
import re
import time

import pytest

from hf_grpo.agents import AgentRollouts, calculator
from tests.helpers.scripted_agent import ScriptedToolUse, agent_args


def run(tokenizer, args, prompts, tools=(calculator,), env=None, generator=None):
    agent = AgentRollouts(tokenizer, args, list(tools), env)
    rows = [{"prompt": [{"role": "user", "content": p}]} for p in prompts]
    from hf_grpo.generation import SamplingParams

    result = agent.generate(
        generator or ScriptedToolUse(tokenizer),
        rows,
        args.num_generations,
        SamplingParams(max_tokens=args.max_completion_length),
        round_key=0,
        process=0,
    )
    agent.close()
    return result


def test_ledger_is_sampled_tokens_plus_template_observations(tmp_path, tokenizer):
    result = run(tokenizer, agent_args(tmp_path), ["What is 6*7? calls=2"])
    ids, mask = result.completion_ids[0], result.completion_mask[0]
    assert len(ids) == len(mask) == len(result.completion_ids[1])
    call = tokenizer(ScriptedToolUse(tokenizer).turn_text("calls=1"), add_special_tokens=False)["input_ids"]
    answer = tokenizer("The answer is 42.", add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    obs = tokenizer(
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False,
    )["input_ids"]
    # Sampled turns verbatim, observations rendered by ChatML (separator after <|im_end|> included), in order.
    assert ids == call + [eos] + obs + call + [eos] + obs + answer + [eos]
    assert mask == [1] * (len(call) + 1) + [0] * len(obs) + [1] * (len(call) + 1) + [0] * len(obs) + [1] * (
        len(answer) + 1
    )
    assert result.finished == [True, True]
    assert result.metrics["rollout/termination/eos"] == 1.0
    assert result.metrics["tools/call_frequency"] == 2.0 and result.metrics["tools/failure_frequency"] == 0.0
    roles = [m["role"] for m in result.completions[0]]
    assert roles == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert result.completions[0][0]["tool_calls"][0]["function"] == {
        "name": "calculator",
        "arguments": {"expression": "6 * 7"},
    }
    assert result.completions[0][1] == {"role": "tool", "name": "calculator", "content": "42"}
    # The whole row decodes as the chat template renders the conversation: nothing drifted.
    rendered = tokenizer.decode(result.prompt_ids[0] + ids)
    assert rendered.endswith("<|im_start|>assistant\nThe answer is 42.<|im_end|>")
    assert rendered.count("<|im_start|>assistant\n") == 3


def test_each_turn_gets_the_remaining_budget_and_truncation_is_reported(tmp_path, tokenizer):
    seen = []

    class Recording(ScriptedToolUse):
        def generate(self, prompt_ids, n, sampling):
            seen.append(sampling.max_tokens)
            return super().generate(prompt_ids, n, sampling)

    result = run(
        tokenizer, agent_args(tmp_path, max_completion_length=80), ["q calls=5"], generator=Recording(tokenizer)
    )
    assert seen[0] == 80 and all(b < a for a, b in zip(seen, seen[1:]))  # each turn: what is left
    assert all(len(ids) <= 80 for ids in result.completion_ids)
    assert result.finished == [False, False]  # ran out of budget: truncated
    reasons = {k: v for k, v in result.metrics.items() if k.startswith("rollout/termination/") and v}
    assert set(reasons) <= {"rollout/termination/length", "rollout/termination/tool_output_overflow"}


def test_overlong_tool_output_is_capped_with_a_marker(tmp_path, tokenizer):
    def dump(n: int) -> str:
        """Return a long text.

        Args:
            n: How many words.
        """
        return "word " * n

    call = 'call=<tool_call>{"name": "dump", "arguments": {"n": 500}}</tool_call>'
    result = run(
        tokenizer,
        agent_args(tmp_path, max_tool_output_tokens=20, max_completion_length=200),
        [f"q calls=1\n{call}"],
        tools=[dump],
    )
    tool_message = result.completions[0][1]["content"]
    assert "[tool output truncated:" in tool_message and tool_message.count("word") == 20
    assert result.finished[0]
    # Without a cap, the same output does not fit: the rollout ends, truncated, and the observation is not kept.
    result = run(
        tokenizer,
        agent_args(tmp_path, max_tool_output_tokens=None, max_completion_length=200),
        [f"q calls=1\n{call}"],
        tools=[dump],
    )
    assert result.metrics["rollout/termination/tool_output_overflow"] == 1.0
    assert result.finished == [False, False] and sum(result.completion_mask[0]) == len(result.completion_ids[0])


def test_max_tool_calling_iterations_ends_the_rollout(tmp_path, tokenizer):
    result = run(tokenizer, agent_args(tmp_path, max_tool_calling_iterations=2), ["q calls=5"])
    assert result.metrics["rollout/tool_rounds_mean"] == 2.0
    assert result.metrics["rollout/termination/max_turns"] == 1.0
    assert result.completions[0][-1]["role"] == "assistant" and "tool_calls" in result.completions[0][-1]


@pytest.mark.parametrize(
    "call, kind, says",
    [
        ('<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>', "parse_error", "invalid JSON"),
        ('<tool_call>{"name": "search", "arguments": {}}</tool_call>', "unknown_tool", "unknown tool `search`"),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expr": "1"}}</tool_call>',
            "invalid_arguments",
            "missing required argument(s) expression",
        ),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": 7}}</tool_call>',
            "invalid_arguments",
            "must be of type string",
        ),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>',
            "exception",
            "division by zero",
        ),
    ],
)
def test_malformed_calls_go_back_to_the_model_and_are_counted(tmp_path, tokenizer, call, kind, says):
    result = run(tokenizer, agent_args(tmp_path), [f"q calls=1\ncall={call}"])
    assert result.metrics[f"tools/errors/{kind}"] == 2.0  # both rollouts of the group
    assert result.metrics["tools/failure_frequency"] == 1.0
    observation = [t for t, m in zip(result.completion_ids[0], result.completion_mask[0]) if m == 0]
    assert says in tokenizer.decode(observation)  # the model is told what went wrong
    assert result.completions[0][-1]["content"] == "The answer is 42."  # the episode went on


def test_hanging_and_async_tools(tmp_path, tokenizer):
    def slow(seconds: float) -> str:
        """Sleep.

        Args:
            seconds: How long.
        """
        time.sleep(seconds)
        return "woke"

    async def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: The key.
        """
        await asyncio.sleep(0.05)
        return {"a": "alpha"}[key]

    start = time.perf_counter()
    result = run(
        tokenizer,
        agent_args(tmp_path, tool_timeout=0.5, num_generations=4, per_device_train_batch_size=4),
        ['q calls=1\ncall=<tool_call>{"name": "slow", "arguments": {"seconds": 30}}</tool_call>'],
        tools=[slow, lookup],
    )
    assert time.perf_counter() - start < 10
    assert result.metrics["tools/errors/timeout"] == 4.0
    assert "did not return within 0.5 s" in result.completions[0][1]["content"]
    result = run(
        tokenizer,
        agent_args(tmp_path),
        ['q calls=2\ncall=<tool_call>{"name": "lookup", "arguments": {"key": "a"}}</tool_call>'],
        tools=[slow, lookup],
    )
    assert result.completions[0][1]["content"] == "alpha" and result.metrics["tools/lookup/calls"] == 4.0


def test_tool_without_schema_is_refused_at_start(tmp_path, tokenizer):
    def undocumented(x):
        return x

    with pytest.raises(ValueError, match="cannot build the JSON schema of tool `undocumented`"):
        AgentRollouts(tokenizer, agent_args(tmp_path), [undocumented])


def _star_args(*numbers: int) -> int:
    """Add numbers.

    Args:
        numbers: the numbers
    """
    return sum(numbers)


def _kwargs_only(**values: int) -> int:
    """Add values.

    Args:
        values: the values
    """
    return sum(values.values())


def _positional_only(x: int, /) -> int:
    """Double a number.

    Args:
        x: the number
    """
    return 2 * x


@pytest.mark.parametrize(
    "tool, problem",
    [
        (_star_args, "parameter `*numbers` takes positional values"),
        (_kwargs_only, "its only parameter is `**values`"),
        (_positional_only, "parameter `x` is positional-only"),
    ],
)
def test_a_tool_its_schema_cannot_call_is_refused_at_start(tmp_path, tokenizer, tool, problem):
    """transformers publishes these as required named arguments: a call that follows the schema would fail on every
    rollout (TRL 1.16 accepts them), so the trainer refuses them when it is built, naming tool and parameter."""
    says = rf"tool `{tool.__name__}` cannot be called as its schema says: {re.escape(problem)}"
    with pytest.raises(ValueError, match=says):
        AgentRollouts(tokenizer, agent_args(tmp_path), [tool])


def test_tools_run_again_after_the_executor_is_closed(tmp_path, tokenizer):
    """Training closes the executor at its end; the held-out evaluation after it still calls tools."""
    args = agent_args(tmp_path)
    agent = AgentRollouts(tokenizer, args, [calculator])
    rows = [{"prompt": [{"role": "user", "content": "q calls=1"}]}]
    from hf_grpo.generation import SamplingParams

    for _ in range(2):
        result = agent.generate(ScriptedToolUse(tokenizer), rows, 2, SamplingParams(max_tokens=200), 0, 0)
        assert result.completions[0][1]["content"] == "42"
        agent.close()


def test_a_prompt_over_max_prompt_length_with_its_tool_schemas_is_named(tmp_path, tokenizer):
    with pytest.raises(
        ValueError,
        match=r"prompt 0 of this round is \d+ tokens \(\d+ of the prompt, \d+ of tool descriptions\), over the 64 "
        r"tokens a prompt may have: max_prompt_length=64; raise it",
    ):
        run(tokenizer, agent_args(tmp_path, max_prompt_length=64), ["q calls=1"])
