"""`MetricsBuffer`: rates and means are averaged over the logging window, counts are summed, TRL's ``*_min`` and
``*_max`` keys are the extremes; over processes the same (a real 2-process gloo group)."""

import os

import torch.multiprocessing as mp
from accelerate import Accelerator

from hf_grpo.reporting.metrics import MetricsBuffer
from tests.helpers.launch import free_port


def fill(buffer: MetricsBuffer, values) -> None:
    for value in values:
        buffer.add("kl", value)
        buffer.add("numerics/log_ratio_clamped_tokens", value, reduce="sum")
        buffer.add("clip_ratio/low_min", value, reduce="min")
        buffer.add("clip_ratio/high_max", value, reduce="max")


def test_counts_are_summed_extremes_kept_and_other_metrics_averaged():
    buffer = MetricsBuffer()
    fill(buffer, (1.0, 0.0, 2.0))
    logs = buffer.reduce(Accelerator(cpu=True))
    assert logs == {
        "kl": 1.0,
        "numerics/log_ratio_clamped_tokens": 3.0,
        "clip_ratio/low_min": 0.0,
        "clip_ratio/high_max": 2.0,
    }
    assert buffer.reduce(Accelerator(cpu=True)) == {}


def _reduce_on(rank: int, port: int, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank))
    os.environ.update(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    buffer = MetricsBuffer()
    fill(buffer, (1.0, 3.0) if rank == 0 else (5.0, -1.0, 8.0))
    out[rank] = buffer.reduce(Accelerator(cpu=True))


def test_over_processes_means_are_of_process_means_counts_total_and_extremes_global():
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_reduce_on, args=(free_port(), out), nprocs=2)
        logs = dict(out)
    expected = {"kl": (2.0 + 4.0) / 2, "numerics/log_ratio_clamped_tokens": 16.0}
    expected |= {"clip_ratio/low_min": -1.0, "clip_ratio/high_max": 8.0}
    assert logs[0] == logs[1] == expected
