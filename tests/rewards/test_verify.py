import os
import signal
import time

import pytest

from hf_grpo.rewards.verify import MathVerifier, get_verifier


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(timeout_s=2.0) as v:
        yield v


def test_worker_starts_lazily_and_none_pairs_skip_it():
    v = MathVerifier()
    assert v.worker_pid is None
    assert v.verify_batch([None, "  "], ["1", "2"]) == [False, False]
    assert v.worker_pid is None  # nothing to verify: no process started
    v.close()


def test_equivalences(verifier):
    pairs = [
        (r"\frac{1}{2}", "0.5", True),
        ("0.5", r"\frac{1}{2}", True),
        ("72.0", "72", True),
        ("72", "72", True),
        (r"\frac{3}{4}", "3/4", True),  # plain-text fraction gold parses
        (r"\dfrac{144}{2}", "72", True),
        ("1,234", "1234", True),
        (r"2\sqrt{2}", r"\sqrt{8}", True),
        ("73", "72", False),
        (r"\frac{1}{3}", "0.5", False),
        ("$72$", "72", True),  # already delimited text is passed unchanged
    ]
    results = verifier.verify_batch([p for p, _, _ in pairs], [g for _, g, _ in pairs])
    assert results == [ok for _, _, ok in pairs]
    with pytest.raises(ValueError, match="2 predictions but 1 golds"):
        verifier.verify_batch(["1", "2"], ["1"])


def test_pathological_answer_times_out_and_worker_keeps_working():
    with MathVerifier(timeout_s=0.5) as v:
        v.verify_batch(["1"], ["1"])  # start the worker outside the timed region
        start = time.monotonic()
        results = v.verify_batch([r"2^{2^{2^{2^{100}}}}", "72"], ["72", "72"])
        elapsed = time.monotonic() - start
        assert results == [False, True]
        assert elapsed < 3.0
        assert v.timeouts == 1
        assert v.restarts == 0  # the worker's own timer caught it
        assert v.verify_batch([r"\frac{1}{2}"], ["0.5"]) == [True]


def test_unresponsive_worker_is_killed_and_replaced():
    # A stopped process stands in for one stuck inside a C call that no signal handler can interrupt.
    with MathVerifier(timeout_s=0.3, kill_grace_s=0.5) as v:
        v.verify_batch(["1"], ["1"])
        old_pid = v.worker_pid
        os.kill(old_pid, signal.SIGSTOP)
        start = time.monotonic()
        results = v.verify_batch(["1", "2", "3"], ["1", "2", "4"])
        elapsed = time.monotonic() - start
        assert results == [False, True, False]  # the stuck item scores False, the rest go to a new worker
        assert v.timeouts == 1 and v.restarts == 1
        assert v.worker_pid not in (None, old_pid)
        assert elapsed < 0.8 + 10.0  # hard deadline (0.8 s) plus a fresh worker's startup


def test_dead_worker_is_replaced():
    with MathVerifier(timeout_s=2.0) as v:
        v.verify_batch(["1"], ["1"])
        os.kill(v.worker_pid, signal.SIGKILL)
        time.sleep(0.2)
        results = v.verify_batch(["1", "2"], ["1", "2"])
        assert results[1] is True
        assert v.restarts == 1
        assert v.verify_batch(["1", "2"], ["1", "2"]) == [True, True]


def test_close_is_idempotent_and_verifier_restarts_on_use():
    v = MathVerifier()
    assert v.verify_batch(["2"], ["2"]) == [True]
    v.close()
    v.close()
    assert v.worker_pid is None
    assert v.verify_batch(["2"], ["2"]) == [True]
    v.close()


def test_get_verifier_is_shared():
    assert get_verifier() is get_verifier()
