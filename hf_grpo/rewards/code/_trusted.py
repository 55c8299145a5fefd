"""Imports in the tests' process that the candidate cannot plant. Standard library only.

Preloaded into the sandbox zygote as ``_hf_grpo_trusted``; :func:`lock_imports` runs in the harness's parent (the
tests' process) right after it forked the candidate's process, before the tests arrive.

Why: the sandbox puts the program's working directory first on ``sys.path`` (so a program can import its own
files), and the candidate can write there, and to ``/tmp``. A test that imports a module not already loaded (``import
unittest``, ``cmath``, ``numpy.testing``) would then execute the candidate's file in the process that writes the
verdict. After :func:`lock_imports`:

* ``sys.path`` holds only absolute directories this process cannot write (read-only mounts with namespaces; root's
  files under the rlimits fallback), and the import caches are cleared;
* every module found on it is checked once more before it runs: neither its file, nor its cached bytecode, nor the
  directories holding them may be writable by this process (a writable ``__pycache__`` could hold planted bytecode).
  A module that fails the check is refused with ``ImportError`` saying why, and the refusal is recorded.
"""

import importlib.machinery
import os
import sys

refusals = []


def _writable(path):
    """Whether the candidate could have written ``path``: inside the directories the sandbox says a program can
    write (``HF_GRPO_SANDBOX_WRITABLE``, set before the harness ran, out of the candidate's reach), or, where it does
    not say (rlimits mode without Landlock), whenever this process's uid may write it."""
    if path is None:
        return False
    fence = os.environ.get("HF_GRPO_SANDBOX_WRITABLE")
    if fence is None:
        return os.access(path, os.W_OK)
    path = os.path.realpath(path)
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in fence.split(os.pathsep) if d)


def _unsafe(spec):
    """Why ``spec`` must not run here, or None."""
    for path in (spec.origin if spec.has_location else None, spec.cached):
        if path is None:
            continue
        for where in (path, os.path.dirname(path)):
            if _writable(where):
                return f"{where} is writable by the candidate's uid"
    for location in spec.submodule_search_locations or ():
        if _writable(location):
            return f"{location} is writable by the candidate's uid"
    return None


class GuardedPathFinder:
    """``PathFinder`` over the locked ``sys.path``, refusing modules whose files the candidate could have written."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None:
            return None
        reason = _unsafe(spec)
        if reason is not None:
            refusals.append(f"import {name}: {reason}")
            raise ImportError(f"refused to import {name} in the tests' process: {reason}", name=name)
        return spec

    @classmethod
    def invalidate_caches(cls):
        importlib.machinery.PathFinder.invalidate_caches()


def trusted_path(entries):
    cwd = os.getcwd()
    kept = []
    for entry in entries:
        if not entry or not os.path.isabs(entry) or entry == cwd or entry.startswith(cwd + os.sep):
            continue
        if os.path.isdir(entry) and not _writable(entry):
            kept.append(entry)
    return kept


def lock_imports():
    sys.path[:] = trusted_path(sys.path)
    for entry in list(sys.path_importer_cache):  # finders for what was dropped (the working directory) go too
        if entry not in sys.path:
            del sys.path_importer_cache[entry]
    sys.meta_path[:] = [
        GuardedPathFinder if finder is importlib.machinery.PathFinder else finder for finder in sys.meta_path
    ]


def import_module(name):
    """``name`` imported through the locked path (call :func:`lock_imports` first); ImportError if refused."""
    __import__(name)
    return sys.modules[name]
