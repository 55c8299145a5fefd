"""TRL's vision-language script (``examples/scripts/grpo_vlm.py``, not shipped in TRL's wheel) run the way it runs,
with the config import that docs/vlm.md gives for a `TrlParser` script: TRL's ``ScriptArguments`` and
``ModelConfig`` parsed next to ``hf_grpo.GRPOConfig`` from the script's own command line (LoRA on
``q_proj``/``v_proj``, ``--dtype``), the dataset prepared as the script prepares it (conversation prompts, large
images filtered out, non-RGB images converted, a held-out split), TRL's ``think_format_reward`` and
``accuracy_reward``, and the model, quantization and PEFT configs handed to the trainer by TRL's helpers.

The script's steps are written out here (a local dataset and a tiny Idefics3 stand in for the hub's); TRL's text script
(``trl/scripts/grpo.py``) runs unchanged but for its imports in tests/trl_examples."""

import torch
from datasets import Dataset
from PIL import Image

from tests.helpers.vlm_models import tiny_vlm

SYSTEM_PROMPT = "Think in <think></think> tags, then answer."


def vlm_rows() -> Dataset:
    """The columns of the script's dataset (problem, image, solution): small RGB images, one greyscale image (the
    script converts it) and one image over 512 pixels (the script drops it)."""
    rows = []
    for i in range(10):
        size, mode = ((600, 32), "RGB") if i == 3 else ((48, 48), "L" if i == 5 else "RGB")
        rows.append({"problem": f"How many shapes? ({i})", "image": Image.new(mode, size, 128), "solution": str(i)})
    return Dataset.from_list(rows)


def grpo_vlm_script(argv: list[str], dataset: Dataset):
    """The steps of TRL's grpo_vlm.py, with the import docs/vlm.md shows for a TrlParser script."""
    from trl import ModelConfig, ScriptArguments, TrlParser, get_peft_config, get_quantization_config
    from trl.rewards import accuracy_reward, think_format_reward

    from hf_grpo import DistributedGRPOTrainer as GRPOTrainer
    from hf_grpo import GRPOConfig  # in a TrlParser script too; was: from trl import GRPOConfig

    script_args, training_args, model_args = TrlParser(
        (ScriptArguments, GRPOConfig, ModelConfig)
    ).parse_args_and_config(argv)
    dtype = model_args.dtype if model_args.dtype in ("auto", None) else getattr(torch, model_args.dtype)
    training_args.model_init_kwargs = dict(
        revision=model_args.model_revision, attn_implementation=model_args.attn_implementation, dtype=dtype
    )
    splits = dataset.train_test_split(test_size=2, seed=42)
    splits = splits.map(
        lambda row: {
            "prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": row["problem"]}]
        }
    )
    splits = splits.filter(lambda row: row["image"].size[0] < 512 and row["image"].size[1] < 512)
    splits = splits.map(lambda row: {"image": row["image"].convert("RGB")})
    trainer = GRPOTrainer(
        model=model_args.model_name_or_path,
        args=training_args,
        reward_funcs=[think_format_reward, accuracy_reward],
        train_dataset=splits["train"],
        eval_dataset=splits["test"] if training_args.eval_strategy != "no" else None,
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)
    return script_args, trainer


def test_trls_vlm_script_trains_with_the_documented_import(vlm_root, tmp_path):
    model = tiny_vlm("idefics3", vlm_root)
    argv = [
        "--model_name_or_path", model,
        "--dataset_name", "lmms-lab/multimodal-open-r1-8k-verified",
        "--output_dir", str(tmp_path / "out"),
        "--learning_rate", "1e-2",
        "--dtype", "float32",
        "--max_completion_length", "8",
        "--use_peft",
        "--lora_target_modules", "q_proj", "v_proj",
        "--log_completions",
        "--per_device_train_batch_size", "4",
        "--num_generations", "2",
        "--max_steps", "1",
        "--use_vllm", "false",
        "--use_cpu",
        "--report_to", "none",
        "--save_strategy", "no",
        "--logging_steps", "1",
        "--disable_tqdm", "true",
    ]  # fmt: skip
    script_args, trainer = grpo_vlm_script(argv, vlm_rows())
    assert script_args.dataset_name == "lmms-lab/multimodal-open-r1-8k-verified"  # TRL's ScriptArguments kept it
    assert trainer.args.generation_backend == "hf"
    # The script's filters reached the trainer: 8 training rows of 10, less the large image, all RGB.
    assert len(trainer.train_dataset) == 7 and {im.mode for im in trainer.train_dataset["image"]} == {"RGB"}
    # ModelConfig's LoRA flags became the trainer's adapter, on the targets the command line named.
    adapters = {name for name, p in trainer.model.named_parameters() if p.requires_grad}
    assert adapters and all("lora_" in name for name in adapters)
    assert {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in adapters} == {"q_proj", "v_proj"}
    entry = trainer.state.log_history[0]
    assert {"rewards/think_format_reward/mean", "rewards/accuracy_reward/mean", "loss"} <= set(entry)
    assert (tmp_path / "out" / "adapter_model.safetensors").exists()
