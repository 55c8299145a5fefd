"""Every recipe x every accelerate config, 2 processes, 2 steps each, with the peak resident memory of each rank.

    python bench/recipe_matrix.py [--recipes quickstart,grpo] [--configs fsdp2,zero3] [--steps 2] [-- extra args]

Each cell is the command users run, `accelerate launch --config_file accelerate_configs/<config>.yaml
--num_processes 2 train.py --recipe recipes/<recipe>.yaml`, shortened only where memory does not depend on it:
``--max_steps`` (2), no checkpoint save, no held-out or periodic evaluation, no plots. The batch shape, the
completion length, ``beta`` (reference model), the KV cache and the log-prob settings stay the recipe's.
``quickstart`` also runs with ``--beta 0.04``: the issue's cell (killed by the OS at step 2 before the fix).

Cells run one at a time. Memory per rank is the kernel's high-water mark of each training process (``VmHWM`` in
``/proc/<pid>/status``, read every 0.2 s until the process ends; vLLM's colocated engine lives in the same process).
To protect a shared machine a cell is stopped (and reported as such) when the machine's available memory falls
below ``--min_available_gib``.

Recipes written for GPUs (``gpu_*.yaml``, ``launch/slurm.sbatch``) are listed as skipped with the reason. Ends with

    RESULT recipe_matrix passed=<n> total=<m> max_rank_peak_gib=<x>
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ("ddp", "fsdp2", "zero2", "zero3")
GPU_ONLY = "written for CUDA GPUs (colocated vLLM with gpu_memory_utilization, bf16 kernels); no GPU here"
SHORT = [
    "--max_steps",
    "{steps}",
    "--save_strategy",
    "no",
    "--eval_strategy",
    "no",
    "--heldout_eval_samples",
    "0",
    "--plot_metrics",
    "false",
    "--disable_tqdm",
    "true",
    "--report_to",
    "none",
]


def cells(recipes: list[str] | None, configs: list[str]) -> tuple[list[tuple[str, list[str], str]], list[str]]:
    """``[(recipe name, extra args, config)]`` to run and ``[recipe]`` skipped (GPU-only)."""
    run, skipped = [], []
    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        name = path.stem
        if recipes is not None and name not in recipes and f"{name}+beta" not in recipes:
            continue
        if name.startswith("gpu_"):
            skipped.append(name)
            continue
        variants = [(name, [])]
        if name == "quickstart":
            variants.append(("quickstart+beta", ["--beta", "0.04"]))
        for label, extra in variants:
            if recipes is not None and label not in recipes:
                continue
            run += [(label, extra, config) for config in configs]
    if recipes is None:
        skipped.append("launch/slurm.sbatch")
    return run, skipped


def _hwm_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _kill(processes) -> None:
    # torch's elastic agent starts each rank in its own session: killing the launcher's group leaves them running.
    # psutil refuses to signal a pid that was reused by another process since it was seen.
    for p in processes:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def watch(proc: subprocess.Popen, min_available: float, timeline=None) -> tuple[dict[int, int], bool]:
    """Wait for ``proc``; return ``{rank: peak bytes}`` of its training processes (those with ``RANK`` set) and
    whether the guard stopped it. ``timeline``: a file to write ``seconds rank rss_gib`` samples to."""
    peaks: dict[int, int] = {}
    ranks: dict[int, int] = {}
    seen: dict[int, psutil.Process] = {}
    root = psutil.Process(proc.pid)
    stopped = False
    start = time.monotonic()
    while proc.poll() is None:
        try:
            children = root.children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        seen.update({c.pid: c for c in children if c.pid not in seen})
        for child in children:
            try:
                if child.pid not in ranks:
                    rank = child.environ().get("RANK")
                    if rank is None or "train.py" not in " ".join(child.cmdline()):
                        continue
                    ranks[child.pid] = int(rank)
                peaks[ranks[child.pid]] = max(peaks.get(ranks[child.pid], 0), _hwm_bytes(child.pid))
                if timeline is not None:
                    timeline.write(
                        f"{time.monotonic() - start:.1f} {ranks[child.pid]} {child.memory_info().rss / 2**30:.2f}\n"
                    )
            except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError, ProcessLookupError):
                pass
        if psutil.virtual_memory().available < min_available * 2**30 and not stopped:
            stopped = True
            _kill([root, *seen.values()])
        time.sleep(0.2)
    _kill(seen.values())
    return peaks, stopped


def run_cell(
    label: str, extra: list[str], config: str, steps: int, work: Path, more: list[str], min_available: float
) -> dict:
    recipe = label.split("+")[0]
    out = work / f"{label}-{config}"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / f"accelerate_configs/{config}.yaml"),
        "--num_processes",
        "2",
        "train.py",
        "--recipe",
        f"recipes/{recipe}.yaml",
        "--output_dir",
        str(out),
        *[a.format(steps=steps) for a in SHORT],
        *extra,
        *more,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    log_path = work / f"{out.name}.log"
    start = time.perf_counter()
    with open(log_path, "w") as log, open(work / f"{out.name}.rss", "w") as timeline:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        peaks, stopped = watch(proc, min_available, timeline)
    trained = (out / "trainer_state.json").is_file()
    status = (
        "ok"
        if proc.returncode == 0 and trained
        else ("stopped by the memory guard" if stopped else f"FAILED exit {proc.returncode}")
    )
    if status == "ok":  # the final model (0.3-0.5 GiB a cell) would fill the disk over 48 cells; logs stay
        shutil.rmtree(out, ignore_errors=True)
    return {
        "label": label,
        "config": config,
        "status": status,
        "seconds": time.perf_counter() - start,
        "peaks": [peaks.get(r, 0) / 2**30 for r in range(2)],
        "log": str(log_path),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default=None, help="comma-separated recipe names (quickstart+beta: with beta)")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--min_available_gib", type=float, default=2.0)
    args, more = parser.parse_known_args()
    more = [a for a in more if a != "--"]
    todo, skipped = cells(args.recipes.split(",") if args.recipes else None, args.configs.split(","))
    work = Path(tempfile.mkdtemp(prefix="hf_grpo_recipes-"))
    print("| recipe | config | status | seconds | peak RSS rank 0 (GiB) | peak RSS rank 1 (GiB) |")
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    results = []
    for label, extra, config in todo:
        r = run_cell(label, extra, config, args.steps, work, more, args.min_available_gib)
        results.append(r)
        status = r["status"] if r["status"] == "ok" else f"{r['status']} ({r['log']})"
        print(
            f"| {label} | {config} | {status} | {r['seconds']:.0f} | {r['peaks'][0]:.2f} | {r['peaks'][1]:.2f} |",
            flush=True,
        )
    for name in skipped:
        print(f"| {name} | all | skipped: {GPU_ONLY} | | | |")
    passed = sum(r["status"] == "ok" for r in results)
    peak = max((max(r["peaks"]) for r in results), default=0.0)
    print(f"logs and memory timelines: {work}")
    print(f"RESULT recipe_matrix passed={passed} total={len(results)} max_rank_peak_gib={peak:.2f}")


if __name__ == "__main__":
    main()
