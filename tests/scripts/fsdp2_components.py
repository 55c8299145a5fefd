"""Run with `torchrun --nproc_per_node 2` by tests/distributed/test_fsdp2.py: hf_grpo's FSDP2 code paths on a tiny
Llama sharded with torch's own `fully_shard` over gloo (accelerate applies FSDP only on GPUs), then, in the same
processes and group, sync_ref_model's FSDP2 and ZeRO-3 paths (tests/scripts/ref_sync_components.py): one torchrun's
start-up for both.

usage: fsdp2_components.py TOKENIZER_DIR OUT
Writes OUT/rank<R>.pt with the full weights as hf_grpo gathers them (plain, LoRA, and LoRA over a 4-bit base stored in
float32, the other weights' dtype, as FSDP-QLoRA needs), the weight metadata, the completions of an HF generation
in which the ranks have different numbers of prompts, and under ``ref_sync`` what `ref_sync_components.results`
returns."""

import copy
import sys

import torch
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import BitsAndBytesConfig

from hf_grpo.generation import HFGenerator, SamplingParams
from hf_grpo.generation.weights import iter_policy_weights, policy_weight_metadata
from hf_grpo.models import load_model, load_tokenizer
from tests.helpers.models import make_tiny_llama
from tests.scripts import ref_sync_components


def shard(model, mesh):
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def qlora(path: str, mesh=None):
    """A 4-bit tiny Llama (float32 storage and compute) under a LoRA with a non-zero update; sharded if ``mesh``."""
    q = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32, bnb_4bit_quant_storage=torch.float32
    )
    base = load_model(path, "float32", quantization_config=q)  # as the trainer loads it
    torch.manual_seed(3)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    if mesh is not None:
        shard(model.base_model.model, mesh)
    return model


def main() -> None:
    tokenizer, out = load_tokenizer(sys.argv[1]), sys.argv[2]
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    mesh = init_device_mesh("cpu", (accelerator.num_processes,))

    model = make_tiny_llama(len(tokenizer))
    expected = {n: p.detach().clone() for n, p in model.named_parameters()}
    shard(model, mesh)
    weights = {n: t.clone() for n, t in iter_policy_weights(accelerator, model)}
    meta = policy_weight_metadata(accelerator, model)

    # Rank 0 has 1 prompt, rank 1 has 5: with 2 prompts per generate call, 1 call against 3.
    torch.manual_seed(rank)
    prompts = [[1, 500 + i, 600 + i] for i in range(1 if rank == 0 else 5)]
    result = HFGenerator(accelerator, model, tokenizer, chunk_size=4).generate(prompts, 2, SamplingParams(max_tokens=5))

    # LoRA with a non-zero update, sharded the same way: the synced weights are the merged ones.
    base = make_tiny_llama(len(tokenizer))
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(7)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    merged = copy.deepcopy(peft_model).merge_and_unload()
    merged_expected = {n: p.detach().clone() for n, p in merged.named_parameters()}
    shard(peft_model.base_model.model, mesh)
    lora_weights = {n: t.clone() for n, t in iter_policy_weights(accelerator, peft_model)}

    # QLoRA: the synced weights are the dequantized base plus the update, whether the packed weights are sharded
    # (gathered packed, unpacked with the state bitsandbytes keeps on the layer) or not; a dense model holding them
    # computes the sharded 4-bit policy's logits.
    path = f"{out}/tiny"
    if accelerator.is_main_process:
        make_tiny_llama(len(tokenizer)).save_pretrained(path)
    accelerator.wait_for_everyone()
    qlora_expected = {n: t.clone() for n, t in iter_policy_weights(accelerator, qlora(path))}
    sharded = qlora(path, mesh)
    qlora_weights = {n: t.clone() for n, t in iter_policy_weights(accelerator, sharded)}
    qlora_meta = policy_weight_metadata(accelerator, sharded)
    ids = torch.tensor([[1, 500, 600, 700, 800]])
    with torch.no_grad():
        qlora_logits = sharded(ids).logits  # [1, 5, V]
        dense = make_tiny_llama(len(tokenizer))
        dense.load_state_dict(qlora_weights, strict=False)  # the head is tied to the embedding
        dense_logits = dense(ids).logits  # [1, 5, V]

    # Last: it starts DeepSpeed engines on this process group.
    ref_sync = ref_sync_components.results()

    torch.save(
        {
            "weights": weights,
            "expected": expected,
            "meta": meta,
            "completions": result.completion_ids,
            "num_prompts": len(prompts),
            "lora_weights": lora_weights,
            "lora_expected": merged_expected,
            "qlora_weights": qlora_weights,
            "qlora_expected": qlora_expected,
            "qlora_meta": qlora_meta,
            "qlora_logits": qlora_logits,
            "dense_logits": dense_logits,
            "ref_sync": ref_sync,
        },
        f"{out}/rank{rank}.pt",
    )


if __name__ == "__main__":
    main()
