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
* **The wrong filesystem setting is refused** before training, on every node: ``save_on_each_node`` on a shared
  directory, and node-local directories without it (`hf_grpo.runtime.nodes`).
* **The real entry point**: `train.py --recipe` through the planner's commands, on 2 nodes.
* **Colocated vLLM on each node** (ZeRO-3). The server fleet across nodes is in tests/generation/test_vllm_server.py.

A pair of node launches costs start-up (about 25 s, both nodes at once), so one pair per layout carries several runs
(train_worker.py ``runs``): the DDP 2 x 1 pair trains the same-update run, then the two refused settings (refused on
every process at the same check, so no node is left waiting: the worker records the refusal and goes on), then the
run whose node 1 is killed; its restart pair first tries the refused restart, then resumes. The ZeRO-3 pair trains
the same-update run, the colocated-vLLM run, then its killed run. A run's ``output_dir`` says where it writes: an
absolute path both nodes see (shared), or a relative one under each node's own folder (node-local).
"""

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from hf_grpo.models import load_model
from tests.helpers.launch import COLOCATE, EXACT_SGD, ROOT, launch, results, step_logs
from tests.helpers.multinode import rank_results, start_nodes, start_planned, wait_all
from tests.helpers.processes import kill9, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

# Two steps: the first is the update compared with one node's; the second is the one the killed run resumes into
# (node 1 is killed once it has published checkpoint-1).
STEPS = 2
SPEC = {"fixed_completions": True, "config": {**EXACT_SGD, "loss_type": "grpo", "max_steps": STEPS}}
KILLED = "out/killed"  # the killed run's output_dir, on each node's own disk
REFUSED_RESTART = "out/restart-without-node-1-s-checkpoint"


def with_config(spec: dict, **config) -> dict:
    return {**spec, "config": {**spec["config"], **config}}


# save_on_each_node, one folder per node, resumed from the newest checkpoint when restarted. Each save waits 1 s
# before it is published (the worker's slow_save), so that node 1 is killed before it can publish checkpoint-2.
NODE_LOCAL = {**with_config(SPEC, save_strategy="steps", save_steps=1, save_on_each_node=True), "resume": True}
KILLED_RUN = {**NODE_LOCAL, "output_dir": KILLED, "slow_save": 1.0}


@dataclass
class Nodes:
    """A layout's 2-node launch pair: each rank's result of each run, by run name; with a killed last run, what the
    kill left and what its restart pair did."""

    folders: list[Path]
    shared: Path  # the folder both nodes see: the shared output_dirs are under it
    runs: dict[str, list[dict]] = field(default_factory=dict)
    missed: str | None = None  # why node 1 was not killed after publishing checkpoint-1
    node0_exit: int | None = None  # node 0's exit status once node 1 was killed
    published_after_kill: list[list[str]] = field(default_factory=list)  # per node: the killed run's checkpoints


def shared_run(nodes_root: Path, name: str, spec: dict) -> dict:
    return {**spec, "output_dir": str(nodes_root / "shared" / name)}


def two_node_runs(backend: str, model: str, root: Path, runs: dict[str, dict], per_node: int = 1) -> Nodes:
    """One launch pair training ``runs`` to the end."""
    nodes = Nodes([root / "node0", root / "node1"], root / "shared")
    procs = start_nodes(backend, model, {"runs": list(runs.values())}, nodes.folders, per_node)
    wait_all(procs, nodes.folders)
    for k, name in enumerate(runs):
        nodes.runs[name] = rank_results(nodes.folders, 2 * per_node, k)
    return nodes


def killed_and_restarted(
    backend: str, model: str, root: Path, runs: dict[str, dict], restart: dict[str, dict], before_restart=None
) -> Nodes:
    """A launch pair training ``runs``, then the killed run: node 1 is killed (kill -9) once it has published
    checkpoint-1. Then ``before_restart(nodes)``, and a restart pair training ``restart``, then the killed run to its
    end (``resumed``)."""
    nodes = Nodes([root / "node0", root / "node1"], root / "shared")
    procs = start_nodes(backend, model, {"runs": [*runs.values(), KILLED_RUN]}, nodes.folders)
    try:
        checkpoint = nodes.folders[1] / KILLED / "checkpoint-1" / "trainer_state.json"
        try:  # after the earlier runs of the pair
            wait_for(checkpoint.is_file, procs[1], timeout=900)
        except AssertionError as e:
            nodes.missed = f"{e}\n{(nodes.folders[1] / 'launch.log').read_text()[-4000:]}"
        kill9(procs[1])
        nodes.node0_exit = procs[0].wait(timeout=120)
    finally:
        for proc in procs:
            kill9(proc)
    for k, name in enumerate(runs):
        nodes.runs[name] = rank_results(nodes.folders, 2, k)
    nodes.published_after_kill = [sorted(p.name for p in (f / KILLED).glob("checkpoint-*")) for f in nodes.folders]
    if nodes.missed is not None:  # nothing to restart from: the kill test fails on ``missed``
        return nodes
    if before_restart is not None:
        before_restart(nodes)
    restart = {**restart, "resumed": KILLED_RUN}
    wait_all(start_nodes(backend, model, {"runs": list(restart.values())}, nodes.folders), nodes.folders)
    for k, name in enumerate(restart):
        nodes.runs[name] = rank_results(nodes.folders, 2, k)
    return nodes


@pytest.fixture(scope="module")
def one_node(tiny_llama_path, tmp_path_factory):
    """The single-node reference: 2 processes, DDP, same batch and seed."""
    folder = tmp_path_factory.mktemp("one-node")
    launch("ddp", tiny_llama_path, folder, SPEC, mixed_precision="no")
    return results(folder)


def hide_node_1s_checkpoint(nodes: Nodes) -> None:
    """A copy of the killed run on each node in which node 1's disk lacks checkpoint-1: a restart there would resume
    node 0 alone (the restart pair's first run, refused)."""
    for folder in nodes.folders:
        shutil.copytree(folder / KILLED, folder / REFUSED_RESTART)
    shutil.rmtree(nodes.folders[1] / REFUSED_RESTART / "checkpoint-1")


@pytest.fixture(scope="module")
def ddp_nodes(tiny_llama_path, tmp_path_factory):
    """DDP, 2 nodes x 1 process: the same-update run (shared output_dir), the two refused filesystem settings, the
    killed run; restarted: the refused restart, then the resume."""
    root = tmp_path_factory.mktemp("ddp-nodes")
    saving = with_config(SPEC, save_strategy="steps", save_steps=1)
    runs = {
        "same-update": shared_run(root, "same-update", SPEC),
        "shared-with-save_on_each_node": {
            **shared_run(root, "refused", with_config(saving, save_on_each_node=True)),
            "mode": "refused",
        },
        "node-local-without": {
            **with_config(saving, save_on_each_node=False),
            "output_dir": "out/refused",
            "mode": "refused",
        },
    }
    restart = {"restart-without-node-1-s-checkpoint": {**NODE_LOCAL, "output_dir": REFUSED_RESTART, "mode": "refused"}}
    return killed_and_restarted("ddp", tiny_llama_path, root, runs, restart, hide_node_1s_checkpoint)


@pytest.fixture(scope="module")
def zero3_nodes(tiny_llama_path, vllm_tiny_path, tmp_path_factory):
    """ZeRO-3, 2 nodes x 1 process: the same-update run, the colocated-vLLM run (its own model and config), the killed
    run; restarted: the resume."""
    root = tmp_path_factory.mktemp("zero3-nodes")
    runs = {
        "same-update": shared_run(root, "same-update", SPEC),
        "colocated-vllm": shared_run(
            root, "colocated-vllm", {"model": vllm_tiny_path, "config": {**COLOCATE, "beta": 0.04}}
        ),
    }
    return killed_and_restarted("zero3", tiny_llama_path, root, runs, {})


@pytest.fixture(scope="module")
def zero2_nodes(tiny_llama_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("zero2-nodes")
    return two_node_runs("zero2", tiny_llama_path, root, {"same-update": shared_run(root, "same-update", SPEC)})


@pytest.fixture(scope="module")
def ddp_2x2_nodes(tiny_llama_path, tmp_path_factory):
    """2 x 2 halves the per-process batch: the same 16 samples."""
    root = tmp_path_factory.mktemp("ddp-2x2-nodes")
    spec = shared_run(root, "same-update", with_config(SPEC, per_device_train_batch_size=4))
    return two_node_runs("ddp", tiny_llama_path, root, {"same-update": spec}, per_node=2)


# (backend, processes per node): the fixture whose launch pair carries that layout's same-update run
LAYOUTS = {
    ("ddp", 1): "ddp_nodes",
    ("zero2", 1): "zero2_nodes",
    ("zero3", 1): "zero3_nodes",
    ("ddp", 2): "ddp_2x2_nodes",
}


def max_difference(a: dict, b: dict) -> float:
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.mark.parametrize("backend,per_node", list(LAYOUTS))
def test_two_nodes_train_the_update_one_node_trains(backend, per_node, one_node, tiny_llama_path, request):
    """Shared output_dir (an absolute path both nodes see). 2 x 2 halves the per-process batch: the same 16
    samples."""
    ranks = request.getfixturevalue(LAYOUTS[backend, per_node]).runs["same-update"]
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
def test_node_local_disks_resume_exactly_after_kill_9_of_one_node(backend, one_node, request):
    """save_on_each_node, one folder per node: node 1 is killed after checkpoint-1, both restart with resume (DDP:
    first with node 1's checkpoint missing from its disk, which is refused on both nodes). Under ZeRO-3 each node's
    copy holds its own process's parameter and optimizer shards (DeepSpeed's node-local storage)."""
    nodes = request.getfixturevalue(f"{backend}_nodes")
    assert nodes.missed is None, f"node 1 was not killed after publishing checkpoint-1: {nodes.missed}"
    assert nodes.node0_exit != 0, "node 0 went on without node 1"
    # each node published its own copy of checkpoint-1, and neither got to the last step
    assert nodes.published_after_kill == [["checkpoint-1"], ["checkpoint-1"]]
    if backend == "ddp":  # node 1's disk without the checkpoint: a restart that would resume node 0 alone is refused
        refused = nodes.runs["restart-without-node-1-s-checkpoint"]
        for rank, result in enumerate(refused):
            error = result.get("stopped", "")
            assert "would resume from different checkpoints" in error, f"rank {rank}: {error or 'not refused'}"
            assert "process 1: no checkpoint" in error, error
    for folder in nodes.folders:
        assert (folder / KILLED / f"checkpoint-{STEPS}/trainer_state.json").is_file()
        assert not list((folder / KILLED).glob(".hf_grpo_nodes/*"))
    ranks = nodes.runs["resumed"]
    # DDP: the uninterrupted run is the single-node one, bit for bit (see the test above); ZeRO-3: an uninterrupted
    # 2-node ZeRO-3 run (the pair's same-update run)
    expected = one_node if backend == "ddp" else nodes.runs["same-update"]
    for rank, result in enumerate(ranks):
        for name, weight in expected[rank]["weights"].items():
            assert torch.equal(result["weights"][name], weight), f"rank {rank}: {name} differs after the resume"


@pytest.mark.parametrize("layout", ["shared-with-save_on_each_node", "node-local-without"])
def test_a_filesystem_setting_that_would_lose_or_race_checkpoints_is_refused(layout, ddp_nodes):
    """Refused on every process (one per node) as the trainer is built: an `InputError` naming the case, and no
    checkpoint written."""
    shared = layout.startswith("shared")
    expected = "one filesystem seen by all 2 nodes" if shared else "is not shared by the 2 nodes"
    for rank, result in enumerate(ddp_nodes.runs[layout]):
        error = result.get("stopped", "")
        assert error.startswith("InputError: ") and expected in error, f"rank {rank}: {error or 'not refused'}"
    output_dirs = [ddp_nodes.shared / "refused"] if shared else [f / "out/refused" for f in ddp_nodes.folders]
    for output_dir in output_dirs:
        assert output_dir.is_dir() and not list(output_dir.rglob("checkpoint-*"))


def test_train_py_runs_on_two_nodes_from_the_planners_commands(tiny_llama_path, tmp_path):
    """The real entry point, `train.py --recipe`, as `hf-grpo plan` prints it for 2 nodes."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(
        f"model_name_or_path: {tiny_llama_path}\ndataset_name: arithmetic:32\n"
        "reward_funcs: [hf_grpo.evaluation.final_number_reward]\n"
        "generation_backend: hf\nnum_generations: 4\nper_device_train_batch_size: 4\nmax_completion_length: 8\n"
        "max_steps: 1\nheldout_eval_samples: 0\nsave_strategy: 'no'\nreport_to: none\noutput_dir: outputs/tiny\n"
    )
    folders = [tmp_path, tmp_path]
    wait_all(start_planned(folders, ROOT / "train.py", recipe=str(recipe)), folders)
    state = json.loads((tmp_path / "outputs/tiny/trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert (tmp_path / "outputs/tiny/model.safetensors").is_file()


def test_colocated_vllm_on_each_node(zero3_nodes):
    """ZeRO-3, 2 nodes x 1 process, a colocated vLLM engine in each (both on this host, as two nodes' engines would
    each be on theirs): both engines start and receive every update (the sampled tokens' log-probs match the
    trainer's), with the reference model checked against the policy at the first step."""
    r0, r1 = zero3_nodes.runs["colocated-vllm"]
    assert all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items())
    logs = step_logs(r0)
    assert [r["weight_version"] for r in logs] == [0.0, 1.0]
    assert all(r["sampling/logp_difference/mean"] < 1e-3 for r in logs)
    assert logs[0]["kl"] < 1e-3 and 0 < logs[1]["kl"] < 1.0
