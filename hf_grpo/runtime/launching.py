"""The commands each node of a multi-node run executes: `hf-grpo serve` on the generation-server nodes, then
``accelerate launch`` on every training node, planned from one recipe.

Why a planner: the Slurm script (``launch/slurm.sbatch``), the SSH script (``launch/ssh.sh``) and the loopback test
all need the same commands, and hand-written per-launcher copies drift apart (a missing ``--machine_rank``, a
server URL list that disagrees with the ports the servers bound). `plan_launch` computes them once, as argv lists;
the scripts only decide *how* to reach a host (``srun -w``, ``ssh``). The invariant users rely on: every training
node's command is the same except ``--machine_rank``.

``hf-grpo plan`` (`main`) prints the plan, as commented shell lines or as ``host<TAB>role<TAB>rank<TAB>command``
for scripts to loop over. Nothing is started here.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import InputError

LOOPBACK = ("127.0.0.1", "localhost")


class PlanError(InputError):
    """A launch argument that cannot be planned; ``argument`` is the keyword (the CLI flag is derived from it)."""

    def __init__(self, argument: str, message: str):
        super().__init__(f"{argument}: {message}")
        self.argument, self.message = argument, message


@dataclass(frozen=True)
class NodeCommand:
    host: str  # where it runs
    role: str  # "server" or "trainer"
    machine_rank: int | None  # trainers: 0..N-1; servers: None
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)  # extra environment (may be empty)

    def shell(self) -> str:
        """One shell line: ``VAR=value ... argv``, each word quoted (no ``cd``: the launcher adds its own)."""
        words = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()] + [shlex.quote(a) for a in self.argv]
        return " ".join(words)


def _check_port(argument: str, port: int) -> None:
    if not 1 <= port <= 65535:
        raise PlanError(argument, f"expected a port in 1..65535, got {port}")


def _recipe_model(recipe: str) -> str:
    """The recipe's ``model_name_or_path``: the servers must serve the policy the trainers train."""
    try:
        values = yaml.safe_load(Path(recipe).read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise PlanError("recipe", f"recipe {recipe} is not valid YAML ({e})".replace("\n", " ")) from None
    model = values.get("model_name_or_path") if isinstance(values, dict) else None
    if not model:
        raise PlanError("model", f"recipe {recipe} has no model_name_or_path; pass the servers' model explicitly")
    return str(model)


def _server_ports(server_hosts: list[str], server_port: int) -> list[int]:
    """``server_port`` on each host; a host listed again (loopback) gets the next port, so no host:port repeats."""
    seen: dict[str, int] = {}
    ports = []
    for host in server_hosts:
        ports.append(server_port + seen.get(host, 0))
        seen[host] = seen.get(host, 0) + 1
    return ports


def _server(host: str, port: int, model: str, serve_args: list[str]) -> NodeCommand:
    # A loopback server needs no other interface; 0.0.0.0 would expose it to the whole network.
    bind = "127.0.0.1" if host in LOOPBACK else "0.0.0.0"
    argv = ("hf-grpo", "serve", "--model", model, "--host", bind, "--port", str(port), *serve_args)
    return NodeCommand(host=host, role="server", machine_rank=None, argv=argv)


def plan_launch(
    *,
    trainer_hosts: list[str],
    processes_per_node: int,
    accelerate_config: str,
    script: str = "train.py",
    script_args: list[str] = (),
    recipe: str | None = None,
    server_hosts: list[str] = (),
    server_port: int = 8000,
    main_process_port: int = 29500,
    serve_args: list[str] = (),
    model: str | None = None,
    accelerate_args: list[str] = (),
) -> list[NodeCommand]:
    """Servers first (one per entry of ``server_hosts``), then one trainer per entry of ``trainer_hosts`` with
    ``machine_rank`` its index; ``trainer_hosts[0]`` is the rendezvous. Raises `PlanError` (a ValueError) naming the
    argument."""
    if not trainer_hosts:
        raise PlanError("trainer_hosts", "expected at least one host, got none")
    if processes_per_node < 1:
        raise PlanError("processes_per_node", f"expected an integer >= 1, got {processes_per_node}")
    _check_port("server_port", server_port)
    _check_port("main_process_port", main_process_port)
    if recipe is not None and not Path(recipe).is_file():
        raise PlanError("recipe", f"recipe file {recipe} does not exist")
    if any(a.split("=", 1)[0] in ("--host", "--port", "--model") for a in serve_args):
        raise PlanError("serve_args", "must not set --host, --port or --model (use server_port and model)")
    ports = _server_ports(list(server_hosts), server_port)
    _check_port("server_port", max(ports, default=server_port))
    if server_hosts and model is None:
        if recipe is None:
            raise PlanError("model", "the servers need a model: pass model or a recipe with model_name_or_path")
        model = _recipe_model(recipe)
    servers = [_server(host, port, model, list(serve_args)) for host, port in zip(server_hosts, ports)]
    n = len(trainer_hosts)
    head = ["accelerate", "launch", "--config_file", accelerate_config, "--num_machines", str(n)]
    tail = ["--main_process_ip", trainer_hosts[0], "--main_process_port", str(main_process_port)]
    tail += ["--num_processes", str(n * processes_per_node), *accelerate_args, script]
    tail += ["--recipe", recipe] if recipe is not None else []
    if servers:
        # A list field takes one word per URL (a single comma-joined word would be read as one URL).
        urls = [f"http://{host}:{port}" for host, port in zip(server_hosts, ports)]
        tail += ["--vllm_mode", "server", "--vllm_server_urls", *urls]
    tail += list(script_args)
    trainers = [
        NodeCommand(host=host, role="trainer", machine_rank=i, argv=(*head, "--machine_rank", str(i), *tail))
        for i, host in enumerate(trainer_hosts)
    ]
    return servers + trainers


# ---- hf-grpo plan ------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Bad input ends in one line naming the flag, and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _hosts(text: str) -> list[str]:
    return [h for h in text.split(",") if h]


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    # Everything after `--` goes to the training script untouched.
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = _Parser(prog="hf-grpo plan", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--trainer-hosts", type=_hosts, required=True, help="Comma-separated; the first is rank 0.")
    parser.add_argument("--processes-per-node", type=int, required=True, help="Training processes (GPUs) per node.")
    parser.add_argument("--accelerate-config", required=True, help="e.g. accelerate_configs/zero3.yaml")
    parser.add_argument("--server-hosts", type=_hosts, default=[], help="Comma-separated `hf-grpo serve` hosts.")
    parser.add_argument("--server-port", type=int, default=8000)
    parser.add_argument("--main-process-port", type=int, default=29500)
    parser.add_argument("--serve-args", default="", help="Extra `hf-grpo serve` flags, one string: --serve-args=...")
    parser.add_argument(
        "--accelerate-args",
        default="",
        help="Extra `accelerate launch` flags before the script, one string: --accelerate-args='--mixed_precision no'",
    )
    parser.add_argument("--recipe", help="Passed to the script; its model_name_or_path is what the servers serve.")
    parser.add_argument("--model", help="The servers' model (default: the recipe's model_name_or_path).")
    parser.add_argument("--script", default="train.py")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--node", type=int, help="Only the K-th command (0-based, in printed order).")
    which.add_argument("--role", choices=("server", "trainer"), help="Only this role's commands.")
    parser.add_argument("--format", choices=("shell", "tsv"), default="shell")
    return parser.parse_args(argv), extra


def _render(command: NodeCommand, fmt: str) -> str:
    if fmt == "tsv":  # "-" for a server's rank: bash's `read` would merge an empty field with the next tab
        rank = "-" if command.machine_rank is None else str(command.machine_rank)
        return "\t".join((command.host, command.role, rank, command.shell()))
    rank = "" if command.machine_rank is None else f" rank {command.machine_rank}"
    return f"# {command.host} ({command.role}{rank})\n{command.shell()}"


def main(argv: list[str] | None = None) -> int:
    args, extra = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        commands = plan_launch(
            trainer_hosts=args.trainer_hosts,
            processes_per_node=args.processes_per_node,
            accelerate_config=args.accelerate_config,
            script=args.script,
            script_args=extra,
            recipe=args.recipe,
            server_hosts=args.server_hosts,
            server_port=args.server_port,
            main_process_port=args.main_process_port,
            serve_args=shlex.split(args.serve_args),
            accelerate_args=shlex.split(args.accelerate_args),
            model=args.model,
        )
    except PlanError as e:
        print(f"hf-grpo plan: error: --{e.argument.replace('_', '-')}: {e.message}", file=sys.stderr)
        return 2
    if args.node is not None:
        if not 0 <= args.node < len(commands):
            print(f"hf-grpo plan: error: --node: expected 0..{len(commands) - 1}, got {args.node}", file=sys.stderr)
            return 2
        commands = [commands[args.node]]
    elif args.role is not None:
        commands = [c for c in commands if c.role == args.role]
    for command in commands:
        print(_render(command, args.format))
    return 0
