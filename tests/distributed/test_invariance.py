"""One global batch gives the same update however it is split: 1 process x 2 accumulation steps, 2 processes x 1
(DDP), DeepSpeed ZeRO-2 and ZeRO-3 over 2 processes, for every loss type, with zero-advantage skipping on.

The batch is fixed (tests.helpers.fixed_generation: completions depend only on the prompt) so that every layout
trains on the same samples; the optimizer is plain SGD without clipping, which passes any error in a loss
normaliser straight into the update (Adam's first step would hide a scale error). Two optimizer steps each.

What is compared with what:
* ``grpo``, ``dapo``, ``dr_grpo``: all layouts agree, the single process included.
* ``bnpo`` normalises by each process's own tokens (TRL's definition), so it legitimately depends on how the batch is
  split over processes; the 2-process layouts agree with each other.
* ``dapo`` with the PTX loss (``ptx_coef`` 0.5): its normaliser counts the step's PTX tokens on all processes, and
  the PTX sequences of a step do not depend on the layout, so all layouts agree here too.
* ``steps_per_generation = 2 x gradient_accumulation_steps`` (one round feeds two optimizer steps, each normalised by
  its own tokens): which samples land in which step depends on the number of processes, so the 2-process layouts are
  compared with each other.
"""

from pathlib import Path

import pytest
import torch

from tests.helpers.launch import EXACT_SGD, launch, results

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

LOSSES = ("grpo", "dapo", "dr_grpo", "bnpo")
PTX = {"ptx_dataset": str(Path(__file__).parents[2] / "recipes" / "data" / "ptx_sample.txt"), "ptx_coef": 0.5}
RUNS = (
    [{"loss_type": loss} for loss in LOSSES]
    + [{"loss_type": loss, "spg_factor": 2} for loss in LOSSES]
    + [{"loss_type": "dapo", **PTX}]
)
LAYOUTS = {  # name: (accelerate config, processes, gradient_accumulation_steps)
    "1proc_ga2": ("ddp", 1, 2),
    "ddp": ("ddp", 2, 1),
    "zero2": ("zero2", 2, 1),
    "zero3": ("zero3", 2, 1),
}


def compared_on(layout: str, run: dict) -> bool:
    """The single process is compared only where the update does not depend on the number of processes (module
    docstring), so it trains only those runs."""
    return layout != "1proc_ga2" or (run["loss_type"] != "bnpo" and "spg_factor" not in run)


def trained(layout: str) -> list[int]:
    """The indices in RUNS of the runs ``layout``'s launch trains, in its order."""
    return [k for k, r in enumerate(RUNS) if compared_on(layout, r)]


def spec(layout: str) -> dict:
    ga = LAYOUTS[layout][2]
    runs = [
        {
            "config": {
                **{key: value for key, value in RUNS[k].items() if key != "spg_factor"},
                "gradient_accumulation_steps": ga,
                "steps_per_generation": ga * RUNS[k].get("spg_factor", 1),
            }
        }
        for k in trained(layout)
    ]
    return {
        "fixed_completions": True,
        "runs": runs,
        "config": EXACT_SGD,
    }


@pytest.fixture(scope="module")
def updates(tiny_llama_path, tmp_path_factory):
    """{layout: {run index in RUNS: update}}, the update being the final weights minus the initial ones."""
    from hf_grpo.models import load_model

    initial = {n: p.detach() for n, p in load_model(tiny_llama_path).named_parameters()}
    out = {}
    for name, (backend, processes, _) in LAYOUTS.items():
        folder = tmp_path_factory.mktemp(name)
        launch(backend, tiny_llama_path, folder, spec(name), num_processes=processes, mixed_precision="no")
        out[name] = {}
        for j, k in enumerate(trained(name)):  # the launch's j-th run is RUNS[k]
            ranks = results(folder, run=j, num_processes=processes)
            for r in ranks[1:]:
                assert all(torch.equal(w, r["weights"][n]) for n, w in ranks[0]["weights"].items())
            out[name][k] = {n: w - initial[n] for n, w in ranks[0]["weights"].items()}
    return out


def assert_same_update(a: dict, b: dict, what: str) -> None:
    scale = max(float(d.abs().max()) for d in a.values())
    assert scale > 1e-3, f"{what}: the update is empty"
    worst = max(float((a[n] - b[n]).abs().max()) for n in a)
    assert worst <= 1e-4 * scale + 1e-7, f"{what}: updates differ by {worst:.3g} (largest update {scale:.3g})"


@pytest.mark.parametrize(
    "k",
    range(len(RUNS)),
    ids=[f"{r['loss_type']}-spg{r.get('spg_factor', 1)}xGA{'-ptx' if 'ptx_coef' in r else ''}" for r in RUNS],
)
def test_update_does_not_depend_on_the_layout(updates, k):
    run = RUNS[k]
    layouts = [name for name in LAYOUTS if compared_on(name, run)]
    for other in layouts[1:]:
        assert_same_update(updates[layouts[0]][k], updates[other][k], f"{run} {layouts[0]} vs {other}")
