"""The mutation catalogue cannot rot between runs of `make mutation-check` (which takes most of an hour): every patch
in tests/mutations/ still applies to the tree, says what it breaks, and names tests that exist. Whether those tests
catch it is what `make mutation-check` checks."""

import ast
import subprocess

import pytest

from tests.mutations.run import ROOT, catalog, escaped

MUTATIONS = catalog()


def test_the_catalogue_covers_the_breakages_docs_testing_md_lists():
    assert len(MUTATIONS) >= 20
    listed = (ROOT / "docs" / "testing.md").read_text()
    assert all(f"`{m.name}`" in listed for m in MUTATIONS), "docs/testing.md lists every mutation"


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_patch_applies_and_names_existing_tests(mutation):
    applied = subprocess.run(["git", "apply", "--check", str(mutation.patch)], cwd=ROOT, capture_output=True, text=True)
    assert applied.returncode == 0, f"{mutation.patch.name} no longer applies: {applied.stderr}"
    assert mutation.what and mutation.tests
    for test in mutation.tests:
        path, _, name = test.partition("::")
        function = name.split("[")[0].split("::")[-1]
        tree = ast.parse((ROOT / path).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert function in defined, f"{mutation.patch.name} names {test}, which is not in {path}"


def test_a_mutation_is_caught_only_when_every_named_test_fails():
    summary = (
        "FAILED suite/a.py::test_x - AssertionError\n"
        "PASSED suite/a.py::test_y[1]\nFAILED suite/a.py::test_y[2] - boom\n"
        "ERROR suite/b.py::test_z - fixture\n"
        "FAILED suite/d.py::test_w[net (tcp + unix)-ns] - AssertionError: got - through\n"
    )
    assert escaped(("suite/a.py::test_x", "suite/b.py::test_z"), summary) == []
    assert escaped(("suite/a.py::test_y",), summary) == ["suite/a.py::test_y"]  # one case passed
    assert escaped(("suite/a.py::test_y[2]",), summary) == []
    assert escaped(("suite/c.py::test_never_ran",), summary) == ["suite/c.py::test_never_ran"]
    assert escaped(("suite/d.py::test_w[net (tcp + unix)-ns]",), summary) == []  # case ids hold spaces
