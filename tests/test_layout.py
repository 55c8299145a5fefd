"""The package's shape: packages in layers with no import running back up, no import circles, no helper reading the
trainer's private state, and every import path the documentation names still importable.

Run as a script for the counts the closing notes quote: ``python tests/test_layout.py``.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hf_grpo"

# Lowest first. A module may import from its own unit and from units earlier in this list, never from a later one
# (`errors` is the one leaf every layer may use). The top-level entry points come last, `cli` above them all. A unit
# is a package, or one module of `trl_compat`, whose modules adapt parts at four layers (its docstring).
LAYERS = [
    "errors",
    "algorithms",
    "sandbox",
    "runtime",
    "models",
    "data",
    "vision",
    "generation",
    "trl_compat.fields",
    "trl_compat.config",
    "config",
    "rewards",
    "agents",
    "reporting",
    "rollout",
    "learner",
    "evaluation",
    "trl_compat.trainer",
    "trainer",
    "train",
    "envcheck",
    "cli",
]

# Prose files whose import paths are public (README, docs) and recipes (dotted reward paths).
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RECIPES = sorted((ROOT / "recipes").rglob("*.yaml"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """``module -> modules of hf_grpo it imports``, from every import statement (module level or inside a function:
    either runs)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:  # `from . import x` imports the module x
                    sub = f"{target}.{alias.name}"
                    targets.add(sub if sub in modules else target)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def unit(module: str) -> str | None:
    parts = module.split(".")
    if ".".join(parts[1:3]) in LAYERS:  # a module that is a unit of its own
        return ".".join(parts[1:3])
    if len(parts) == 2 and any(layer.startswith(f"{parts[1]}.") for layer in LAYERS):
        return None  # the `__init__` of a package whose modules are units: it imports nothing (checked below)
    return parts[1] if len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    found = []
    for source, targets in graph.items():
        for target in targets:
            a, b = unit(source), unit(target)
            if a is None or a == b or b == "errors":  # the root package imports lazily; errors is the leaf
                continue
            if a not in rank or b not in rank or rank[b] > rank[a]:
                found.append((source, target))
    return sorted(found)


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm), package `__init__` edges
    included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def private_trainer_reads() -> list[str]:
    """``trainer._x`` anywhere in the package but the trainer itself."""
    return [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "trainer.py" or p.parent != PACKAGE
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\btrainer\._", line)
    ]


def test_no_import_runs_back_up_a_layer():
    graph = import_graph()
    assert set(filter(None, map(unit, graph))) <= set(LAYERS), "a new package or top-level module needs its layer"
    assert graph["hf_grpo.trl_compat"] == set(), "trl_compat/__init__.py would tie its modules' layers together"
    assert upward_imports(graph) == []


def test_no_import_circles():
    assert import_circles(import_graph()) == []


def test_the_checks_see_a_circle_and_an_upward_import():
    """The checks themselves: a planted circle and a planted upward import are found."""
    graph = {
        "hf_grpo.data.a": {"hf_grpo.data.b"},
        "hf_grpo.data.b": {"hf_grpo.data.a"},
        "hf_grpo.algorithms.x": {"hf_grpo.trainer"},
        "hf_grpo.trainer": set(),
    }
    assert import_circles(graph) == [["hf_grpo.data.a", "hf_grpo.data.b"]]
    assert upward_imports(graph) == [("hf_grpo.algorithms.x", "hf_grpo.trainer")]


def test_no_helper_reads_the_trainers_private_state():
    assert private_trainer_reads() == []


# The pure-tensor and loss layers take records (settings objects, typed batches) rather than long parameter lists.
MAX_PARAMETERS = 8
NARROW_PACKAGES = ("algorithms", "learner")


def wide_functions(source: str, where: str) -> list[str]:
    """``where:function (n parameters)`` for each function in ``source`` with more than MAX_PARAMETERS parameters
    (``self``/``cls`` not counted; ``*args``/``**kwargs`` count one each)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + [x.arg for x in (a.vararg, a.kwarg) if x]
            n = len(names) - (names[:1] in (["self"], ["cls"]))
            if n > MAX_PARAMETERS:
                found.append(f"{where}:{node.name} ({n} parameters)")
    return found


def test_no_function_in_the_loss_layers_takes_more_than_8_parameters():
    found = [
        hit
        for package in NARROW_PACKAGES
        for path in sorted((PACKAGE / package).glob("*.py"))
        for hit in wide_functions(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == []
    planted = "def f(a, b, c, d, e, f, g, h, *, i): pass\nclass C:\n    def m(self, a, b, c, d, e, f, g, h): pass\n"
    assert wide_functions(planted, "x") == ["x:f (9 parameters)"]


# The optional contract of reward objects (documented in hf_grpo/rewards/runner.py, used by CodeReward): a reward
# object may expose ``last_stats`` and ``last_details`` about its own last call, which the runner copies into the
# call's RewardResult. It is the one boundary where a ``last_*`` attribute is read (user code's, at the call it made),
# and only the runner reads it.
REWARD_OBJECT_CONTRACT = {"last_stats", "last_details"}
REWARD_RUNNER = "hf_grpo/rewards/runner.py"


def cross_object_last_reads(source: str, where: str) -> list[str]:
    """``<something other than self>.last_*`` reads and ``getattr(x, "last_*")``: state one object leaves for another
    to read back after a call (the side channel a returned record replaces)."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("last_") and isinstance(node.ctx, ast.Load):
            name = node.attr
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                continue
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("last_")
        ):
            name = node.args[1].value
        else:
            continue
        if not (where == REWARD_RUNNER and name in REWARD_OBJECT_CONTRACT):
            hits.append(f"{where}:{node.lineno} reads {name}")
    return hits


def test_no_module_reads_another_objects_last_attributes():
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        for hit in cross_object_last_reads(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == []
    planted = "x = runner.last_extra\ny = getattr(r, 'last_timings')\nz = self.last_seen\nw = fn.last_stats\n"
    seen = ["1 reads last_extra", "2 reads last_timings"]
    assert cross_object_last_reads(planted, "x") == [f"x:{hit}" for hit in [*seen, "4 reads last_stats"]]
    assert cross_object_last_reads(planted, REWARD_RUNNER) == [f"{REWARD_RUNNER}:{hit}" for hit in seen]


def args_writes(source: str, where: str) -> list[str]:
    """Assignments to an attribute of ``args`` / ``self.args`` (or deeper: ``args.accelerator_config.x``)."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for sub in ast.walk(target):
                base = sub
                while isinstance(base, ast.Attribute):
                    base = base.value
                    if (isinstance(base, ast.Name) and base.id == "args") or (
                        isinstance(base, ast.Attribute) and base.attr == "args"
                    ):
                        hits.append(f"{where}: {ast.unparse(sub)}")
                        break
                else:
                    continue
                break
    return hits


def test_agents_use_the_generator_interface_only():
    """Multi-turn rollouts go through `Generator.turns`: nothing in agents/ imports a concrete backend (to dispatch
    on its class or reach into its engine)."""
    backends = {"hf", "continuous", "vllm_colocate", "vllm_server"}
    graph = import_graph()
    reach = sorted(
        f"{source} imports {target}"
        for source, targets in graph.items()
        if unit(source) == "agents"
        for target in targets
        if unit(target) == "generation" and target.rsplit(".", 1)[-1] in backends
    )
    assert reach == []


CONFIG_LAYER = ("config", "trl_compat.fields", "trl_compat.config")  # the config and its TRL fields' resolution


def test_config_errors_outside_config_name_the_part_that_raised_them():
    """A config value refused outside the config's layer (`CONFIG_LAYER`), once the model, the launch or the Hub is
    known, says which part refused it: ``GRPOConfig (checked by <module>): ...``, not a bare ``GRPOConfig: ...``."""
    bare = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if unit(module_name(path)) not in CONFIG_LAYER
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if '"GRPOConfig: ' in line
    ]
    assert bare == [], "start the message with GRPOConfig (checked by {__name__}): "


def test_the_config_is_written_only_inside_config():
    found = {
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if unit(module_name(path)) not in CONFIG_LAYER
        for hit in args_writes(path.read_text(), str(path.relative_to(ROOT)))
    }
    assert found == set(), "write the resolved value into a run-state object, not into args"
    planted = "args.x = 1\nself.args.y, z = 2, 3\nargs.a.b = 4\nargs = other\nx.args_like = 5\n"
    assert sorted(args_writes(planted, "p")) == ["p: args.a.b", "p: args.x", "p: self.args.y"]


def test_imports_between_tests():
    """Shared fixtures live in tests/helpers/ or a conftest.py: no test imports another test file, and each test file
    sits in the folder of the package it tests (tests/<package>/): test_<module>.py for a module tested on its own,
    a behaviour's name for what crosses modules (README, "Layout")."""
    tests = ROOT / "tests"
    imported = [
        f"{path.relative_to(ROOT)} imports {node.module}"
        for path in sorted(tests.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ImportFrom) and node.module and re.search(r"(^|\.)test_\w+$", node.module)
    ]
    assert imported == []
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    # Folders that gather tests across packages: multi-process runs, TRL's scripts, the bench smokes.
    folders = packages | {"distributed", "trl_examples", "bench"}
    strays = [
        str(path.relative_to(ROOT))
        for path in sorted(tests.rglob("test_*.py"))
        if path.parent != tests and path.relative_to(tests).parts[0] not in folders
    ]
    assert strays == []


def test_every_package_says_its_job_in_its_docstring_and_the_readme():
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout") :]
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        package = init.parent.name
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.splitlines()[0]) > 20, f"hf_grpo/{package}/__init__.py needs a docstring saying its job"
        assert re.search(rf"^\s+{package}/\s+\S", layout, re.M), f"README's Layout does not list {package}/"


def documented_paths() -> set[str]:
    """Dotted ``hf_grpo.`` paths the docs and recipes name: import statements, ``python -m`` modules, and names in
    prose (``hf_grpo.evaluation.final_number_reward``)."""
    paths: set[str] = set()
    for path in [*DOCS, *RECIPES]:
        text = path.read_text()
        for module, names in re.findall(r"from (hf_grpo[\w.]*) import ([\w, ]+)", text):
            paths.update(f"{module}.{n.split(' as ')[0].strip()}" for n in names.split(",") if n.strip())
        paths.update(re.findall(r"\bhf_grpo(?:\.\w+)+", text))
    return {p.rstrip(".") for p in paths}


def resolve(dotted: str) -> object:
    """``dotted`` walked from the top: each part an attribute of the previous object, or else its submodule."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, attr in enumerate(parts[1:], 2):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[:i]))
    return obj


def test_every_documented_import_path_resolves():
    paths = documented_paths()
    # The list: the public API, whatever the docs say today.
    paths |= {
        "hf_grpo.DistributedGRPOTrainer",
        "hf_grpo.GRPOConfig",
        "hf_grpo.data.load_prompt_dataset",
        "hf_grpo.rewards",
        "hf_grpo.RunConfig",
        "hf_grpo.envcheck",
        "hf_grpo.cli.main",
        "hf_grpo.train.main",
        "hf_grpo.evaluation.final_number_reward",
    }
    assert len(paths) > 15
    failures = []
    for dotted in sorted(paths):
        try:
            resolve(dotted)
        except (ImportError, AttributeError) as error:
            failures.append(f"{dotted}: {error!r}")
    assert failures == []


# Paths the docs cite that are not this repository's files.
NOT_OURS = {
    "recipes/x.yaml": "an example in a quoted error message",
    "tests/test_grpo_trainer.py": "TRL's test file",
    # Removed test files whose node ids docs/testing.md maps to the tests that cover them now.
    "tests/distributed/test_ddp.py": "removed (issue 53)",
    "tests/distributed/test_vlm.py": "removed (issue 53)",
    "tests/distributed/test_agents.py": "removed (issue 53)",
    "tests/distributed/test_ref_sync.py": "removed (issue 53)",
    "tests/data/test_arithmetic.py": "moved to tests/data/tasks/ (issue 54)",
    "tests/data/test_code_tasks.py": "moved to tests/data/tasks/ (issue 54)",
}


def test_every_cited_file_path_exists():
    """Paths of this repository's files cited in the docs, docstrings and comments (of the package, tests and
    benches) name files that exist: a move that left a citation behind fails here."""
    sources = [*DOCS, *PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").glob("*")]
    pattern = re.compile(r"\b((?:hf_grpo|tests|bench|recipes)/[\w/.-]+\.(?:py|yaml|sh))")
    cited = {m: path for path in sources if path.is_file() for m in pattern.findall(path.read_text())}
    missing = sorted(
        f"{cited[c].relative_to(ROOT)}: {c}" for c in set(cited) - set(NOT_OURS) if not (ROOT / c).exists()
    )
    assert len(cited) > 20 and missing == []


if __name__ == "__main__":
    graph = import_graph()
    print(f"modules: {len(graph)}  import edges: {sum(map(len, graph.values()))}")
    print(
        f"circles: {len(import_circles(graph))}  imports that run back up: {len(upward_imports(graph))}  "
        f"trainer._ reads outside trainer.py: {len(private_trainer_reads())}"
    )
