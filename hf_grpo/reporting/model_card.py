"""The model card pushed with checkpoints: what was trained, how, and the recipe that reproduces it."""

from __future__ import annotations

import os

import yaml


def model_card_text(
    args,
    model_name: str | None,
    dataset_name: str | None,
    reward_names: list[str],
    log_history: list[dict],
    base_model: str | None = None,
    adapter: bool = False,
    quantized: str | None = None,
) -> str:
    """``base_model``: the model training started from (default ``args.model_name_or_path``); ``adapter``: the folder
    holds a PEFT adapter of it rather than full weights; ``quantized``: how the base was quantized while the adapter
    trained (e.g. ``4-bit nf4 (bitsandbytes)``), which a user must repeat to reproduce the trained policy."""
    base_model = base_model or args.model_name_or_path
    recipe = ""
    if args.recipe and os.path.isfile(args.recipe):
        with open(args.recipe) as f:
            recipe = f.read()
    settings = {
        k: getattr(args, k)
        for k in (
            "model_name_or_path",
            "dataset_name",
            "advantage_estimator",
            "loss_type",
            "num_generations",
            "max_completion_length",
            "learning_rate",
            "epsilon",
            "epsilon_high",
            "importance_sampling_level",
            "beta",
            "num_iterations",
            "dynamic_sampling",
            "overlong_buffer_length",
            "temperature",
            "seed",
        )
    }
    last = next((r for r in reversed(log_history) if "reward" in r), {})
    evals = {k: v for r in log_history for k, v in r.items() if k.startswith("eval_") and k.endswith("_accuracy")}
    lines = [
        "---",
        f"library_name: {'peft' if adapter else 'transformers'}",
        f"base_model: {base_model}",
        "tags: [hf_grpo, grpo, reinforcement-learning" + (", qlora" if quantized else "") + "]",
        "---",
        "",
        f"# {model_name or os.path.basename(os.path.abspath(args.output_dir))}",
        "",
        f"Trained with hf_grpo's `DistributedGRPOTrainer` from `{base_model}` on "
        f"`{dataset_name or args.dataset_name}` with rewards: {', '.join(reward_names)}."
        + (
            " This folder holds the LoRA adapter; load it with `peft.PeftModel.from_pretrained(base, folder)`."
            if adapter
            else ""
        )
        + (
            f" The adapter was trained on the base loaded in {quantized} (QLoRA): load the base with the same "
            f"`BitsAndBytesConfig` to get the trained policy exactly."
            if quantized
            else ""
        ),
        "",
        "## Settings",
        "",
        "```yaml",
        yaml.safe_dump(settings, sort_keys=False).rstrip(),
        "```",
        "",
    ]
    if last:
        lines += ["## Last logged training step", "", f"step {last.get('step')}: reward {last.get('reward'):.4f}", ""]
    if evals:
        lines += ["## Latest evaluation", ""] + [f"- {k}: {v:.4f}" for k, v in evals.items()] + [""]
    if recipe:
        lines += [f"## Recipe (`{args.recipe}`)", "", "```yaml", recipe.rstrip(), "```", ""]
    return "\n".join(lines)
