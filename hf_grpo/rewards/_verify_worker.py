"""Math-verify worker process, run as a script by :class:`hf_grpo.rewards.verify.MathVerifier`.

Protocol (JSON lines): it prints ``{"ready": true}`` once imports are done, then for each request line
``{"items": [[pred, gold], ...], "timeout": seconds}`` prints one ``{"i": index, "r": "ok"|"no"|"timeout"|"error"}``
line per item, in order, flushed as soon as the item is decided, so the parent can tell exactly which item hangs.
It exits when its stdin closes.

It is a script rather than a module of the package so that starting it never imports ``hf_grpo`` (whose
``__init__`` pulls in torch and transformers) nor re-runs the parent's ``__main__``.
"""

import os
import sys

if __name__ == "__main__":  # only as the worker: importing this module (e.g. for docs) must change nothing
    # Running a script puts its own directory first on sys.path, where this package's ``math.py`` would shadow the
    # standard library's ``math`` module. Drop that entry before importing anything else.
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    # Our stdout carries the protocol: keep a private copy of it and point fd 1 at stderr, before any library
    # import can print something.
    _CHANNEL = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

import json  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402

from math_verify import parse, verify  # noqa: E402


class _ItemTimeout(BaseException):
    """Raised by the interval timer. A BaseException, so math_verify's ``except Exception`` cannot swallow it."""


def _on_timer(signum, frame):
    raise _ItemTimeout


def _as_latex(answer: str) -> str:
    """Bare answers ("72", "3/4", "\\frac{1}{2}") are wrapped in ``$...$`` so math_verify's LaTeX extraction sees
    them; text that already carries math delimiters or a box is passed unchanged."""
    if "$" in answer or "\\boxed" in answer or "\\(" in answer or "\\[" in answer:
        return answer
    return f"${answer}$"


def _check(pred: str, gold: str, timeout_s: float) -> str:
    # One float-precision budget covers parsing both sides and comparing. math_verify's own timeouts are turned
    # off (None) because they use whole-second signal.alarm() whose cleanup would cancel this timer.
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        gold_parsed = parse(_as_latex(gold), parsing_timeout=None)
        pred_parsed = parse(_as_latex(pred), parsing_timeout=None)
        return "ok" if verify(gold_parsed, pred_parsed, timeout_seconds=None) else "no"
    except Exception:
        return "error"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main() -> None:
    # Ctrl-C reaches the whole process group; the parent decides when this worker stops (it closes stdin).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _on_timer)
    # The "timeouts disabled" warning is expected (we time out ourselves) and math_verify logs whole inputs.
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)

    _CHANNEL.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        timeout_s = float(request["timeout"])
        for index, (pred, gold) in enumerate(request["items"]):
            try:
                status = _check(pred, gold, timeout_s)
            except _ItemTimeout:  # also covers the timer firing between the try body and its finally
                signal.setitimer(signal.ITIMER_REAL, 0)
                status = "timeout"
            _CHANNEL.write(json.dumps({"i": index, "r": status}) + "\n")


if __name__ == "__main__":
    main()
