"""The setup line a run starts with (`hf_grpo.reporting.run_setup`), on one process; the distributed backends' lines
(DDP, ZeRO-2/3, an FSDP config that runs DDP on CPU) are asserted on their real 2-process launches in
tests/distributed/test_backends.py."""

import logging

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
