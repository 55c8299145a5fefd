"""sync_ref_model under ZeRO-3 (parameters gathered one at a time, rank 0's mix partitioned again) and FSDP2 (local
shards mixed): the reference's full weights after a sync equal the mix computed from whole weights, on both ranks."""

import os
import subprocess
import sys

import pytest
import torch

from tests.helpers.launch import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref_sync")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        str(ROOT / "tests/scripts/ref_sync_components.py"),
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in (0, 1)]


@pytest.mark.parametrize("backend", ["zero3", "fsdp2"])
def test_reference_is_the_mix_on_every_rank(ranks, backend):
    for r in ranks:
        assert r[backend].keys() == r["expected"].keys()
        for name, tensor in r[backend].items():
            torch.testing.assert_close(tensor, r["expected"][name], msg=f"{backend} {name}")
