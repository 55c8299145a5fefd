"""Two "nodes" on one machine: the trainer commands `hf_grpo.runtime.launching.plan_launch` prints for a 2-node
cluster, each run in its own folder (its "disk") with 127.0.0.1 as every host.

A node launch runs tests/scripts/train_worker.py (its spec's ``runs`` carry several configurations through one pair
of launches) or any script the planner is given, such as train.py itself."""

import json
import subprocess
import time
from pathlib import Path

import torch

from hf_grpo.runtime.launching import plan_launch
from tests.helpers.launch import ROOT, WORKER, forked, free_port, launched_env
from tests.helpers.processes import kill9


def start_planned(
    folders: list[Path],
    script: Path,
    backend: str = "ddp",
    processes_per_node: int = 1,
    **plan,
) -> list[subprocess.Popen]:
    """The planner's trainer command for each node (``plan``: more of `plan_launch`'s arguments, such as
    ``script_args`` or ``recipe``), run in that node's folder, logging to ``<folder>/launch.log``; its
    processes fork from the zygote (`tests.helpers.launch.forked`)."""
    commands = plan_launch(
        trainer_hosts=["127.0.0.1", "127.0.0.1"],
        processes_per_node=processes_per_node,
        accelerate_config=str(ROOT / f"accelerate_configs/{backend}.yaml"),
        script=str(script),
        main_process_port=free_port(),
        accelerate_args=["--mixed_precision", "no"],  # the DeepSpeed configs ask for bf16; the references are fp32
        **plan,
    )
    env = launched_env()
    procs = []
    for command, folder in zip(commands, folders):
        assert command.role == "trainer" and command.machine_rank == len(procs)
        folder.mkdir(parents=True, exist_ok=True)
        log = open(folder / "launch.log", "ab")
        argv, node_env = forked(list(command.argv), {**env, **command.env})
        procs.append(
            subprocess.Popen(
                argv,
                cwd=folder,
                env=node_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return procs


def start_nodes(
    backend: str, model: str, spec: dict, folders: list[Path], processes_per_node: int = 1
) -> list[subprocess.Popen]:
    """train_worker.py on each node; it writes to ./out (the node's own folder): ``out/rank<R>_<K>.pt`` of run K on
    the node that ran rank R, and each run's output_dir (``out/run<K>`` unless the run names one)."""
    return start_planned(folders, WORKER, backend, processes_per_node, script_args=[model, "out", json.dumps(spec)])


def wait_all(procs: list[subprocess.Popen], folders: list[Path], timeout: float = 600) -> None:
    """Wait for every node's launch to exit 0 within ``timeout`` seconds in all (the same limit as a one-node launch,
    tests.helpers.launch.launch). A node that fails or runs over fails the test with the end of its log, and no node
    outlives the test: a pair left running would take a core from every test after it."""
    deadline = time.monotonic() + timeout
    try:
        for proc, folder in zip(procs, folders):
            try:
                code = proc.wait(timeout=max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                code = f"still running after {timeout:.0f} s"
            assert code == 0, f"{folder}: exit {code}\n{(folder / 'launch.log').read_text()[-4000:]}"
    finally:
        for proc in procs:
            kill9(proc)


def rank_results(folders: list[Path], world: int, run: int = 0) -> list[dict]:
    """Each rank's saved result of run ``run``, from whichever node's folder holds it."""
    out = []
    for rank in range(world):
        paths = {f / "out" / f"rank{rank}_{run}.pt" for f in folders}
        found = [p for p in paths if p.is_file()]
        assert len(found) == 1, f"run {run}, rank {rank}: {found}"
        out.append(torch.load(found[0], weights_only=False))
    return out
