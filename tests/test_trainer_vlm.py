"""Vision-language training through the trainer (hf_grpo/vision): every family TRL's tests use trains every parameter
TRL expects to change; reward functions receive the images; reference model, LoRA, freeze_vision_tower, resume,
and evaluation with image rows; and the refusals at init, each with its reason."""

import json

import pytest
import torch
import transformers
from datasets import Dataset
from PIL import Image

from hf_grpo import DistributedGRPOTrainer
from tests.helpers.trainers import make_config, params
from tests.helpers.vlm_models import FAMILIES, tiny_vlm

COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"]


def image_rows(n=8, column="image"):
    """Conversational prompts with one image each (``images``: two per row), colours varying by row."""
    rows = []
    for i in range(n):
        image = Image.new("RGB", (64, 64), COLOURS[i % len(COLOURS)])
        value = image if column == "image" else [image, Image.new("RGB", (48, 64), COLOURS[(i + 3) % len(COLOURS)])]
        rows.append({"prompt": [{"role": "user", "content": f"What colour is this? ({i})"}], column: value})
    return Dataset.from_list(rows)


def length_reward(completions, **kwargs):
    """TRL's test reward: longer completions score higher."""
    return [float(len(c[0]["content"])) for c in completions]


def vlm_config(tmp_path, **overrides):
    values = dict(per_device_train_batch_size=4, num_generations=2, max_completion_length=8, learning_rate=0.1)
    return make_config(tmp_path, **{**values, **overrides})


def vlm_trainer(path, tmp_path, rewards=(length_reward,), dataset=None, eval_dataset=None, **overrides):
    dataset = image_rows() if dataset is None else dataset
    return DistributedGRPOTrainer(path, list(rewards), vlm_config(tmp_path, **overrides), dataset, eval_dataset)


# LLaVA's vision_feature_layer -1 with the "default" strategy still leaves post_layernorm unused (TRL's test exempts
# it too: it feeds only the pooled output).
UNUSED_BY_DESIGN = {"llava": ("post_layernorm",), "llava_next": ("post_layernorm",)}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_trains_every_parameter(family, vlm_root, tmp_path):
    # One step: Adam's first update moves every parameter that has a gradient, by about the learning rate.
    trainer = vlm_trainer(tiny_vlm(family, vlm_root), tmp_path, max_steps=1)
    assert type(trainer.processing_class).__name__.endswith("Processor")  # AutoProcessor, as TRL loads it
    before = params(trainer.model)
    trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None
    for name, param in params(trainer.model).items():
        if any(piece in name for piece in UNUSED_BY_DESIGN.get(family, ())):
            assert torch.equal(before[name], param), name
        else:
            assert not torch.equal(before[name], param), f"{name} did not change"


def test_reward_functions_receive_each_completions_own_image(vlm_root, tmp_path):
    seen = []

    def colour_reward(completions, image, prompts, **kwargs):
        seen.extend((p[0]["content"][-1]["text"], im.getpixel((0, 0))) for p, im in zip(prompts, image))
        return [0.0] * len(completions)

    trainer = vlm_trainer(tiny_vlm("idefics3", vlm_root), tmp_path, rewards=(colour_reward,), max_steps=1)
    trainer.train()
    assert len(seen) == 4 and len(set(seen)) == 2  # 2 prompts x 2 generations, each with its own row's image
    for text, pixel in seen:
        index = int(text.split("(")[1].rstrip(")"))
        assert Image.new("RGB", (1, 1), COLOURS[index]).getpixel((0, 0)) == pixel


def test_the_wandb_completions_table_shows_each_rows_images(vlm_root, tmp_path, wandb_offline, monkeypatch):
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))  # where a run_table artifact is staged offline
    trainer = vlm_trainer(
        tiny_vlm("idefics3", vlm_root), tmp_path, max_steps=1, log_completions=True, report_to="wandb"
    )
    try:
        trainer.train()
    finally:
        wandb_offline.finish()
    staged = [json.loads(p.read_text()) for p in (tmp_path / "wandb-data").rglob("tmp*") if p.read_bytes()[:1] == b"{"]
    tables = {json.dumps(t, sort_keys=True): t for t in staged if t.get("_type") == "table"}.values()
    (table,) = [t for t in tables if "image" in t["columns"]]
    # 2 prompts x 2 completions, each row with its prompt's one image; two prompts, two distinct images.
    cells = [row[table["columns"].index("image")] for row in table["data"]]
    assert [len(c) for c in cells] == [1, 1, 1, 1] and len({c[0]["sha256"] for c in cells}) == 2
    # Image-row prompts (parts of different keys, which W&B cannot type as messages) are there, as JSON text.
    prompts = [json.loads(row[table["columns"].index("prompt")]) for row in table["data"]]
    assert all(p[0]["content"][-1]["text"].startswith("What colour is this?") for p in prompts)


def test_multi_image_rows_with_a_reference_model_train(vlm_root, tmp_path):
    trainer = vlm_trainer(
        tiny_vlm("qwen2_5_vl", vlm_root), tmp_path, dataset=image_rows(column="images"), beta=0.1, max_steps=2
    )
    assert trainer.ref_model is not None and type(trainer.ref_model).__name__ == type(trainer.model).__name__
    before = params(trainer.model)
    trainer.train()
    logs = [r for r in trainer.state.log_history if "kl" in r]
    assert logs and logs[0]["kl"] == pytest.approx(0.0, abs=1e-6) and logs[-1]["kl"] > 0  # policy == ref at step 1
    assert all(not torch.equal(before[n], p) for n, p in params(trainer.model).items())


def test_lora_trains_the_adapter_only_and_freeze_vision_tower_keeps_the_tower(vlm_root, tmp_path):
    from peft import LoraConfig

    path = tiny_vlm("qwen2_5_vl", vlm_root)
    lora = DistributedGRPOTrainer(
        path,
        [length_reward],
        vlm_config(tmp_path / "lora", max_steps=1),
        image_rows(),
        peft_config=LoraConfig(target_modules=["q_proj", "v_proj"]),
    )
    trainable = params(lora.model)
    assert trainable and all("lora_" in n for n in trainable)
    frozen = {n: p.detach().clone() for n, p in lora.model.named_parameters() if not p.requires_grad}
    lora.train()
    assert any(not torch.equal(trainable[n], p) for n, p in params(lora.model).items())
    assert all(torch.equal(frozen[n], p) for n, p in lora.model.named_parameters() if n in frozen)

    tower = vlm_trainer(path, tmp_path / "tower", max_steps=1, freeze_vision_tower=True)
    names = {n: p.requires_grad for n, p in tower.model.named_parameters()}
    assert not any(grad for n, grad in names.items() if n.startswith("model.visual.") and ".merger." not in n)
    assert all(grad for n, grad in names.items() if ".merger." in n or "language_model" in n)


def test_resume_from_a_checkpoint_continues_exactly(vlm_root, tmp_path):
    path = tiny_vlm("idefics3", vlm_root)
    common = dict(max_steps=2, optim="sgd", learning_rate=0.05, lr_scheduler_type="constant", shuffle_dataset=False)
    full = vlm_trainer(path, tmp_path / "full", save_strategy="steps", save_steps=1, **common)
    full.train()
    resumed = vlm_trainer(path, tmp_path / "resumed", **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "out" / "checkpoint-1"))
    for name, p in params(full.model).items():
        assert torch.equal(p, params(resumed.model)[name]), name


def test_evaluation_with_image_rows(vlm_root, tmp_path):
    trainer = vlm_trainer(
        tiny_vlm("gemma3", vlm_root),
        tmp_path,
        max_steps=1,
        eval_dataset=image_rows(4),
        per_device_eval_batch_size=2,
        eval_strategy="steps",
        eval_steps=1,
    )
    trainer.train()
    evals = [r for r in trainer.state.log_history if "eval_loss" in r]
    assert evals and all(r["eval_loss"] == r["eval_loss"] for r in evals), trainer.state.log_history


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(max_tokens_per_microbatch=1024), r"max_tokens_per_microbatch \(packing\) is not supported for vision"),
        (dict(generation_backend="hf_continuous"), r"ContinuousBatchingGenerator cannot send images with a prompt"),
    ],
)
def test_what_cannot_work_is_refused_at_init_with_the_reason(vlm_root, tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        vlm_trainer(tiny_vlm("idefics3", vlm_root), tmp_path, **overrides)


def test_rollout_func_with_image_rows_and_freeze_on_a_text_model_are_refused(vlm_root, tiny_llama_path, tmp_path):
    # Tools and environments take image rows (tests/agents/test_vision_tools.py); rollout_func returns ids only.
    def rollout_func(prompts, trainer):
        raise AssertionError("never called")

    with pytest.raises(ValueError, match=r"rollout_func with image prompts \(train_dataset\): rollout_func returns"):
        DistributedGRPOTrainer(
            tiny_vlm("qwen2_vl", vlm_root),
            [length_reward],
            vlm_config(tmp_path),
            image_rows(),
            rollout_func=rollout_func,
        )
    with pytest.raises(ValueError, match=r"freeze_vision_tower: the model \(LlamaForCausalLM\) has no vision tower"):
        DistributedGRPOTrainer(
            tiny_llama_path,
            [length_reward],
            vlm_config(tmp_path, freeze_vision_tower=True),
            [{"prompt": [{"role": "user", "content": "hi"}]}] * 4,
        )


def test_a_processor_output_the_model_does_not_take_is_refused_at_init(vlm_root, tmp_path):
    """Per-image and per-token processor outputs reach the forward, training targets (PaliGemma's ``labels``) never
    do (tests/vision/test_inputs.py, and PaliGemma trains above); an output the forward does not take by name would
    reach it through ``**kwargs``, so it is refused when the trainer is built, by name."""
    path = tiny_vlm("llava", vlm_root)

    class WithCropOffsets(transformers.LlavaProcessor):
        def __call__(self, *args, **kwargs):
            out = super().__call__(*args, **kwargs)
            out["crop_offsets"] = torch.zeros(1, 2)
            return out

    with pytest.raises(
        ValueError, match=r"WithCropOffsets returns `crop_offsets`, which LlavaForConditionalGeneration"
    ):
        DistributedGRPOTrainer(
            path,
            [length_reward],
            vlm_config(tmp_path),
            image_rows(),
            processing_class=WithCropOffsets.from_pretrained(path),
        )
