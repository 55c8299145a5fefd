"""The `code` reward: extraction, scoring rules, test formats, bad data, and the remote executor over real HTTP."""

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hf_grpo.data import DataFormatError
from hf_grpo.rewards import BUILTIN_REWARDS, RewardRunner, load_reward_function, reward_name
from hf_grpo.rewards.code import CodeReward, extract_code, outputs_match
from hf_grpo.rewards.code.server import SandboxServer
from hf_grpo.sandbox import CodeExecutorError, Job, Limits, RemoteExecutor

DOUBLE = "n = int(input())\nprint(n * 2)\n"


def fenced(source: str, tag: str = "python") -> str:
    return f"```{tag}\n{source.rstrip()}\n```"


@pytest.fixture(scope="module")
def code():
    reward = CodeReward(timeout_s=2.0, workers=2)
    yield reward
    reward.close()


# ---- extraction and comparison ----------------------------------------------------------------------------------
def test_extract_takes_the_last_python_block():
    text = f"First try:\n{fenced('print(1)')}\nFixed:\n{fenced('print(2)', 'py')}\nDone."
    assert extract_code(text) == "print(2)\n"


def test_extract_ignores_other_languages_and_falls_back_to_untagged():
    assert extract_code(f"{fenced('print(1)', 'python3')}\n{fenced('echo hi', 'bash')}") == "print(1)\n"
    assert extract_code(f"{fenced('print(3)', '')}\n{fenced('ls', 'sh')}") == "print(3)\n"
    assert extract_code(f"{fenced('print(3)', '')}\n{fenced('print(4)', 'Python')}") == "print(4)\n"


@pytest.mark.parametrize(
    "text", ["no code at all", "```python\nprint(1)\n", fenced("   ", "python"), fenced("x = 1", "javascript")]
)
def test_extract_none(text):
    assert extract_code(text) is None


def test_outputs_match_normalises_whitespace_and_optionally_floats():
    assert outputs_match("1 2\n3  \n\n", "1 2 3")
    assert outputs_match("a\tb", "a\nb")
    assert not outputs_match("1 2", "1 2 3")
    assert not outputs_match("0.3333333", "0.333333333")
    assert outputs_match("0.3333333", "0.333333333", float_tolerance=1e-6)
    assert outputs_match("1000000.5", "1000000.0", float_tolerance=1e-6)  # relative for large values
    assert not outputs_match("0.1", "0.2", float_tolerance=1e-6)
    assert not outputs_match("nan", "nan2", float_tolerance=1.0) and not outputs_match("abc", "abd", 1.0)


def test_float_tolerance_never_loosens_integer_tokens():
    # Expected integers match exactly: 1000000007 vs 1000000000 is within 1e-6 relative, and wrong.
    assert not outputs_match("1000000000", "1000000007", float_tolerance=1e-6)
    assert not outputs_match("5.000001", "5", float_tolerance=1e-6)
    assert outputs_match("1000000007.0000001", "1000000007.0", float_tolerance=1e-6)  # a float answer still may
    # Only ASCII decimal numbers count as numbers: float() would also read these.
    assert not outputs_match("1_000", "1000.0", float_tolerance=1e-6)
    assert not outputs_match("\u0661.0", "1.0", float_tolerance=1e-6)
    assert outputs_match("-.5e1 2.", "-5.0 2.0", float_tolerance=1e-9)


# ---- scoring ----------------------------------------------------------------------------------------------------
CASES = {"inputs": ["1\n", "2\n", "5\n", "-3\n"], "outputs": ["2", "4\n", "10", "-6"]}


def test_pass_fraction_on_stdin_stdout(code):
    half = "n = int(input())\nprint(n * 2 if n < 2 else 0)\n"
    completions = [fenced(DOUBLE), fenced(half), "no program", fenced("print(")]
    assert code(completions, test_cases=[CASES] * 4) == [1.0, 0.5, 0.0, 0.0]
    assert code.last_stats["no_code"] == 1 and code.last_stats["runs"] == 12
    assert code.last_stats["tests_passed"] == 6 and code.last_stats["crashed"] == 4


def test_all_or_nothing():
    strict = CodeReward(all_or_nothing=True, workers=1)
    half = "n = int(input())\nprint(n * 2 if n < 2 else 0)\n"
    assert strict([fenced(DOUBLE), fenced(half)], test_cases=[CASES] * 2) == [1.0, 0.0]
    strict.close()


def test_float_tolerance_option():
    cases = {"inputs": [""], "outputs": ["0.333333333"]}
    exact, tolerant = CodeReward(workers=1), CodeReward(float_tolerance=1e-6, workers=1)
    program = fenced("print(1 / 3)")
    assert exact([program], test_cases=[cases]) == [0.0]
    assert tolerant([program], test_cases=[cases]) == [1.0]
    exact.close()
    tolerant.close()


def test_a_crash_after_correct_output_fails(code):
    assert code([fenced("print(2)\nraise SystemExit(3)")], test_cases=[{"inputs": [""], "outputs": ["2"]}]) == [0.0]


def test_humaneval_style_check_function(code):
    test = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
    completions = [
        fenced("def add(a, b):\n    return a + b"),
        fenced("def add(a, b):\n    return a - b"),
        fenced("import sys\nsys.exit(0)"),
        fenced("import os\nos._exit(0)"),
    ]
    assert code(completions, test=[test] * 4, entry_point=["add"] * 4) == [1.0, 0.0, 0.0, 0.0]


def test_assert_list_pass_fraction(code):
    asserts = ["assert inc(1) == 2", "assert inc(0) == 1", "assert inc(-5) == 0"]
    assert code([fenced("def inc(x):\n    return x + 1")], test_list=[asserts]) == [pytest.approx(2 / 3)]


def test_none_rows_are_not_applicable_and_mixed_columns_work(code):
    completions = [fenced(DOUBLE), fenced("def f():\n    return 1"), fenced(DOUBLE)]
    scores = code(completions, test_cases=[CASES, None, None], test_list=[None, ["assert f() == 1"], None])
    assert scores == [1.0, 1.0, None]


def test_conversational_completions(code):
    completion = [{"role": "assistant", "content": "Sure:\n" + fenced(DOUBLE)}]
    assert code([completion], test_cases=[CASES]) == [1.0]


# ---- bad data ---------------------------------------------------------------------------------------------------
def test_missing_test_column_names_what_is_expected(code):
    with pytest.raises(ValueError, match="needs a test column: 'test_cases'.*got columns \\['gt_answer'\\]"):
        code([fenced(DOUBLE)], gt_answer=["1"])
    with pytest.raises(ValueError, match="no 'entry_point' column"):
        code([fenced(DOUBLE)], test=["def check(c): pass"])


@pytest.mark.parametrize(
    "cases, message",
    [
        ({"inputs": ["1"]}, r"completion 1: key 'test_cases.outputs': expected a list of strings, got null"),
        ({"inputs": ["1", "2"], "outputs": ["2"]}, r"completion 1: key 'test_cases'.*got 2 inputs and 1 outputs"),
        ({"inputs": [], "outputs": []}, r"completion 1: key 'test_cases': has no test cases"),
        (["1"], r"completion 1: key 'test_cases': expected a dict"),
    ],
)
def test_malformed_test_cases_name_the_row_and_key(code, cases, message):
    with pytest.raises(DataFormatError, match=message):
        code([fenced(DOUBLE)] * 2, test_cases=[CASES, cases])


def test_malformed_assert_list(code):
    with pytest.raises(DataFormatError, match="completion 0: key 'test_list': expected a non-empty list"):
        code([fenced(DOUBLE)], test_list=["assert True"])


def test_malformed_setup_code_and_entry_point_name_the_row_and_key(code):
    with pytest.raises(DataFormatError, match="completion 0: key 'test_setup_code': expected a string of Python"):
        code([fenced(DOUBLE)], test_list=[["assert True"]], test_setup_code=[["x = 1"]])
    with pytest.raises(DataFormatError, match="completion 0: key 'entry_point': expected a function name"):
        code([fenced(DOUBLE)], test=["def check(c): pass"], entry_point=["().f"])


def test_setup_code_runs_after_the_program_and_its_names_reach_the_asserts(code):
    """MBPP's test_setup_code builds its objects with the candidate's classes; the asserts see the setup's names."""
    program = "class Box:\n    def __init__(self, v):\n        self.v = v\n\ndef unbox(b):\n    return b.v\n"
    scores = code(
        [fenced(program)] * 2, test_list=[["assert unbox(box) == 3"]] * 2, test_setup_code=["box = Box(3)", ""]
    )
    assert scores == [1.0, 0.0]


# ---- registry and the TRL contract ------------------------------------------------------------------------------
def test_builtin_and_configured_instances_follow_the_reward_contract():
    assert load_reward_function("code") is BUILTIN_REWARDS["code"]
    configured = CodeReward(all_or_nothing=True, float_tolerance=1e-6, timeout_s=1.0)
    assert reward_name(configured) == reward_name(BUILTIN_REWARDS["code"]) == "code"
    runner = RewardRunner([configured])  # accepts **kwargs, so the runner takes it
    per_func = runner(
        prompts=["p"], completions=[fenced(DOUBLE)], completion_ids=[[1]], columns={"test_cases": [CASES]}
    ).per_func
    assert per_func[:, 0].tolist() == [1.0]
    configured.close()


def test_config_fields_reach_the_code_reward(tmp_path):
    from hf_grpo.config import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), code_timeout_s=1.5, code_memory_mb=300, code_workers=1)
    reward = load_reward_function("code", args)
    assert reward is not BUILTIN_REWARDS["code"]
    assert (reward.limits.timeout_s, reward.limits.memory_mb, reward.executor.workers) == (1.5, 300, 1)
    with pytest.raises(ValueError, match="code_workers must be >= 1"):
        GRPOConfig(output_dir=str(tmp_path), code_workers=0)


# ---- remote executor over loopback HTTP -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    srv = SandboxServer(("127.0.0.1", 0), Limits(timeout_s=2.0), workers=2)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/run"
    srv.shutdown()
    srv.server_close()


def test_remote_executor_scores_like_the_local_one(server, code):
    remote = CodeReward(executor_url=server, timeout_s=1.0)
    completions = [fenced(DOUBLE), fenced("print(0)"), "none", fenced("print(")]
    assert remote(completions, test_cases=[CASES] * 4) == code(completions, test_cases=[CASES] * 4)
    assert remote([fenced("while True: pass")], test_cases=[{"inputs": [""], "outputs": [""]}]) == [0.0]
    assert remote.last_stats["timeouts"] == 1
    test = "def check(candidate):\n    assert candidate(2, 3) == 5\n"
    assert remote([fenced("def add(a, b):\n    return a + b")], test=[test], entry_point=["add"]) == [1.0]


def test_server_clamps_client_limits(server):
    executor = RemoteExecutor(server, Limits(timeout_s=60.0))
    start = time.monotonic()
    (result,) = executor.run([Job("while True: pass")])
    assert result.status == "timeout" and time.monotonic() - start < 5.0  # the server's 2 s, not the client's 60 s


class _Flaky(BaseHTTPRequestHandler):
    """Answers the first ``failures`` requests with 503 (or hangs them when ``hang``), then forwards to ``target``."""

    calls = 0

    def do_POST(self):  # noqa: N802
        type(self).calls += 1
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).calls <= self.server.failures:
            if self.server.hang:
                time.sleep(1.0)
                return
            self.send_error(503, "busy")
            return
        with urllib.request.urlopen(urllib.request.Request(self.server.target, data=body)) as response:
            answer = response.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


@pytest.fixture()
def flaky(server):
    def start(failures: int, hang: bool = False) -> str:
        srv = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Flaky,), {"calls": 0}))
        srv.failures, srv.hang, srv.target, srv.daemon_threads = failures, hang, server, True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/run"

    servers = []
    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_remote_retries_server_errors_then_succeeds(flaky):
    executor = RemoteExecutor(flaky(failures=2), retries=2, backoff_s=0.01)
    (result,) = executor.run([Job("print(7)")])
    assert (result.status, result.stdout) == ("ok", "7\n")


def test_remote_timeout_exhausts_retries_with_a_clear_error(flaky):
    url = flaky(failures=10, hang=True)
    executor = RemoteExecutor(url, request_timeout_s=0.3, retries=1, backoff_s=0.01)
    start = time.monotonic()
    with pytest.raises(
        CodeExecutorError,
        match=f"remote code executor {url} failed after 2 attempt\\(s\\) "
        f"\\(timeout 0.3s each\\); last error: .*timed out",
    ):
        executor.run([Job("print(1)")])
    assert time.monotonic() - start < 2.0


def test_remote_unreachable_names_the_url():
    with socket.socket() as s:  # a port nothing listens on once this socket closes
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/run"
    with pytest.raises(CodeExecutorError, match=f"{url} failed after 2 attempt.*Connection refused"):
        RemoteExecutor(url, retries=1, backoff_s=0.01).run([Job("print(1)")])


def test_bad_request_is_a_400_and_not_retried(server):
    request = urllib.request.Request(server, data=json.dumps({"jobs": [{"code": "x"}]}).encode())
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 400 and "unexpected keyword argument 'code'" in info.value.read().decode()


@pytest.mark.slow
def test_server_module_entry_point_serves_over_loopback():
    proc = subprocess.Popen(
        [sys.executable, "-m", "hf_grpo.rewards.code.server", "--port", "0", "--workers", "1", "--timeout_s", "2"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.split()[-1] + "/run"
        remote = CodeReward(executor_url=url)
        assert remote([fenced(DOUBLE)], test_cases=[CASES]) == [1.0]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
