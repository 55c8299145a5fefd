"""The multi-node planner (`hf_grpo.runtime.launching`), `hf-grpo plan`, and the dry runs of launch/slurm.sbatch and
launch/ssh.sh for the 2-node recipe recipes/gpu_multinode_server.yaml: the exact commands each node would run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hf_grpo.cli import main as cli_main
from hf_grpo.runtime.launching import NodeCommand, plan_launch

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "recipes/gpu_multinode_server.yaml"
ZERO3 = "accelerate_configs/zero3.yaml"
MODEL = "Qwen/Qwen2.5-7B-Instruct"  # the recipe's model_name_or_path
SERVE_ARGS = "--dtype bfloat16 --data-parallel-size 8 --max-model-len 2560 --weight-transfer nccl"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # recipe paths are relative to the repository root, as users pass them


def trainer_argv(rank: int, urls: list[str], main_ip: str = "n1") -> list[str]:
    return [
        *f"accelerate launch --config_file {ZERO3} --num_machines 2 --machine_rank {rank}".split(),
        *f"--main_process_ip {main_ip} --main_process_port 29500 --num_processes 16 train.py --recipe {RECIPE}".split(),
        *["--vllm_mode", "server", "--vllm_server_urls", *urls],
    ]


def two_node_plan(**overrides) -> list[NodeCommand]:
    kwargs = dict(
        trainer_hosts=["n1", "n2"],
        server_hosts=["s0", "s1"],
        processes_per_node=8,
        accelerate_config=ZERO3,
        recipe=RECIPE,
    )
    return plan_launch(**{**kwargs, **overrides})


# ---- the planner ----------------------------------------------------------------------------------------------


def test_two_node_recipe_servers_then_trainers_with_exact_commands():
    plan = two_node_plan()
    servers, (rank0, rank1) = plan[:2], plan[2:]
    assert [(c.host, c.role, c.machine_rank) for c in servers] == [("s0", "server", None), ("s1", "server", None)]
    assert servers[0].argv == tuple(f"hf-grpo serve --model {MODEL} --host 0.0.0.0 --port 8000".split())
    assert servers[1].argv == tuple(f"hf-grpo serve --model {MODEL} --host 0.0.0.0 --port 8000".split())
    urls = ["http://s0:8000", "http://s1:8000"]
    assert (rank0.host, rank0.role, rank0.machine_rank) == ("n1", "trainer", 0)
    assert (rank1.host, rank1.role, rank1.machine_rank) == ("n2", "trainer", 1)
    assert list(rank0.argv) == trainer_argv(0, urls)
    assert list(rank1.argv) == trainer_argv(1, urls)
    assert rank0.env == rank1.env == {}


def test_trainer_commands_differ_only_in_machine_rank():
    trainers = [c for c in two_node_plan(trainer_hosts=["a", "b", "c", "d"]) if c.role == "trainer"]
    at = trainers[0].argv.index("--machine_rank") + 1
    assert [c.argv[at] for c in trainers] == ["0", "1", "2", "3"]
    assert len({c.argv[:at] + c.argv[at + 1 :] for c in trainers}) == 1
    assert {c.argv[c.argv.index("--num_processes") + 1] for c in trainers} == {"32"}


def test_script_args_serve_args_and_ports_reach_their_commands():
    plan = two_node_plan(
        script_args=["--max_steps", "5"], serve_args=SERVE_ARGS.split(), server_port=9000, main_process_port=29600
    )
    assert plan[0].argv[-10:] == ("--port", "9000", *SERVE_ARGS.split())
    assert plan[2].argv[-5:] == ("--vllm_server_urls", "http://s0:9000", "http://s1:9000", "--max_steps", "5")
    assert plan[2].argv[plan[2].argv.index("--main_process_port") + 1] == "29600"


def test_loopback_servers_get_distinct_ports_and_bind_loopback():
    plan = two_node_plan(trainer_hosts=["127.0.0.1", "127.0.0.1"], server_hosts=["127.0.0.1", "127.0.0.1"])
    servers = [c for c in plan if c.role == "server"]
    assert [c.argv[c.argv.index("--port") + 1] for c in servers] == ["8000", "8001"]
    assert {c.argv[c.argv.index("--host") + 1] for c in servers} == {"127.0.0.1"}
    urls = plan[2].argv[plan[2].argv.index("--vllm_server_urls") + 1 :]
    assert urls == ("http://127.0.0.1:8000", "http://127.0.0.1:8001")


def test_a_repeated_host_among_others_never_repeats_host_and_port():
    plan = two_node_plan(server_hosts=["a", "b", "a", "localhost"])
    pairs = [(c.host, c.argv[c.argv.index("--port") + 1]) for c in plan if c.role == "server"]
    assert pairs == [("a", "8000"), ("b", "8000"), ("a", "8001"), ("localhost", "8000")]
    assert plan[3].argv[plan[3].argv.index("--host") + 1] == "127.0.0.1"


def test_model_comes_from_the_argument_or_the_recipe():
    assert two_node_plan(model="other/model")[0].argv[3] == "other/model"
    # No servers: no model needed, and no server flags for the trainers.
    alone = plan_launch(trainer_hosts=["n1"], processes_per_node=1, accelerate_config=ZERO3)
    assert [c.role for c in alone] == ["trainer"]
    assert " ".join(alone[0].argv) == (
        f"accelerate launch --config_file {ZERO3} --num_machines 1 --machine_rank 0 --main_process_ip n1 "
        "--main_process_port 29500 --num_processes 1 train.py"
    )


def test_shell_line_quotes_words_and_prefixes_the_environment():
    command = NodeCommand("h", "trainer", 0, ("train.py", "--system_prompt", "be brief"), {"NCCL_DEBUG": "INFO x"})
    assert command.shell() == "NCCL_DEBUG='INFO x' train.py --system_prompt 'be brief'"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"trainer_hosts": []}, "trainer_hosts: expected at least one host, got none"),
        ({"processes_per_node": 0}, "processes_per_node: expected an integer >= 1, got 0"),
        ({"server_port": 0}, "server_port: expected a port in 1..65535, got 0"),
        ({"main_process_port": 70000}, "main_process_port: expected a port in 1..65535, got 70000"),
        # The second server on the same host would need port 65536.
        ({"server_port": 65535, "server_hosts": ["h", "h"]}, "server_port: expected a port in 1..65535, got 65536"),
        ({"recipe": "no/such.yaml"}, "recipe: recipe file no/such.yaml does not exist"),
        ({"recipe": None}, "model: the servers need a model"),
        ({"serve_args": ["--port", "1"]}, "serve_args: must not set --host, --port or --model"),
    ],
)
def test_bad_arguments_are_value_errors_naming_the_argument(overrides, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        two_node_plan(**overrides)


def test_a_recipe_without_a_model_is_named(tmp_path):
    recipe = tmp_path / "no_model.yaml"
    recipe.write_text("learning_rate: 1.0e-6\n")
    with pytest.raises(ValueError, match=re.escape(f"model: recipe {recipe} has no model_name_or_path")):
        two_node_plan(recipe=str(recipe))


# ---- hf-grpo plan ---------------------------------------------------------------------------------------------

PLAN = ["plan", "--trainer-hosts", "n1,n2", "--server-hosts", "s0", "--processes-per-node", "8"]
PLAN += ["--accelerate-config", ZERO3, "--recipe", RECIPE]
RANK0 = " ".join(trainer_argv(0, ["http://s0:8000"]))
RANK1 = " ".join(trainer_argv(1, ["http://s0:8000"]))
SERVER = f"hf-grpo serve --model {MODEL} --host 0.0.0.0 --port 8000"


def test_plan_prints_tab_separated_lines(capsys):
    assert cli_main([*PLAN, "--format", "tsv"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"s0\tserver\t-\t{SERVER}",
        f"n1\ttrainer\t0\t{RANK0}",
        f"n2\ttrainer\t1\t{RANK1}",
    ]


def test_plan_prints_commented_shell_lines_and_passes_script_args(capsys):
    assert cli_main([*PLAN, "--serve-args=--dtype bfloat16", "--", "--max_steps", "5"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "# s0 (server)",
        f"{SERVER} --dtype bfloat16",
        "# n1 (trainer rank 0)",
        f"{RANK0} --max_steps 5",
        "# n2 (trainer rank 1)",
        f"{RANK1} --max_steps 5",
    ]


def test_plan_picks_one_node_or_one_role(capsys):
    assert cli_main([*PLAN, "--node", "2", "--format", "tsv"]) == 0
    assert capsys.readouterr().out == f"n2\ttrainer\t1\t{RANK1}\n"
    assert cli_main([*PLAN, "--role", "server", "--format", "tsv"]) == 0
    assert capsys.readouterr().out == f"s0\tserver\t-\t{SERVER}\n"


@pytest.mark.parametrize(
    "change, flag",
    [
        (["--processes-per-node", "0"], "--processes-per-node"),
        (["--processes-per-node", "eight"], "--processes-per-node"),
        (["--trainer-hosts", ","], "--trainer-hosts"),
        (["--server-port", "99999"], "--server-port"),
        (["--main-process-port", "0"], "--main-process-port"),
        (["--recipe", "no/such.yaml"], "--recipe"),
        (["--node", "3"], "--node"),
        (["--format", "json"], "--format"),
    ],
)
def test_plan_bad_input_exits_2_with_one_line_naming_the_flag(capsys, change, flag):
    try:
        code = cli_main([*PLAN, *change])
    except SystemExit as e:  # argparse's own checks (types, choices)
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1 and flag in err and err.startswith("hf-grpo plan: error: "), err


# ---- the launch scripts' dry runs -----------------------------------------------------------------------------


def dry_run(script: str, *args: str, **variables: str) -> subprocess.CompletedProcess:
    """`bash launch/<script>` with DRY_RUN=1 and only these variables set: nothing from the caller's environment
    (a RECIPE or SLURM_* of the machine running the tests) may change the commands. PATH holds this venv's hf-grpo."""
    path = os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin"
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), "DRY_RUN": "1", **variables}
    return subprocess.run(
        ["bash", f"launch/{script}", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_slurm_dry_run_prints_each_nodes_exact_command():
    result = dry_run("slurm.sbatch", NODES="n0 n1 n2", SERVER_NODES="1")
    assert result.returncode == 0, result.stderr
    srun = "srun --nodes=1 --ntasks=1 -w"
    assert result.stdout.splitlines() == [
        "# n0 (server)",
        f"{srun} n0 bash -c 'cd {ROOT} && {SERVER} {SERVE_ARGS}'",
        "# n1 (trainer rank 0)",
        f"{srun} n1 bash -c 'cd {ROOT} && {' '.join(trainer_argv(0, ['http://n0:8000']))}'",
        "# n2 (trainer rank 1)",
        f"{srun} n2 bash -c 'cd {ROOT} && {' '.join(trainer_argv(1, ['http://n0:8000']))}'",
    ]


def test_ssh_dry_run_prints_each_hosts_exact_command():
    result = dry_run("ssh.sh", "--max_steps", "5", TRAINER_HOSTS="n1 n2", SERVER_HOSTS="s0 s1", RECIPE=RECIPE)
    assert result.returncode == 0, result.stderr
    ssh = "ssh -tt -o BatchMode=yes"
    urls = ["http://s0:8000", "http://s1:8000"]
    assert result.stdout.splitlines() == [
        "# s0 (server)",
        f"{ssh} s0 'cd {ROOT} && {SERVER} {SERVE_ARGS}'",
        "# s1 (server)",
        f"{ssh} s1 'cd {ROOT} && {SERVER} {SERVE_ARGS}'",
        "# n1 (trainer rank 0)",
        f"{ssh} n1 'cd {ROOT} && {' '.join(trainer_argv(0, urls))} --max_steps 5'",
        "# n2 (trainer rank 1)",
        f"{ssh} n2 'cd {ROOT} && {' '.join(trainer_argv(1, urls))} --max_steps 5'",
    ]


@pytest.mark.parametrize(
    "script, variables, message",
    [
        ("slurm.sbatch", {"NODES": "n0 n1", "SERVER_NODES": "2"}, "SERVER_NODES=2 leaves no training node"),
        ("slurm.sbatch", {}, "submit with sbatch, or set NODES"),
        ("slurm.sbatch", {"NODES": "n0 n1", "SERVER_NODES": "1", "PROCESSES_PER_NODE": "0"}, "--processes-per-node"),
        ("ssh.sh", {}, "set TRAINER_HOSTS"),
        ("ssh.sh", {"TRAINER_HOSTS": "n1", "RECIPE": "no/such.yaml"}, "--recipe: recipe file"),
    ],
)
def test_dry_run_bad_settings_exit_2_naming_them(script, variables, message):
    result = dry_run(script, **variables)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stdout == ""
