"""LoRA with colocated vLLM, under both syncs (`vllm_lora_sync`): after every sync vLLM computes what
``merge_and_unload()`` of the trained adapter computes, the frozen base weights are never written (merging and
unmerging in place left rounding drift in them at every sync), and checkpoints carry the adapter with a model card.
The adapter sync sends the base once: a base weight changed behind its back after that never reaches the engine,
where the merged sync sends it at the next step."""

import copy

import pytest
import torch

from hf_grpo import DistributedGRPOTrainer, RunConfig
from hf_grpo.data import load_prompt_dataset
from tests.helpers.rewards import even_token_reward
from tests.helpers.scoring import trainer_logprobs, vllm_logprobs

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sync", ["adapter", "merged"])
def test_lora_sync_serves_the_merged_adapter_and_leaves_the_base_untouched(sync, vllm_tiny_path, tmp_path):
    args = RunConfig(
        vllm_lora_sync=sync,
        output_dir=str(tmp_path),
        use_peft=True,
        lora_r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        learning_rate=2e-2,
        max_steps=2,  # two syncs of a trained adapter: the one before step 2 and the one after the run
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        generation_backend="vllm",
        vllm_enforce_eager=True,
        vllm_kv_cache_gib=0.25,
        max_prompt_length=128,
        save_strategy="steps",
        save_steps=2,
        report_to="none",
        disable_tqdm=True,
        plot_metrics=False,
        use_cpu=True,
        seed=0,
    )
    trainer = DistributedGRPOTrainer(
        model=vllm_tiny_path,
        reward_funcs=[even_token_reward],
        args=args,
        train_dataset=load_prompt_dataset("arithmetic:64"),
    )
    base = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "base_layer" in n}
    assert base, "no LoRA-adapted layer"
    trainer.train()
    trainer._sync_generator()  # push the last step's adapter too (the run ended after it)

    for name, weight in trainer.model.named_parameters():
        if name in base:
            assert torch.equal(weight, base[name]), f"{name}: the frozen base weight changed"
    merged = copy.deepcopy(trainer.model).merge_and_unload().eval()
    prompt, completion = [1, 300, 301, 302], [400, 401, 402, 403, 404]
    with trainer.model.disable_adapter():
        base_logprobs = trainer_logprobs(trainer.model.eval(), prompt, completion)
    assert (trainer_logprobs(merged, prompt, completion) - base_logprobs).abs().max() > 1e-3, (
        "the adapter did not learn anything, so the comparison below proves nothing"
    )
    torch.testing.assert_close(
        vllm_logprobs(trainer.generator, prompt, completion),
        trainer_logprobs(merged, prompt, completion),
        atol=2e-3,
        rtol=0,
    )
    assert (trainer.generator.lora_request is not None) == (sync == "adapter")

    # Only the adapter goes after the first sync: a base weight changed now reaches the engine under the merged sync
    # alone (a real run never changes it; this shows what each sync sends).
    served = vllm_logprobs(trainer.generator, prompt, completion)
    with torch.no_grad():
        next(p for n, p in trainer.model.named_parameters() if "base_layer" in n and "q_proj" in n).mul_(3.0)
    trainer.generator.update_weights(trainer.model_wrapped, trainer.state.global_step + 1)
    moved = (vllm_logprobs(trainer.generator, prompt, completion) - served).abs().max().item()
    assert (moved > 1e-3) == (sync == "merged"), moved

    checkpoint = tmp_path / "checkpoint-2"
    assert (checkpoint / "adapter_model.safetensors").is_file() and (checkpoint / "adapter_config.json").is_file()
    card = (checkpoint / "README.md").read_text()
    assert "library_name: peft" in card and f"base_model: {vllm_tiny_path}" in card
    trainer.generator.close()


def test_an_adapter_update_lands_on_requests_in_flight(vllm_tiny_path, tmp_path):
    """Partial rollouts under the adapter sync: the adapter is replaced in place between two engine steps while
    completions are decoding (recompute: their prefix is recomputed under it), they finish with tokens of both
    versions, and the engine then serves the new adapter."""
    from accelerate import Accelerator
    from peft import LoraConfig, get_peft_model

    from hf_grpo.generation import SamplingParams
    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator
    from hf_grpo.models import load_model

    args = RunConfig(
        output_dir=str(tmp_path),
        generation_backend="vllm",
        vllm_enforce_eager=True,
        vllm_lora_sync="adapter",
        vllm_kv_cache_gib=0.1,
        max_prompt_length=64,
        max_completion_length=32,
        max_staleness=1,
        partial_rollouts="recompute",
        use_peft=True,
        use_cpu=True,
        report_to="none",
    )
    policy = get_peft_model(load_model(vllm_tiny_path), LoraConfig(r=4, target_modules="all-linear")).eval()
    generator = VLLMColocateGenerator.from_config(args, Accelerator(cpu=True), policy, None, vllm_tiny_path)
    generator.update_weights(policy, 0)
    turns = generator.turns()
    for key in range(4):
        turns.submit(key, [1, 300 + key, 301], SamplingParams(max_tokens=32, extra=(("ignore_eos", True),)))
    done = turns.poll(0) + turns.poll(0)  # two engine steps: prefill and the first token
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    generator.update_weights(policy, 1)
    while len(done) < 4:
        done += turns.poll(0)
    assert all(len(t.token_ids) == 32 and set(t.versions) == {0, 1} for t in done), [set(t.versions) for t in done]
    prompt, completion = [1, 300, 301], [400, 401, 402]
    torch.testing.assert_close(
        vllm_logprobs(generator, prompt, completion), trainer_logprobs(policy, prompt, completion), atol=1e-4, rtol=0
    )
    generator.close()
