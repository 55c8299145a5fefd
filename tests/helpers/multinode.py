"""Two "nodes" on one machine: the trainer commands `hf_grpo.runtime.launching.plan_launch` prints for a 2-node
cluster, each run in its own folder (its "disk") with 127.0.0.1 as every host."""

import json
import os
import subprocess
import sys
from pathlib import Path

from hf_grpo.runtime.launching import plan_launch
from tests.helpers.launch import ROOT
from tests.helpers.servers import free_port


def start_nodes(
    backend: str, model: str, spec: dict, folders: list[Path], processes_per_node: int = 1
) -> list[subprocess.Popen]:
    """The planner's trainer command for each node, run in that node's folder; the worker writes to ./out."""
    commands = plan_launch(
        trainer_hosts=["127.0.0.1", "127.0.0.1"],
        processes_per_node=processes_per_node,
        accelerate_config=str(ROOT / f"accelerate_configs/{backend}.yaml"),
        script=str(ROOT / "tests/scripts/train_worker.py"),
        script_args=[model, "out", json.dumps(spec)],
        main_process_port=free_port(),
        accelerate_args=["--mixed_precision", "no"],  # the DeepSpeed configs ask for bf16; the reference is fp32
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],  # `accelerate` of this venv
    }
    procs = []
    for command, folder in zip(commands, folders):
        assert command.role == "trainer" and command.machine_rank == len(procs)
        folder.mkdir(parents=True, exist_ok=True)
        log = open(folder / "launch.log", "ab")
        procs.append(
            subprocess.Popen(
                list(command.argv),
                cwd=folder,
                env={**env, **command.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return procs


def wait_all(procs: list[subprocess.Popen], folders: list[Path], timeout: float = 300) -> None:
    for proc, folder in zip(procs, folders):
        code = proc.wait(timeout=timeout)
        assert code == 0, f"{folder}: exit {code}\n{(folder / 'launch.log').read_text()[-4000:]}"
