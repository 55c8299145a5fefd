"""The agents' ``python`` tool on real sandboxed subprocesses (no mocks): what comes back for output, exceptions,
timeouts and over-long output, containment of the host's files, concurrent calls, and its tool schema."""

import json
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from transformers.utils import get_json_schema

from hf_grpo.agents.python_tool import cut, make_python_tool

CAP = 300


@pytest.fixture(scope="module")
def tool():
    python = make_python_tool(timeout=5.0, max_output_chars=CAP)
    yield python
    python.close()


def test_prints_come_back(tool):
    assert tool("print('hello')\nprint(6 * 7)") == "hello\n42\n"


def test_an_exception_comes_back_as_text_naming_it(tool):
    answer = tool("print('before')\nraise KeyError('missing')")
    assert answer.startswith("before\n")
    assert "Traceback" in answer and "KeyError: 'missing'" in answer
    assert tool("import sys\nsys.exit(3)") == "error: exit code 3"
    assert "SyntaxError" in tool("def broken(:")


def test_memory_exhaustion_comes_back_as_text():
    python = make_python_tool(timeout=5.0, memory_mb=128)
    try:
        assert "MemoryError" in python("x = bytearray(512 << 20)")
    finally:
        python.close()


def test_an_infinite_loop_returns_a_timeout_message():
    python = make_python_tool(timeout=1.0)
    try:
        start = time.monotonic()
        answer = python("print('started', flush=True)\nwhile True:\n    pass")
        seconds = time.monotonic() - start
    finally:
        python.close()
    assert answer.startswith("started\n") and answer.rstrip().endswith("error: timed out after 1 s"), answer
    assert seconds < 1.0 + 5.0


def test_output_over_the_cap_is_cut_with_the_marker(tool):
    answer = tool("print('x' * 5000)")
    assert len(answer) <= CAP
    assert answer.startswith("x" * 100) and answer.endswith("...[truncated 4726 chars]")  # 5001 - 275 shown
    # A failure after long output keeps the exception's line (the error keeps its tail, stdout its head).
    answer = tool("print('y' * 5000)\nraise ValueError('the end')")
    assert len(answer) <= CAP and answer.startswith("yyy") and answer.endswith("ValueError: the end")
    assert "...[truncated" in answer


def test_runaway_output_is_stopped_and_cut(tool):
    answer = tool("while True:\n    print('z' * 1000)")
    assert len(answer) <= CAP and answer.startswith("zzz")
    assert answer.endswith("the program was stopped") and "...[truncated" in answer


def test_cut_keeps_head_or_tail_within_the_limit():
    text = "a" * 50 + "b" * 50
    assert cut(text, 100) == text
    head, tail = cut(text, 60), cut(text, 60, keep_tail=True)
    assert len(head) == len(tail) == 60
    assert head.startswith("aaa") and head.endswith(f"...[truncated {100 - head.index('...')} chars]")
    assert tail.endswith("bbb") and tail.startswith("...[truncated")


def test_writing_outside_the_sandbox_leaves_the_host_untouched(tool, tmp_path):
    target = tmp_path / "escaped.txt"
    answer = tool(f"open({str(target)!r}, 'w').write('pwned')\nprint('wrote it')")
    assert not target.exists(), answer
    assert list(tmp_path.iterdir()) == []
    if tool.executor.isolation == "namespaces":  # the host's /tmp is not in the sandbox at all
        assert "FileNotFoundError" in answer
    # Its own working directory is writable, and gone by the next call.
    listing = tool("open('notes.txt', 'w').write('x')\nimport os\nprint(sorted(os.listdir('.')))")
    assert listing == "['main.py', 'notes.txt']\n"
    assert tool("import os\nprint(os.listdir('.'))") == "['main.py']\n"


def test_concurrent_calls_each_get_their_own_output(tool):
    programs = [
        f"import sys, time\ntime.sleep(0.2)\nprint('call {i}')\n"
        + (f"raise RuntimeError('failure {i}')" if i % 2 else f"print('stderr {i}', file=sys.stderr)")
        for i in range(4)
    ]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(tool, programs))
    for i, answer in enumerate(answers):
        if i % 2:
            assert answer.startswith(f"call {i}\n") and answer.endswith(f"RuntimeError: failure {i}"), answer
        else:
            assert answer == f"call {i}\n", answer  # stderr is shown only for a failed program
    assert len(tool.executor.sandboxes) <= tool.executor.workers


def test_schema_names_python_with_a_required_string_code():
    schema = get_json_schema(make_python_tool(timeout=3))
    function = schema["function"]
    assert function["name"] == "python"
    assert function["parameters"]["properties"]["code"]["type"] == "string"
    assert function["parameters"]["required"] == ["code"]
    assert "3 seconds" in function["description"] and function["return"]["type"] == "string"


def test_arguments_are_checked_and_bad_input_is_text(tool):
    with pytest.raises(ValueError, match="timeout"):
        make_python_tool(timeout=0)
    with pytest.raises(ValueError, match="max_output_chars"):
        make_python_tool(max_output_chars=10)
    assert tool(123) == "error: code must be a string, got int"
    assert tool("print('\\ud800' == '\\ud800')\nprint('a\ud800b')") == "True\na?b\n"


def test_import_starts_nothing_and_changes_no_environment():
    probe = textwrap.dedent("""
        import json, os, threading
        before = dict(os.environ)
        from hf_grpo.agents import python_tool
        children = [open(f"/proc/self/task/{t}/children").read().split() for t in os.listdir("/proc/self/task")]
        print(json.dumps({"env_same": dict(os.environ) == before, "children": sum(children, []),
                          "threads": threading.active_count(), "name": python_tool.python.__name__,
                          "sandboxes": len(python_tool.python.executor.sandboxes)}))
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == {"env_same": True, "children": [], "threads": 1, "name": "python", "sandboxes": 0}
