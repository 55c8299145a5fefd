"""A rank killed by a signal mid-run (as the OS's out-of-memory killer does) is named in one line by the survivor."""

import re
import signal
import subprocess

import psutil
import pytest

from tests.helpers.launch import ROOT, accelerate_command, launched_env
from tests.helpers.processes import kill9, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def _ranks(proc: subprocess.Popen) -> dict[int, psutil.Process]:
    found = {}
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            rank = child.environ().get("RANK")
            if rank is not None and "train.py" in " ".join(child.cmdline()):
                found[int(rank)] = child
        except psutil.NoSuchProcess:
            pass
    return found


def test_survivor_names_the_rank_killed_by_sigkill(tiny_llama_path, tmp_path):
    train = ["train.py", "--recipe", "recipes/quickstart.yaml", "--model_name_or_path", tiny_llama_path]
    train += ["--generation_backend", "hf", "--dataset_name", "arithmetic:64", "--output_dir", str(tmp_path / "out")]
    train += ["--max_steps", "1000", "--per_device_train_batch_size", "4", "--num_generations", "4"]
    train += ["--max_completion_length", "8", "--save_strategy", "no", "--heldout_eval_samples", "0"]
    train += ["--plot_metrics", "false", "--beta", "0"]
    cmd = accelerate_command(train, "ddp")
    log = tmp_path / "log.txt"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=launched_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "step 1 |" in log.read_text(), proc, timeout=240)  # both ranks are training
        victim = _ranks(proc)[1]
        victim.send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            kill9(proc)
    text = log.read_text()
    line = re.search(
        rf"hf_grpo: rank 1 \(pid {victim.pid}\) was killed by a signal, not by an error: at [0-9.]+ GiB "
        r"resident, .* probable cause: out of memory .* lower per_device_train_batch_size",
        text,
    )
    assert line, text[-4000:]
    assert text.count("was killed by a signal") == 1, text[-4000:]
    assert proc.returncode != 0
