"""A small HTTP sandbox service for :class:`hf_grpo.sandbox.RemoteExecutor`: standard library only.

    python -m hf_grpo.rewards.code.server --host 0.0.0.0 --port 8000 --workers 16

``POST /run`` runs ``{"limits": {...}, "jobs": [...]}`` on a :class:`hf_grpo.sandbox.LocalExecutor` and answers
``{"results": [...]}``; ``GET /health`` answers the isolation in use. The client's limits are clamped to the
server's own (``--timeout_s``, ``--memory_mb``, ...): a client can ask for less, never for more. One executor (pool)
per distinct clamped limits, created on first use. Once listening it prints ``listening on http://HOST:PORT``
(with the real port when ``--port 0``) and flushes, so a parent process can wait for that line. It lives with the
``code`` reward because its zygotes preload that reward's assert-style harness (``HARNESS_PRELOAD``); any other job
runs on it as well.

Not an authenticated service: bind it to a private interface. Departure from ColossalChat's verifier (a service
that judges answers): it only runs programs; comparisons stay in the trainer, so one service serves every test
format and tolerance setting.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from dataclasses import asdict, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ...sandbox import Job, Limits, LocalExecutor
from .reward import HARNESS_PRELOAD, PACKAGES

logger = logging.getLogger(__name__)
_MAX_BODY = 64 << 20


class SandboxServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], limits: Limits, workers: int | None):
        super().__init__(address, _Handler)
        self.limits = limits
        self.workers = workers
        self._executors: dict[Limits, LocalExecutor] = {}
        self._lock = threading.Lock()

    def executor(self, requested: dict) -> LocalExecutor:
        unknown = set(requested) - {f.name for f in fields(Limits)}
        if unknown:
            raise ValueError(f"unknown limits {sorted(unknown)}; known: {[f.name for f in fields(Limits)]}")
        ours = asdict(self.limits)
        limits = Limits(**{k: min(v, requested.get(k, v)) for k, v in ours.items()})
        with self._lock:
            if limits not in self._executors:
                self._executors[limits] = LocalExecutor(
                    limits, self.workers, preload=HARNESS_PRELOAD, packages=PACKAGES
                )
            return self._executors[limits]

    def server_close(self) -> None:
        super().server_close()
        for executor in self._executors.values():
            executor.close()


class _Handler(BaseHTTPRequestHandler):
    server: SandboxServer

    def _answer(self, code: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path != "/health":
            self._answer(404, {"error": f"unknown path {self.path}; use GET /health or POST /run"})
            return
        self._answer(200, {"ok": True, "limits": asdict(self.server.limits)})

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") not in ("", "/run"):
            self._answer(404, {"error": f"unknown path {self.path}; use POST /run"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= _MAX_BODY:
            self._answer(400, {"error": f"expected a JSON body of 1..{_MAX_BODY} bytes, got {length}"})
            return
        try:
            request = json.loads(self.rfile.read(length))
            jobs = [Job(**job) for job in request["jobs"]]
            executor = self.server.executor(request.get("limits", {}))
        except (ValueError, KeyError, TypeError) as e:
            self._answer(
                400,
                {
                    "error": f"bad request: {type(e).__name__}: {e}; expected {{'limits': {{...}}, "
                    f"'jobs': [{{'source', 'stdin', 'nonce'}}]}}"
                },
            )
            return
        try:
            results = executor.run(jobs)
        except Exception as e:  # noqa: BLE001 - the sandbox cannot run at all: tell the client, keep serving
            logger.exception("sandbox failure")
            self._answer(503, {"error": f"{type(e).__name__}: {e}"})
            return
        self._answer(200, {"results": [asdict(r) for r in results]})

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        logger.debug("%s " + format, self.address_string(), *args)


def main(argv: list[str] | None = None) -> None:
    defaults = Limits()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=None, help="sandboxes per limits setting (default: CPUs)")
    for f in fields(Limits):
        parser.add_argument(
            f"--{f.name}",
            type=type(getattr(defaults, f.name)),
            default=getattr(defaults, f.name),
            help="maximum a client may ask for",
        )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    limits = Limits(**{f.name: getattr(args, f.name) for f in fields(Limits)})
    server = SandboxServer((args.host, args.port), limits, args.workers)
    # SIGTERM (what service managers and Popen.terminate send) shuts down like Ctrl-C: the sandboxes are closed and
    # their temp dirs removed instead of the process dying mid-flight.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
