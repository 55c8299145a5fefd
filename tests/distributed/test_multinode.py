"""Two machines simulated on one: each "node" is its own `accelerate launch --num_machines 2 --machine_rank K
--main_process_ip 127.0.0.1`, started with the command `hf_grpo.runtime.launching.plan_launch` prints for a 2-node
cluster (the one `launch/slurm.sbatch` and `launch/ssh.sh` run), every process the local rank 0 of its node.

* **Same update as one node.** DDP, ZeRO-2 and ZeRO-3 over 2 nodes x 1 process, and DDP over 2 nodes x 2
  processes, train the update a single-node 2-process run of the same batch trains (fixed completions, plain SGD:
  see tests/distributed/test_invariance.py for why). FSDP2 is not here: accelerate applies an FSDP config only on
  GPUs (on CPU it trains DDP, `hf_grpo.runtime.distributed.warn_if_fsdp_falls_back`); torch's `fully_shard` over gloo
  is tested directly in tests/distributed/test_fsdp2.py.
* **Node-local disks.** Each node runs in its own working directory with a relative ``output_dir`` (the same command
  on two disks), ``save_on_each_node`` on: each node writes and publishes its own checkpoints. kill -9 of node 1's
  process ends both; restarting both with ``resume_from_checkpoint: latest`` ends with the uninterrupted weights.
* **The wrong filesystem setting is refused** before training: ``save_on_each_node`` on a shared directory, and
  node-local directories without it (`hf_grpo.runtime.nodes`).
* **The real entry point**: `train.py --recipe` through the planner's commands, on 2 nodes.
* **Colocated vLLM on each node** (ZeRO-3). The server fleet across nodes is in tests/generation/test_vllm_server.py.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_grpo.models import load_model
from hf_grpo.runtime.launching import plan_launch
from tests.helpers.launch import COLOCATE, EXACT_SGD, ROOT, launch, results, step_logs
from tests.helpers.multinode import start_nodes, wait_all
from tests.helpers.processes import kill9, wait_for
from tests.helpers.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

STEPS = 3
SPEC = {"fixed_completions": True, "config": {**EXACT_SGD, "loss_type": "grpo", "max_steps": STEPS}}


def with_config(spec: dict, **config) -> dict:
    return {**spec, "config": {**spec["config"], **config}}


def rank_results(folders: list[Path], world: int) -> list[dict]:
    """Each rank's saved result, from whichever node's folder holds it."""
    out = []
    for rank in range(world):
        paths = [f / "out" / f"rank{rank}_0.pt" for f in folders if (f / "out" / f"rank{rank}_0.pt").is_file()]
        assert len(paths) == 1, f"rank {rank}: {paths}"
        out.append(torch.load(paths[0], weights_only=False))
    return out


@pytest.fixture(scope="module")
def one_node(tiny_llama_path, tmp_path_factory):
    """The single-node reference: 2 processes, DDP, same batch and seed."""
    folder = tmp_path_factory.mktemp("one-node")
    launch("ddp", tiny_llama_path, folder, SPEC, mixed_precision="no")
    return results(folder)


@pytest.fixture(scope="module")
def two_nodes(tiny_llama_path, tmp_path_factory):
    """Each rank's result of an uninterrupted 2-node run with a shared output_dir, by (backend, processes per node);
    run once, also the reference of the ZeRO-3 resume test."""
    done = {}

    def run(backend: str, per_node: int = 1) -> list[dict]:
        if (backend, per_node) not in done:
            folder = tmp_path_factory.mktemp(f"two-nodes-{backend}-{per_node}")
            spec = with_config(SPEC, per_device_train_batch_size=8 // per_node)
            wait_all(start_nodes(backend, tiny_llama_path, spec, [folder, folder], per_node), [folder, folder])
            done[backend, per_node] = rank_results([folder], 2 * per_node)
        return done[backend, per_node]

    return run


def max_difference(a: dict, b: dict) -> float:
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.mark.parametrize("backend,per_node", [("ddp", 1), ("zero2", 1), ("zero3", 1), ("ddp", 2)])
def test_two_nodes_train_the_update_one_node_trains(backend, per_node, one_node, two_nodes, tiny_llama_path):
    """Shared output_dir (both nodes run in one folder). 2 x 2 halves the per-process batch: the same 16 samples."""
    ranks = two_nodes(backend, per_node)
    assert all(r["world"] == 2 * per_node for r in ranks)
    for r in ranks[1:]:
        assert max_difference(ranks[0]["weights"], r["weights"]) == 0.0, "replicas diverged"
    reference = one_node[0]["weights"]
    initial = {n: p.detach() for n, p in load_model(tiny_llama_path).named_parameters()}
    scale = max(float((reference[n] - initial[n]).abs().max()) for n in reference)
    worst = max_difference(ranks[0]["weights"], reference)
    print(f"INVARIANCE 2 nodes x {per_node} {backend}: max |w - w_1node| = {worst:.3g} (largest update {scale:.3g})")
    assert scale > 1e-3, "the reference did not train"
    assert worst <= 1e-4 * scale + 1e-7, f"2 nodes x {per_node} ({backend}) differ from 1 node by {worst:.3g}"
    if backend == "ddp" and per_node == 1:  # the same 2 ranks and the same gloo all-reduce: bit for bit
        assert worst == 0.0
    losses = [[r["loss"] for r in result["log"] if "loss" in r] for result in (ranks[0], one_node[0])]
    assert len(losses[0]) == STEPS and losses[0] == pytest.approx(losses[1], abs=1e-6)


@pytest.mark.parametrize("backend", ["ddp", "zero3"])
def test_node_local_disks_resume_exactly_after_kill_9_of_one_node(
    backend, one_node, two_nodes, tiny_llama_path, tmp_path
):
    """save_on_each_node, one folder per node: node 1 is killed after checkpoint-1, both restart with resume (DDP:
    first with node 1's checkpoint hidden, which is refused). Under
    ZeRO-3 each node's copy holds its own process's parameter and optimizer shards (DeepSpeed's node-local storage)."""
    spec = with_config(SPEC, save_strategy="steps", save_steps=1, save_on_each_node=True)
    spec = {**spec, "resume": True}
    folders = [tmp_path / "node0", tmp_path / "node1"]
    procs = start_nodes(backend, tiny_llama_path, spec, folders)
    wait_for(lambda: (folders[1] / "out/run0/checkpoint-1/trainer_state.json").is_file(), procs[1])
    kill9(procs[1])
    assert procs[0].wait(timeout=120) != 0, "node 0 went on without node 1"
    for folder in folders:  # each node published its own copy
        assert (folder / "out/run0/checkpoint-1/trainer_state.json").is_file()
        assert not (folder / f"out/run0/checkpoint-{STEPS}").exists()
    if backend == "ddp":  # node 1's disk without the checkpoint: a restart that would resume node 0 alone is refused
        hidden = folders[1] / "hidden"
        (folders[1] / "out/run0/checkpoint-1").rename(hidden)
        codes = [p.wait(timeout=300) for p in start_nodes(backend, tiny_llama_path, spec, folders)]
        log = (folders[0] / "launch.log").read_text()
        assert codes[0] != 0 and codes[1] != 0 and "would resume from different checkpoints" in log, log[-3000:]
        assert "process 1: no checkpoint" in log, log[-3000:]
        hidden.rename(folders[1] / "out/run0/checkpoint-1")
    wait_all(start_nodes(backend, tiny_llama_path, spec, folders), folders)
    for folder in folders:
        assert (folder / f"out/run0/checkpoint-{STEPS}/trainer_state.json").is_file()
        assert not list((folder / "out/run0").glob(".hf_grpo_nodes/*"))
    ranks = rank_results(folders, 2)
    if backend == "ddp":  # the uninterrupted run is the single-node one, bit for bit (see the test above)
        for rank, result in enumerate(ranks):
            for name, weight in one_node[rank]["weights"].items():
                assert torch.equal(result["weights"][name], weight), f"rank {rank}: {name} differs after the resume"
        return
    expected = two_nodes(backend)  # an uninterrupted 2-node ZeRO-3 run
    for rank, result in enumerate(ranks):
        for name, weight in expected[rank]["weights"].items():
            assert torch.equal(result["weights"][name], weight), f"rank {rank}: {name} differs after the resume"


@pytest.mark.parametrize("layout", ["shared-with-save_on_each_node", "node-local-without"])
def test_a_filesystem_setting_that_would_lose_or_race_checkpoints_is_refused(layout, tiny_llama_path, tmp_path):
    shared = layout.startswith("shared")
    spec = with_config(SPEC, save_strategy="steps", save_steps=1, save_on_each_node=shared)
    folders = [tmp_path, tmp_path] if shared else [tmp_path / "node0", tmp_path / "node1"]
    procs = start_nodes("ddp", tiny_llama_path, spec, folders)
    codes = [p.wait(timeout=300) for p in procs]
    logs = "".join((f / "launch.log").read_text() for f in dict.fromkeys(folders))
    assert all(c != 0 for c in codes), logs[-3000:]
    expected = "one filesystem seen by all 2 nodes" if shared else "is not shared by the 2 nodes"
    assert expected in logs, logs[-3000:]
    assert not list(Path(tmp_path).rglob("checkpoint-*"))


def test_train_py_runs_on_two_nodes_from_the_planners_commands(tiny_llama_path, tmp_path):
    """The real entry point, `train.py --recipe`, as `hf-grpo plan` prints it for 2 nodes."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(
        f"model_name_or_path: {tiny_llama_path}\ndataset_name: arithmetic:32\n"
        "reward_funcs: [hf_grpo.evaluation.final_number_reward]\n"
        "generation_backend: hf\nnum_generations: 4\nper_device_train_batch_size: 4\nmax_completion_length: 8\n"
        "max_steps: 1\nheldout_eval_samples: 0\nsave_strategy: 'no'\nreport_to: none\noutput_dir: outputs/tiny\n"
    )
    commands = plan_launch(
        trainer_hosts=["127.0.0.1", "127.0.0.1"],
        processes_per_node=1,
        accelerate_config=str(ROOT / "accelerate_configs/ddp.yaml"),
        script=str(ROOT / "train.py"),
        recipe=str(recipe),
        main_process_port=free_port(),
        accelerate_args=["--mixed_precision", "no"],  # the DeepSpeed configs ask for bf16; the reference is fp32
    )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
    }
    procs = [
        subprocess.Popen(
            list(c.argv),
            cwd=tmp_path,
            env={**env, **c.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for c in commands
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    state = json.loads((tmp_path / "outputs/tiny/trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert (tmp_path / "outputs/tiny/model.safetensors").is_file()


def test_colocated_vllm_on_each_node(vllm_tiny_path, tmp_path):
    """ZeRO-3, 2 nodes x 1 process, a colocated vLLM engine in each (both on this host, as two nodes' engines would
    each be on theirs): both engines start and receive every update (the sampled tokens' log-probs match the
    trainer's), with the reference model checked against the policy at the first step."""
    config = {**COLOCATE, "beta": 0.04}
    folders = [tmp_path, tmp_path]
    wait_all(start_nodes("zero3", vllm_tiny_path, {"config": config}, folders), folders)
    r0, r1 = rank_results([tmp_path], 2)
    assert all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items())
    logs = step_logs(r0)
    assert [r["weight_version"] for r in logs] == [0.0, 1.0]
    assert all(r["sampling/logp_difference/mean"] < 1e-3 for r in logs)
    assert logs[0]["kl"] < 1e-3 and 0 < logs[1]["kl"] < 1.0
