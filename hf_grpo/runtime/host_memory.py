"""Give freed host memory back to the OS between training steps (CPU training).

glibc's allocator keeps memory that torch frees in its arenas, and after large frees it raises its own mmap
threshold, so later large tensors come from those arenas too: a process's resident memory then ratchets up to the
sum of the peaks of its different phases (generation, log-prob passes, backward) instead of the largest one.
``malloc_trim(0)`` returns the free pages of every arena; it takes a few milliseconds. It runs at each phase
boundary: before the log-prob passes (`PolicyScorer.old_and_reference`), before each micro-batch's loss forward
(`LossStep`), and after each optimizer step. Measured on one step of 2 completions of 1024 forced tokens (the
embedded model, CPU): the step's peak RSS went from 3.96 GiB (a release per step only) to 3.72 GiB
(docs/benchmarks.md, long context).
Neither TRL nor transformers' Trainer does this. On other C libraries (or non-Linux systems) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

from transformers import TrainerCallback


@functools.cache
def _libc():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    return libc if hasattr(libc, "malloc_trim") else None


def release_freed_memory() -> bool:
    """Return the C allocator's free pages to the OS; False where there is no ``malloc_trim`` (not glibc)."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


class ReleaseHostMemory(TrainerCallback):
    """`release_freed_memory` at the end of every optimizer step."""

    def on_step_end(self, args, state, control, **kwargs):
        release_freed_memory()
