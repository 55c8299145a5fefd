"""The backend x generation mode x PEFT matrix of docs/distributed.md, measured on this machine.

Each row is the documented command, run for real: `accelerate launch --config_file accelerate_configs/<backend>.yaml
--num_processes 2 train.py --recipe recipes/quickstart.yaml` (the embedded SmolLM2-135M-Instruct) for a few steps,
with colocated vLLM or against one `hf-grpo serve` process on loopback, full weights or LoRA, beta > 0 (so the
reference model is prepared too). For each row it prints whether it finished, the seconds per step, the KL at the
first step (0 when the reference model is right) and the peak resident memory of the largest training process
(vLLM's colocated engine included; sampled every 0.2 s over the process tree).

    python bench/distributed_matrix.py [--steps 3] [--rows ddp:colocate:full,zero3:server:lora] [-- extra args]

``--model`` replaces the recipe's model (in `train.py` and in the server); arguments after ``--`` go to every
`train.py` command after the row's own (a smaller shape, for instance: the last value of a flag wins).

This is a measurement, not a comparison: the peers have no CPU multi-process mode to run beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("ddp", "zero2", "zero3", "fsdp2")
DEFAULT_ROWS = [f"{b}:colocate:{p}" for b in BACKENDS for p in ("full", "lora")] + [
    f"{b}:server:full" for b in BACKENDS
]


def peak_rss(proc: subprocess.Popen) -> tuple[int, float]:
    """Wait for ``proc``; return its exit code and the largest RSS (GiB) any single process under it reached."""
    peak = 0
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            for p in root.children(recursive=True):
                try:
                    peak = max(peak, p.memory_info().rss)
                except psutil.NoSuchProcess:
                    pass
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.2)
    return proc.returncode, peak / 2**30


def start_server(port: int, log: Path, model: str = "smollm2-135m") -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "hf_grpo.cli",
        "serve",
        "--model",
        model,
        "--port",
        str(port),
        "--enforce-eager",
        "--kv-cache-gib",
        "1",
        "--max-model-len",
        "512",
    ]
    server = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except requests.RequestException:
            time.sleep(1)
    raise TimeoutError(f"hf-grpo serve did not start: {log}")


def run_row(row: str, steps: int, work: Path, server_url: str | None, more: list[str] = ()) -> dict:
    backend, mode, peft = row.split(":")
    out = work / row.replace(":", "-")
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / f"accelerate_configs/{backend}.yaml"),
        "--num_processes",
        "2",
        "train.py",
        "--recipe",
        "recipes/quickstart.yaml",
        "--output_dir",
        str(out),
        "--max_steps",
        str(steps),
        "--save_strategy",
        "no",
        "--plot_metrics",
        "false",
        "--disable_tqdm",
        "true",
        "--beta",
        "0.04",
        "--per_device_train_batch_size",
        "8",
        "--num_generations",
        "4",
        "--max_completion_length",
        "32",
    ]
    if mode == "server":
        cmd += ["--vllm_mode", "server", "--vllm_server_urls", server_url]
    if peft == "lora":
        cmd += ["--use_peft", "true", "--lora_dropout", "0.0", "--learning_rate", "1e-4"]
    cmd += more
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    log = open(work / f"{out.name}.log", "w")
    code, rss = peak_rss(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    seconds = time.perf_counter() - start
    state = out / "trainer_state.json"
    logs = [r for r in json.loads(state.read_text())["log_history"] if "reward" in r] if state.is_file() else []
    return {
        "row": row,
        "ok": code == 0 and len(logs) == steps,
        "seconds": seconds,
        "step_s": (logs[-1]["time/train_minutes"] * 60 / steps) if logs else float("nan"),
        "kl_step1": logs[0].get("kl", float("nan")) if logs else float("nan"),
        "peak_rss_gib": rss,
        "log": str(work / f"{out.name}.log"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rows", default=",".join(DEFAULT_ROWS))
    parser.add_argument("--model", default=None, help="a model name or path instead of the recipe's (smollm2-135m)")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, more = parser.parse_args(argv[:split]), argv[split + 1 :]
    if args.model:
        more = ["--model_name_or_path", args.model, *more]
    rows = args.rows.split(",")
    work = Path(tempfile.mkdtemp(prefix="hf_grpo_matrix-"))
    server = None
    if any(":server:" in r for r in rows):
        server = start_server(8917, work / "server.log", args.model or "smollm2-135m")
    results = []
    try:
        for row in rows:
            results.append(run_row(row, args.steps, work, "http://127.0.0.1:8917", more))
            r = results[-1]
            print(
                f"| {r['row'].replace(':', ' | ')} | {'ok' if r['ok'] else 'FAILED (' + r['log'] + ')'} | "
                f"{r['step_s']:.1f} | {r['kl_step1']:.2g} | {r['peak_rss_gib']:.2f} |",
                flush=True,
            )
    finally:
        if server is not None:
            os.killpg(server.pid, 9)
    passed = sum(r["ok"] for r in results)
    print(
        f"RESULT distributed_matrix rows_passed={passed}/{len(results)} "
        f"max_peak_rss_gib={max(r['peak_rss_gib'] for r in results):.2f}"
    )


if __name__ == "__main__":
    main()
