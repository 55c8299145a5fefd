"""A `vllm serve` process started with `hf-grpo serve` on a free loopback port, and what the server-mode tests read
from it (health, served requests, weight version, prompt log-probs).

A server takes the better part of a minute to start on the CI's two cores (three processes import torch and vLLM),
so a module starts its servers once (`running`, in a module-scoped fixture) and every test that does not need a fresh
one uses them: each trainer pushes its own weights to them before it generates."""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time

import requests
import torch

from tests.helpers.launch import forked, free_port


class Server:
    def __init__(self, model_path: str, log_dir, lora_rank: int | None = None):
        """``lora_rank``: serve LoRA adapters up to that rank (`hf-grpo serve --lora-rank`)."""
        self.model_path, self.port, self.log_dir = model_path, free_port(), log_dir
        self.lora_rank = lora_rank
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        log = open(self.log_dir / f"server-{self.port}.log", "ab")
        cmd = [
            sys.executable,
            "-m",
            "hf_grpo.cli",
            "serve",
            "--model",
            self.model_path,
            "--port",
            str(self.port),
            "--enforce-eager",
            "--kv-cache-gib",
            "0.25",
            "--max-model-len",
            "512",
        ]
        if self.lora_rank is not None:
            cmd += ["--lora-rank", str(self.lora_rank)]
        cmd, env = forked(cmd, dict(os.environ))  # `hf-grpo serve` and the vLLM server it execs fork from the zygote
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait(self, timeout=1200):  # LOCAL-ONLY
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"server {self.url} exited: see {self.log_dir}"
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.25)
        raise TimeoutError(self.url)

    def kill(self):
        """SIGKILL the server's processes, and wait until its port is free (a forked server's processes die a moment
        after the executable, see `tests.helpers.zygote`): a restart listens on the same port."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds (TIME_WAIT is fine)
                try:
                    s.bind(("127.0.0.1", self.port))
                    return
                except OSError:
                    assert time.monotonic() < deadline, f"port {self.port} still taken 60 s after the kill"
                    time.sleep(0.05)

    def requests_served(self) -> float:
        text = requests.get(self.url + "/metrics", timeout=5).text
        return sum(float(m) for m in re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))

    def generated_tokens(self) -> float:
        """Tokens the server has sampled so far (vLLM's counter, updated at every engine step)."""
        text = requests.get(self.url + "/metrics", timeout=5).text
        return sum(float(m) for m in re.findall(r"^vllm:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))

    def weight_version(self) -> str:
        return requests.get(self.url + "/weight_info", timeout=5).json()["weight_version"]

    def completion_logprobs(self, prompt, completion, model: str | None = None) -> torch.Tensor:
        """The served log-probs of ``completion`` after ``prompt``, under the base model or the adapter ``model``."""
        ids = prompt + completion
        body = {
            "model": model or self.model_path,
            "prompt": [ids],
            "max_tokens": 1,
            "prompt_logprobs": 0,
            "temperature": 1.0,
        }
        choice = requests.post(self.url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
        return torch.tensor(
            [choice["prompt_logprobs"][i][str(ids[i])]["logprob"] for i in range(len(prompt), len(ids))]
        )


@contextlib.contextmanager
def running(*servers: Server):
    """Starts ``servers`` together (their start-ups overlap), waits until each answers, yields them and kills those
    still running at the end (a test may have killed and restarted one)."""
    for s in servers:
        s.start()
    try:
        for s in servers:
            s.wait()
        yield servers
    finally:
        for s in servers:
            if s.proc.poll() is None:
                s.kill()
