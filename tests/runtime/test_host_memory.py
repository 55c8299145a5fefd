"""Freed host memory goes back to the OS after a step (glibc's malloc_trim)."""

import torch

from hf_grpo.runtime.host_memory import ReleaseHostMemory, release_freed_memory


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_memory_freed_in_small_tensors_is_returned_to_the_os():
    release_freed_memory()
    base = _rss_mib()
    # 400 MiB in 32 KiB tensors: below glibc's mmap threshold, so they live in its heap and stay there once freed.
    blocks = [torch.ones(8192) for _ in range(400 * 32)]
    held = _rss_mib()
    assert held - base > 300
    last = blocks[-1]  # keeps the heap's top in use, as a live tensor does in training: free() alone releases nothing
    del blocks
    before_trim = _rss_mib()
    assert before_trim - base > 300
    ReleaseHostMemory().on_step_end(None, None, None)
    after = _rss_mib()
    assert after - base < 100, (base, held, before_trim, after)
    assert release_freed_memory() is True
    del last
