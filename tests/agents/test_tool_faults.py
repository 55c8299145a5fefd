"""Nothing a tool does ends the run, and a rollout's calls run in order on one thread of its own (its lane), where its
environment was reset and where its ``get_reward`` runs (`hf_grpo.agents.tools`, module docstring)."""

import asyncio
import json
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from hf_grpo.agents import AgentRollouts, calculator
from hf_grpo.agents.tools import Tool, ToolCall
from hf_grpo.generation import SamplingParams
from tests.helpers.scripted_agent import ScriptedToolUse, agent_args


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def play(tokenizer, agent, args, prompts, round_key=0):
    """One round of the scripted policy; whatever it raises (SystemExit and KeyboardInterrupt too) fails the test
    rather than ending pytest."""
    rows = [{"prompt": [{"role": "user", "content": p}]} for p in prompts]
    sampling = SamplingParams(max_tokens=args.max_completion_length)
    try:
        return agent.generate(ScriptedToolUse(tokenizer), rows, args.num_generations, sampling, round_key, 0)
    except BaseException as e:
        error = repr(e)  # not str(e), which may raise; and failed outside the handler, without its exception chain
    pytest.fail(f"the round raised {error}", pytrace=False)


def tool_outputs(completion: list[dict]) -> list[str]:
    return [m["content"] for m in completion if m["role"] == "tool"]


# ---- tools that used to end the run -----------------------------------------------------------------------------
def tuple_keys() -> dict:
    """Return a dict keyed by tuples."""
    return {(1, 2): "pair"}


def circular() -> list:
    """Return a list that contains itself."""
    value = []
    value.append(value)
    return value


def deep() -> list:
    """Return lists nested past the recursion limit."""
    value = []
    for _ in range(5_000):
        value = [value]
    return value


class Unprintable:
    def __str__(self):
        raise RuntimeError("no text")


def unprintable() -> dict:
    """Return an object whose text cannot be built."""
    return {"x": Unprintable()}


def exits() -> str:
    """Exit the interpreter."""
    raise SystemExit(3)


def interrupted() -> str:
    """Raise what Ctrl-C raises."""
    raise KeyboardInterrupt


async def async_exits() -> str:
    """Exit the interpreter from a coroutine."""
    raise SystemExit(4)


class MuteError(Exception):
    def __str__(self):
        raise ValueError("no message")


def mute() -> str:
    """Raise an exception whose message cannot be built."""
    raise MuteError()


async def echo(text: str) -> str:
    """Echo a text.

    Args:
        text: The text.
    """
    await asyncio.sleep(0)
    return text


@pytest.mark.parametrize(
    "tool, kind, says",
    [
        (tuple_keys, "unserializable", "tool `tuple_keys` returned a dict that cannot be encoded as JSON (TypeError"),
        (circular, "unserializable", "(ValueError: Circular reference detected)"),
        (deep, "unserializable", "(RecursionError"),
        (unprintable, "unserializable", "(RuntimeError: no text)"),
        (exits, "exception", "Error: SystemExit: 3"),
        (interrupted, "exception", "Error: KeyboardInterrupt"),
        (async_exits, "exception", "Error: SystemExit: 4"),
        (mute, "exception", "Error: MuteError"),
    ],
)
def test_a_tool_fault_is_an_error_to_the_model_and_the_next_round_works(tmp_path, tokenizer, tool, kind, says):
    args = agent_args(tmp_path, tool_timeout=2.0)
    agent = AgentRollouts(tokenizer, args, [tool, echo, calculator])
    result = play(tokenizer, agent, args, [f"q calls=1\ncall={call(tool.__name__)}"])
    assert result.finished == [True, True] and result.completions[0][-1]["content"] == "The answer is 42."
    (output,) = tool_outputs(result.completions[0])
    assert says in output
    assert result.metrics[f"tools/errors/{kind}"] == 2.0 and result.metrics["tools/failure_frequency"] == 1.0
    assert result.metrics["tools/errors/unserializable" if kind == "exception" else "tools/errors/exception"] == 0.0
    # The next round's sync and async tools still work (an async SystemExit used to stop the event loop thread).
    both = call("calculator", expression="6 * 7") + call("echo", text="hi")
    again = play(tokenizer, agent, args, [f"q calls=1\ncall={both}"], round_key=1)
    assert [tool_outputs(c) for c in again.completions] == [["42", "hi"]] * 2
    assert again.metrics["tools/failure_frequency"] == 0.0
    agent.close()


def latin1_file() -> str:
    """Read a file name as an OS gives it to Python: undecodable bytes become lone surrogates."""
    return b"caf\xe9.txt".decode("utf-8", "surrogateescape")


class Surrogates:
    def reset(self, **row) -> str:
        return " Files: " + b"caf\xe9.txt".decode("utf-8", "surrogateescape")


def test_text_no_tokenizer_can_encode_is_shown_with_replacement_characters(tmp_path, tokenizer):
    """A str holding lone surrogates (what ``surrogateescape`` makes of undecodable bytes) is not text: the tokenizer
    raised a TypeError on it and ended the run. From a tool or from reset(), it is shown with U+FFFD instead."""
    args = agent_args(tmp_path)
    agent = AgentRollouts(tokenizer, args, [latin1_file, calculator], Surrogates)
    result = play(tokenizer, agent, args, [f"q calls=1\ncall={call('latin1_file')}"])
    agent.close()
    assert tool_outputs(result.completions[0]) == ["caf\ufffd.txt"]
    assert result.prompts[0][-1]["content"].endswith("Files: caf\ufffd.txt")  # reset()'s text, as rewards get it
    assert result.finished == [True, True] and result.metrics["tools/failure_frequency"] == 0.0
    assert "caf\ufffd.txt" in tokenizer.decode(result.completion_ids[0])


async def leaves_a_task() -> str:
    """Start a background task that exits the interpreter."""

    async def exit_later():
        raise SystemExit(5)

    leaves_a_task.task = asyncio.get_running_loop().create_task(exit_later())
    return "started"


def test_a_task_an_async_tool_leaves_behind_cannot_stop_the_event_loop(tmp_path, tokenizer, caplog):
    args = agent_args(tmp_path, tool_timeout=1.0)
    agent = AgentRollouts(tokenizer, args, [leaves_a_task, echo])
    result = play(tokenizer, agent, args, [f"q calls=1\ncall={call('leaves_a_task')}"])
    assert tool_outputs(result.completions[0]) == ["started"]
    again = play(tokenizer, agent, args, [f"q calls=1\ncall={call('echo', text='hi')}"], round_key=1)
    assert tool_outputs(again.completions[0]) == ["hi"]  # not a timeout: the loop thread survived the task
    assert "raised SystemExit: 5 on the tools' event loop" in caplog.text
    agent.close()


# ---- order and thread affinity ----------------------------------------------------------------------------------
class Store:
    """Its calls make sense only in the model's order; counts how many of its puts run at once, across rollouts."""

    active = peak = 0
    lock = threading.Lock()

    def reset(self, **row) -> None:
        self.items = []

    def put(self, text: str) -> str:
        """Store a text.

        Args:
            text: The text.
        """
        with Store.lock:
            Store.active += 1
            Store.peak = max(Store.peak, Store.active)
        time.sleep(0.1)  # a get run beside this put, rather than after it, would miss the text
        self.items.append(text)
        with Store.lock:
            Store.active -= 1
        return "stored"

    def get(self) -> str:
        """The texts stored so far."""
        return ",".join(self.items)


def test_a_turns_calls_run_in_order_and_rollouts_run_side_by_side(tmp_path, tokenizer):
    args = agent_args(tmp_path, num_generations=4, per_device_train_batch_size=4, max_concurrent_tools=3)
    agent = AgentRollouts(tokenizer, args, [], Store)
    Store.peak = 0
    turn = call("put", text="abc") + call("get")
    result = play(tokenizer, agent, args, [f"q calls=1\ncall={turn}", f"r calls=1\ncall={turn}"])
    assert [tool_outputs(c) for c in result.completions] == [["stored", "abc"]] * 8
    assert Store.peak == 3  # the eight rollouts' puts overlap, at most max_concurrent_tools at once
    agent.close()


class Ledger:
    """Opens a sqlite3 connection in reset: its objects may be used only on the thread that made them."""

    def reset(self, **row) -> None:
        self.thread = threading.current_thread()
        self.db = sqlite3.connect(":memory:")
        self.db.execute("create table entries (amount integer)")

    def add(self, amount: int) -> str:
        """Add an amount.

        Args:
            amount: How much.
        """
        self.db.execute("insert into entries values (?)", (amount,))
        return "added"

    def total(self) -> int:
        """The sum of the amounts added."""
        return self.db.execute("select coalesce(sum(amount), 0) from entries").fetchone()[0]

    def get_reward(self) -> float:
        return float(self.total())


def test_an_environment_holding_a_sqlite_connection_works_in_tools_and_reward(tmp_path, tokenizer):
    args = agent_args(tmp_path, max_completion_length=1024)  # room for three results, or three errors
    agent = AgentRollouts(tokenizer, args, [], Ledger)
    (reward,) = agent.reward_functions()
    turn = call("add", amount=5) + call("add", amount=7) + call("total")
    result = play(tokenizer, agent, args, [f"q calls=1\ncall={turn}"])
    assert [tool_outputs(c) for c in result.completions] == [["added", "added", "12"]] * 2
    assert result.metrics["tools/failure_frequency"] == 0.0
    # With max_staleness the next round is generated before this one is scored: this round's lanes stay open.
    later = play(tokenizer, agent, args, [f"q calls=1\ncall={call('add', amount=1)}{call('total')}"], round_key=1)
    # The reward runner calls a sync reward function on a thread of its own; get_reward still reaches its connection.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(reward, environments=result.environments).result(timeout=10) == [12.0, 12.0]
        assert pool.submit(reward, environments=later.environments).result(timeout=10) == [1.0, 1.0]
    # Each environment has a lane of its own, which closes once the trainer drops the round (after scoring it).
    lanes = [e.thread for e in result.environments]
    assert len(set(lanes)) == 2 and threading.main_thread() not in lanes and all(t.is_alive() for t in lanes)
    del result
    for lane in lanes:
        lane.join(timeout=5)
    assert not any(t.is_alive() for t in lanes)
    agent.close()


class Loops:
    """Async tools and an async get_reward: both on the tools' one event loop."""

    def reset(self, **row) -> None:
        self.loops = []

    async def where(self) -> str:
        """Note the running event loop."""
        self.loops.append(asyncio.get_running_loop())
        return "noted"

    async def get_reward(self) -> float:
        return float(asyncio.get_running_loop() in self.loops)


def test_an_async_get_reward_runs_on_the_loop_of_the_environments_async_tools(tmp_path, tokenizer):
    args = agent_args(tmp_path)
    agent = AgentRollouts(tokenizer, args, [], Loops)
    (reward,) = agent.reward_functions()
    result = play(tokenizer, agent, args, [f"q calls=1\ncall={call('where')}"])
    assert asyncio.run(reward(environments=result.environments)) == [1.0, 1.0]  # the reward runner's loop is another
    agent.close()


class Stuck:
    """``hang`` blocks until the test releases it; ``ping`` answers at once."""

    release = threading.Event()

    def reset(self, **row) -> None:
        pass

    def hang(self) -> str:
        """Wait until released."""
        Stuck.release.wait(30)
        return "released"

    def ping(self) -> str:
        """Answer at once."""
        return "pong"

    def get_reward(self) -> float:
        return 1.0


def test_calls_after_a_timed_out_one_are_answered_at_once_as_busy(tmp_path, tokenizer):
    args = agent_args(tmp_path, tool_timeout=0.5, max_completion_length=1024)  # room for four error messages
    agent = AgentRollouts(tokenizer, args, [], Stuck)
    Stuck.release.clear()
    turn = call("hang") + call("ping")
    start = time.perf_counter()
    result = play(tokenizer, agent, args, [f"q calls=3\ncall={turn}"])  # two tool rounds of two calls
    seconds = time.perf_counter() - start
    try:
        busy = "Error: tool `{}` was not run: the environment is still busy with a call to `hang` that did not return"
        for completion in result.completions:
            first, *later = tool_outputs(completion)
            assert first == "Error: tool `hang` did not return within 0.5 s"
            assert [o[: len(busy.format(n))] for o, n in zip(later, ["ping", "hang", "ping"])] == [
                busy.format(n) for n in ["ping", "hang", "ping"]
            ]
            assert completion[-1]["content"] == "The answer is 42."
        assert result.metrics["tools/errors/timeout"] == 8.0
        assert seconds < 0.5 + 2.5  # one timeout per rollout, side by side; the busy answers take no time
        # Nor does scoring wait for the hung call: those rollouts abstain from the environment's reward.
        (reward,) = agent.reward_functions()
        assert reward(environments=result.environments) == [None, None]
        # Once the hung call returns, its environment's lane runs calls again.
        env = result.environments[0]
        lane = agent.envs.lane_of(env)
        Stuck.release.set()
        deadline = time.monotonic() + 5
        while lane.stuck is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        ping = agent.executor.submit(ToolCall("ping", {}), {"ping": Tool.from_callable(env.ping)}, lane)
        assert ping.result(timeout=5).content == "pong"
    finally:
        Stuck.release.set()
        agent.close()
