"""The setup line a run starts with (`hf_grpo.reporting.run_setup`), on one process; the distributed backends' lines
(DDP, ZeRO-2/3, an FSDP config that runs DDP on CPU) are asserted on their real 2-process launches in
tests/distributed/test_backends.py."""

import logging
import subprocess
import sys

from tests.helpers.launch import free_port, launched_env
from tests.helpers.trainers import make_trainer


def test_one_process_full_weights_and_transformers_generate(tiny_llama_path, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="hf_grpo.trainer"):
        trainer = make_trainer(tiny_llama_path, tmp_path)
    assert trainer.run_setup == (
        "one process (cpu); mixed precision: no; policy: all weights train (float32); reference: none (beta 0); "
        "generation: transformers generate"
    )
    assert f"setup: {trainer.run_setup}" in caplog.messages


def test_lora_with_a_kl_term_names_the_adapter_and_the_reference(tiny_llama_path, tmp_path):
    trainer = make_trainer(tiny_llama_path, tmp_path, use_peft=True, lora_r=4, beta=0.05, bf16=True)
    assert trainer.run_setup == (
        "one process (cpu); mixed precision: bf16; policy: LoRA r=4 (float32) over a float32 base; "
        "reference: the adapter disabled; generation: transformers generate"
    )


def test_deepspeed_offload_is_named(tmp_path):
    """A one-process DeepSpeed run (its own process: accelerate's state is process-wide) with both offloads."""
    script = (
        "from accelerate import Accelerator\n"
        "from accelerate.utils import DeepSpeedPlugin\n"
        "from hf_grpo.reporting.run_setup import distributed_setup\n"
        "plugin = DeepSpeedPlugin(zero_stage=3, offload_optimizer_device='cpu', offload_param_device='cpu')\n"
        "print('SETUP', distributed_setup(Accelerator(deepspeed_plugin=plugin)))\n"
    )
    # launched_env: the venv's ninja first on PATH, as when `make deepspeed-ops` built DeepSpeed's CPU op (another
    # ninja would rebuild it: a minute of both cores)
    env = launched_env(ACCELERATE_USE_DEEPSPEED="true", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("SETUP "))
    assert line == "SETUP DeepSpeed ZeRO-3 (optimizer offload: cpu, parameter offload: cpu) on 1 process (cpu)"
