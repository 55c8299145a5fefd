"""No bench can rot: every script in bench/ runs end to end at its tiniest shape and prints its ``RESULT`` line.

Each smoke runs the real script as a subprocess from the repository root, the way docs/benchmarks.md runs it, with
flags that shrink it to the least work that still goes through its code: 1 step, 1 prompt, 2 generations, 8-16
tokens, the tiny random-init Llama instead of the embedded model (`vllm_tiny_path`: 64-dim heads for vLLM on CPU),
and files the test writes itself where a script reads data CI does not have (GSM8K rows, a TRL-style test file).
Nothing is timed or compared: the test asserts the exit code and that the last non-empty line is
``RESULT <name> key=value ...`` (plus, where a script reports failures inside its RESULT line, that there were
none). A new script in bench/ cannot be added without an entry in ``SMOKES``.

The smokes run two at a time (`smoke_runs`), longest first, each in a process of its own forked from the worker's
zygote (tests/helpers/zygote.py), and so are the Python processes each starts for its arms (train.py, `hf-grpo
eval`, TRL's trainer, `accelerate launch` and its workers): about 25 processes that each imported torch,
transformers, vLLM and TRL before doing any work. Measured alone: 17 smokes in 194 s and 325 CPU-seconds with the
zygote (its start included), against 717 s with one in-process runner and the arms started as fresh interpreters.
weight_sync.py, hf_generate.py and compare_trl.py have no run of their own: the dry run of gpu_session.sh runs each of
them at its tiniest shape and fails unless all three print their RESULT line.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.launch import forked, launched_env
from tests.helpers.one_process import ScriptResult, ScriptRun
from tests.helpers.semantic_hacks import CASES as SEMANTIC

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
# Modules the scripts import; they have no RESULT line of their own.
HELPERS = {"timing.py"}
# Processes running the smokes (each one script after the other): see the module docstring.
RUNNERS = int(os.environ.get("BENCH_SMOKE_RUNNERS", "2"))


def gsm8k_files(tmp: Path) -> None:
    """A few GSM8K-format rows (question, answer ending in ``#### N``): CI has no copy of the data set."""
    rows = [
        {
            "question": f"Sam has {a} boxes with {b} pens each. How many pens does he have?",
            "answer": f"{a} boxes of {b} pens: {a} * {b} = <<{a}*{b}={a * b}>>{a * b} pens.\n#### {a * b}",
        }
        for a, b in ((2, 3), (4, 5), (3, 7), (6, 2), (5, 5), (8, 3))
    ]
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    (tmp / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[4:]))


# A stand-in for TRL's tests/test_grpo_trainer.py (read from a TRL checkout, which CI does not have), written the way
# TRL's tests are: the hub ids of TRL's tiny models, `load_dataset` of its zen prompts, TRL's import line (the one the
# harness swaps for ours), a support module importing `trl.import_utils` helpers (one the installed TRL lacks: the
# harness shims it). One test passes, one fails on purpose and one skips, so each count of the harness is checked.
TRL_TEST_FILE = """import pytest
from datasets import load_dataset

from trl import GRPOConfig, GRPOTrainer

from .testing_utils import require_missing_extra


class TestGRPOTrainer:
    def test_training(self, tmp_path):
        dataset = load_dataset("trl-internal-testing/zen", "standard_prompt_only", split="train")
        args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                          max_completion_length=8, max_steps=1, use_vllm=False, bf16=False, report_to="none")
        trainer = GRPOTrainer(model="trl-internal-testing/tiny-Qwen2ForCausalLM-2.5",
                              reward_funcs="trl-internal-testing/tiny-Qwen2ForSequenceClassification-2.5",
                              args=args, train_dataset=dataset)
        trainer.train()
        assert trainer.state.log_history[-1]["train_loss"] is not None

    def test_fails_on_purpose(self):
        assert GRPOTrainer.__name__ == "not a trainer", "fails on purpose: the harness must count it as failed"

    @require_missing_extra
    def test_skipped_without_the_extra(self):
        pass
"""
TRL_TESTING_UTILS = """import pytest

from trl.import_utils import (
    is_vllm_available,
    is_an_extra_no_trl_release_has_available,
)

require_missing_extra = pytest.mark.skipif(not is_an_extra_no_trl_release_has_available(), reason="needs the extra")
"""


def trl_test_files(tmp: Path) -> None:
    folder = tmp / "trl_tests_src"
    folder.mkdir()
    (folder / "test_grpo_trainer.py").write_text(TRL_TEST_FILE)
    (folder / "testing_utils.py").write_text(TRL_TESTING_UTILS)


@dataclass
class Smoke:
    """One script's smoke run: its RESULT name, the command line after the script's path (split like a shell's; {tiny}:
    the tiny model's folder, {tmp}: the test's scratch folder), the seconds it took alone on this machine (the longest
    start first), key=value pairs its RESULT line must hold (where a failure shows only there), a hook writing the
    files it reads, and extra environment variables."""

    name: str
    args: str
    seconds: int
    expect: tuple[str, ...] = ()
    prepare: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)


TRAIN = "--prompts 1 --generations 2 --max_tokens 8 --steps 1 --warmup 0"
RECIPE = "--per_device_train_batch_size 2 --num_generations 2 --max_completion_length 8"

SMOKES = {
    # Ours with HF generate: the bench's harness is the same for both backends (vLLM's tool loop has its own tests).
    "agentic.py": Smoke(
        "agentic",
        "--model {tiny} --prompts 1 --generations 2 --max_tokens 16 --steps 1 --warmup 0 --micro_batch 2 "
        "--ours_backend hf",
        27,
    ),
    "async_pipeline.py": Smoke("async_pipeline", "--model {tiny} --modes sync,1 " + TRAIN, 56),
    "code_reward.py": Smoke("code_reward", "--repeats 1 --problems 4", 3),
    "distributed_matrix.py": Smoke(
        "distributed_matrix",
        "--rows ddp:colocate:full --steps 1 --model {tiny} -- --heldout_eval_samples 0 " + RECIPE,
        26,
        expect=("rows_passed=1/1",),
    ),
    "generation.py": Smoke(
        "generation", "--model {tiny} --prompts 1 --n 2 --max-tokens 8 --eager --kv-cache-gib 0.25", 24
    ),
    # Runs weight_sync.py, hf_generate.py and compare_trl.py at their tiniest shape and counts their RESULT lines.
    "gpu_session.sh": Smoke(
        "gpu_session",
        "--dry-run",
        42,
        expect=("mode=dry_run", "results=3/3"),
        env={"DRY_MODEL": "{tiny}", "PYTHON": "{python}"},
    ),
    # One step each (the first spends the budget) and one checkpoint each, evaluated with HF generate on the 2 dev rows.
    "gsm8k_vs_trl.py": Smoke(
        "gsm8k",
        "--out {tmp}/out --dataset {tmp}/dev.jsonl --max_samples 2 --minutes 0.001 --save_every 10 --eval_backend hf "
        '-- --model_name_or_path {tiny} --dataset_name {tmp}/train.jsonl --eval_datasets \'{"gsm8k_dev": '
        '"{tmp}/dev.jsonl"}\' --gradient_accumulation_steps 1 --steps_per_generation 1 ' + RECIPE,
        57,
        prepare=gsm8k_files,
    ),
    # Three rows go through every branch of the worker once: TRL and ours, HF generate and vLLM, LoRA over a 4-bit base
    # and no adapter (bf16 and float32), and one ratio (ours_qlora_over_trl_qlora); --parallel runs them at once.
    "memory.py": Smoke(
        "memory",
        "--model {tiny} --steps 1 --prompts 1 --generations 2 --max_tokens 8 --parallel "
        "--rows trl_qlora,ours_qlora,ours_vllm",
        29,
    ),
    # Its own random policy and scripted lengths; one partial-rollout row (the other rows are async_pipeline.py's).
    "partial_rollouts.py": Smoke(
        "partial_rollouts", "--modes 1+recompute --prompts 1 --generations 2 --max_tokens 8 --steps 1 --warmup 0", 50
    ),
    # QLoRA only: the LoRA rows run the same code over a dense base. One training step per sync for the e2e rows.
    "lora_sync.py": Smoke(
        "lora_sync",
        "--model {tiny} --kinds qlora --train_steps 1 --repeats 1 --prompts 1 --generations 2 --max_tokens 8",
        60,
    ),
    "old_logprobs.py": Smoke(
        "old_logprobs",
        "--model {tiny} --prompts 1 --generations 2 --steps_per_generation 2 --max_tokens 8 --rounds 1 --warmup 0",
        44,
    ),
    # `--model tiny`: the script's own 2-layer random Llama.
    "packing.py": Smoke(
        "packing", "--model tiny --sequences 2 --prompt 4 8 --completion 4 8 --max_tokens 32 --repeats 1", 4
    ),
    "recipe_matrix.py": Smoke(
        "recipe_matrix",
        "--recipes quickstart --configs ddp --steps 1 -- --model_name_or_path {tiny} " + RECIPE,
        24,
        expect=("passed=1", "total=1"),
    ),
    # One filter setting: the loop over settings runs the same code for each.
    "sampling_filters.py": Smoke(
        "sampling_filters", "--model {tiny} --prompts 1 --generations 2 --max_tokens 8 --settings top_p=0.9", 22
    ),
    # 5 s per program: under the suite's two workers a program that imports numpy can pass 1 s, and a timeout
    # scores 0, which would count a hack as held with its defence off.
    "sandbox_table.py": Smoke(
        "sandbox_table",
        "--timeout 5",
        9,
        expect=(f"semantic_held={len(SEMANTIC)}/{len(SEMANTIC)}", f"defence_off_held=0/{len(SEMANTIC)}"),
    ),
    "transformers_paged.py": Smoke(
        "transformers_paged", "--model {tiny} --prompts 1 --n 2 --max-tokens 8 --repeats 1", 8
    ),
    "trl_tests.py": Smoke(
        "trl_tests",
        "--tests-dir {tmp}/trl_tests_src --work {tmp}/work",
        29,
        expect=("passed=1", "failed=1", "skipped=1", "trl_passed=1"),
        prepare=trl_test_files,
    ),
}

# Scripts that gpu_session.sh's dry run runs to their RESULT line (its smoke expects results=3/3): a run of their own
# would repeat the same code at the same shape.
RUN_BY_GPU_SESSION = {"weight_sync.py", "hf_generate.py", "compare_trl.py"}

RESULT_PAIR = re.compile(r"[A-Za-z_][\w.]*=\S+")


def bench_scripts() -> set[str]:
    return {p.name for p in BENCH.glob("*.py") if p.name not in HELPERS} | {p.name for p in BENCH.glob("*.sh")}


def test_every_bench_script_has_a_smoke_run():
    missing = sorted(bench_scripts() - SMOKES.keys() - RUN_BY_GPU_SESSION)
    assert not missing, f"bench scripts without an entry in tests/bench/test_smoke.py SMOKES: {missing}"
    stale = sorted((SMOKES.keys() | RUN_BY_GPU_SESSION) - bench_scripts())
    assert not stale, f"SMOKES entries for scripts that are not in bench/: {stale}"
    session = (BENCH / "gpu_session.sh").read_text()
    for script in RUN_BY_GPU_SESSION:
        assert f"$PY bench/{script}" in session, f"gpu_session.sh no longer runs bench/{script}: give it a smoke run"


def test_helpers_are_not_benches():
    """A module listed as a helper prints no RESULT line (otherwise it is a bench that escaped its smoke run)."""
    for name in HELPERS:
        assert "RESULT" not in (BENCH / name).read_text(), f"bench/{name} prints a RESULT line: give it a smoke run"


def smoke_run(script: str, tiny_model: str, tmp: Path, python: str = sys.executable) -> ScriptRun:
    """The run of ``script``'s smoke: its command line and environment (``python``: the executable of the Python
    processes it starts), its output going to files in ``tmp``."""
    smoke = SMOKES[script]
    if smoke.prepare:
        smoke.prepare(tmp)

    def fill(text: str) -> str:
        return text.replace("{tiny}", tiny_model).replace("{tmp}", str(tmp)).replace("{python}", python)

    # Scratch folders the scripts make (tempfile) land in the smoke's own folder.
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "PYTHON_EXEC": python,
        **{k: fill(v) for k, v in smoke.env.items()},
    }
    return ScriptRun(
        name=script,
        script=str(BENCH / script),
        argv=[fill(a) for a in shlex.split(smoke.args)],
        cwd=str(ROOT),
        env=env,
        stdout=str(tmp / "stdout.txt"),
        stderr=str(tmp / "stderr.txt"),
    )


class SmokeRuns:
    """The selected smokes, each ``python bench/SCRIPT ARGS`` in a process of its own forked from this worker's zygote
    (`tests.helpers.zygote`), RUNNERS at a time, the longest first. Its environment's ``PYTHON_EXEC`` (and, for
    gpu_session.sh, ``PYTHON``) is the zygote's executable, so that the processes a bench starts for its arms (runs of
    train.py, `hf-grpo eval`, TRL, `accelerate launch` and its workers) fork from it too. `result` waits for a
    script's end (once)."""

    def __init__(self, runs: dict[str, ScriptRun], python: str, parallel: int):
        self.runs, self.python, self.parallel = runs, python, parallel
        self.pending = sorted(runs, key=lambda name: -SMOKES[name].seconds)
        self.running: dict[str, tuple[subprocess.Popen, float]] = {}
        self.results: dict[str, ScriptResult] = {}

    def _start_more(self) -> None:
        while self.pending and len(self.running) < self.parallel:
            run = self.runs[self.pending.pop(0)]
            interpreter = ["bash"] if run.script.endswith(".sh") else [self.python]
            with open(run.stdout, "w") as out, open(run.stderr, "w") as err:
                proc = subprocess.Popen(
                    [*interpreter, run.script, *run.argv],
                    cwd=run.cwd,
                    env=run.env,
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            self.running[run.name] = (proc, time.monotonic())

    def _collect(self) -> None:
        for name, (proc, started) in list(self.running.items()):
            code = proc.poll()
            if code is None and time.monotonic() - started > self.runs[name].timeout:
                proc.kill()  # the zygote's waiter kills the script's process group with it
                code = proc.wait()
            if code is not None:
                run = self.runs[name]
                del self.running[name]
                self.results[name] = ScriptResult(
                    name, code, time.monotonic() - started, Path(run.stdout).read_text(), Path(run.stderr).read_text()
                )

    def result(self, script: str) -> ScriptResult:
        while script not in self.results:
            self._start_more()
            self._collect()
            if script not in self.results:
                time.sleep(0.2)
        self._start_more()
        return self.results[script]

    def close(self) -> None:
        for proc, _ in self.running.values():
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def smoke_runs(request, vllm_tiny_path, tmp_path_factory):
    """Starts the selected smokes, RUNNERS at a time, as the tests ask for their results."""
    selected = sorted(
        item.callspec.params["script"]
        for item in request.session.items
        if item.originalname == "test_bench_script_reaches_its_result_line"
    )
    python = forked([sys.executable], launched_env())[0][0]  # the zygote's executable (TEST_ZYGOTE=0: Python's)
    runs = {s: smoke_run(s, vllm_tiny_path, tmp_path_factory.mktemp(s.replace(".", "_")), python) for s in selected}
    smokes = SmokeRuns(runs, python, RUNNERS)
    yield smokes
    smokes.close()


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMOKES))
def test_bench_script_reaches_its_result_line(script, smoke_runs):
    smoke = SMOKES[script]
    run = smoke_runs.result(script)
    output = run.stdout + run.stderr + run.runner_tail
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    command = f"bench/{script} {SMOKES[script].args}"
    assert run.returncode == 0, f"{command} exited with {run.returncode}:\n{output[-6000:]}"
    assert last.startswith(f"RESULT {smoke.name} "), f"last line is not the RESULT line: {last!r}\n{output[-6000:]}"
    pairs = last.split()[2:]
    assert pairs and all(RESULT_PAIR.fullmatch(p) for p in pairs), f"not key=value pairs: {last!r}"
    for pair in smoke.expect:
        assert pair in pairs, f"{pair} not in {last!r}\n{output[-6000:]}"
