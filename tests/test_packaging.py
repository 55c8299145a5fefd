"""setup.cfg declares supported ranges, constraints.txt the one tested set: the pins lie in the ranges, every declared
package is pinned, and pip resolving `pip install .` keeps a supported torch that is already installed.

The resolution runs pip itself (`--dry-run --no-index`, no configuration file), so it reads only what is installed in
this interpreter's environment and never downloads. "A different supported torch" is a distribution record (a
``torch-<version>.dist-info`` folder with its METADATA) placed first on the path: pip decides from installed metadata,
and a second multi-GB torch build cannot be installed offline. Nothing imports it.
"""

import configparser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def declared_requirements() -> dict[str, list[Requirement]]:
    """setup.cfg's install_requires (key "") and each extra's requirements."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")

    def parse(text: str) -> list[Requirement]:
        return [
            Requirement(line.strip()) for line in text.splitlines() if line.strip() and not line.strip().startswith("#")
        ]

    groups = {"": parse(cfg["options"]["install_requires"])}
    groups.update({extra: parse(text) for extra, text in cfg["options.extras_require"].items()})
    return groups


def constraints() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"constraints.txt pins exact versions, got {line!r}"
            pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


def test_every_pin_lies_in_its_declared_range():
    pins = constraints()
    checked = 0
    for group, reqs in declared_requirements().items():
        for req in reqs:
            name = canonicalize_name(req.name)
            assert name in pins, f"{req} (extra {group or 'none'}) has no pin in constraints.txt"
            assert req.specifier.contains(pins[name]), (
                f"constraints.txt pins {name}=={pins[name]}, outside setup.cfg's {req} (extra {group or 'none'})"
            )
            checked += 1
    assert checked >= 20


def test_ranges_are_ranges_with_a_ceiling_on_the_core_stack():
    base = {canonicalize_name(r.name): r for r in declared_requirements()[""]}
    for name in ("torch", "transformers", "accelerate", "datasets", "math-verify"):
        ops = {spec.operator for spec in base[name].specifier}
        assert ops == {">=", "<"}, f"{base[name]}: expected a lower bound and an untested-release ceiling"
    assert base["torch"].specifier.contains("2.12.0") and not base["torch"].specifier.contains("2.14.0")


def _dry_run(tmp_path: Path, torch_record: str | None) -> subprocess.CompletedProcess:
    """`pip install --dry-run .` against this environment, offline; with ``torch_record`` a torch of that version is
    what pip finds installed."""
    project = tmp_path / "project"
    (project / "hf_grpo").mkdir(parents=True)
    for name in ("setup.cfg", "setup.py", "README.md"):  # metadata only: no build in the worktree
        shutil.copy(ROOT / name, project / name)
    shutil.copy(ROOT / "hf_grpo" / "__init__.py", project / "hf_grpo" / "__init__.py")
    # No configuration, no PIP_* variables (a PIP_FIND_LINKS would offer wheels): only what is installed counts.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    if torch_record is not None:
        site = tmp_path / "site"
        record = site / f"torch-{torch_record}.dist-info"
        record.mkdir(parents=True)
        (record / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_record}\n")
        (record / "INSTALLER").write_text("pip\n")
        env["PYTHONPATH"] = str(site)
    report = tmp_path / "report.json"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-index",
            "--no-build-isolation",
            "--quiet",
            "--report",
            str(report),
            str(project),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _installs(tmp_path: Path) -> set[str]:
    report = json.loads((tmp_path / "report.json").read_text())
    return {canonicalize_name(item["metadata"]["name"]) for item in report["install"]}


@pytest.mark.slow
@pytest.mark.parametrize("torch_record", [None, "2.12.0"])
def test_pip_install_keeps_an_installed_supported_torch(tmp_path, torch_record):
    result = _dry_run(tmp_path, torch_record)
    assert result.returncode == 0, result.stderr
    assert _installs(tmp_path) == {"hf-grpo"}  # torch and every other dependency: already satisfied


@pytest.mark.slow
def test_pip_install_replaces_an_unsupported_torch(tmp_path):
    # The same resolution with torch 2.5 installed must look for another torch (offline it finds none): the tests
    # above fail for a range that does not admit the installed version, as the old `torch==2.13.0` pin did not.
    result = _dry_run(tmp_path, "2.5.0")
    assert result.returncode != 0
    assert "torch" in result.stderr and "2.14" in result.stderr


def make_recipe(target: str) -> list[str]:
    """The command lines of a Makefile target's recipe (tab-indented lines after ``target:``, comments dropped)."""
    lines = (ROOT / "Makefile").read_text().split(f"\n{target}:", 1)[1].splitlines()[1:]
    recipe = []
    for line in lines:
        if not line.startswith("\t"):
            break
        if not line.strip().startswith("#"):
            recipe.append(line.strip())
    return recipe


def test_make_install_installs_the_constrained_set():
    # Every package install in `make install` goes through constraints.txt (pip's own upgrade aside); CI runs it.
    # (`make test-latest` installs the newest releases on purpose, in its own venv: not this recipe.)
    installs = [line for line in make_recipe("$(STAMP)") if "pip install" in line and "--upgrade pip" not in line]
    assert len(installs) == 3 and all("-c constraints.txt" in line for line in installs), installs
    assert "constraints.txt" in (ROOT / "Makefile").read_text().split("$(STAMP):")[1].splitlines()[0]
    assert all("$(VENV)" not in line and ".venv/" not in line for line in make_recipe("test-latest"))
    assert "make test" in (ROOT / ".ci" / "run").read_text()
