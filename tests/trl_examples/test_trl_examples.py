"""TRL's documented GRPO examples, run with only the import changed (plus the model id, a local dataset and the
run size: 2 steps on CPU), in subprocesses with colocated vLLM: TRL's quickstart, a conversational dataset scored by
`trl.rewards` (extra columns reach the rewards), and TRL's own `trl/scripts/grpo.py` driven by a recipe."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trl

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# The run size every example gets (TRL's examples train for epochs on a GPU).
RUN = dict(
    max_steps=2,
    per_device_train_batch_size=4,
    num_generations=4,
    max_completion_length=16,
    use_vllm=True,
    vllm_mode="colocate",
    vllm_enforce_eager=True,
    vllm_kv_cache_gib=0.5,
    use_cpu=True,
    report_to="none",
    save_strategy="no",
    plot_metrics=False,
    disable_tqdm=True,
    logging_steps=1,
)
MATH = [("What is 2+3?", "5"), ("What is 4*2?", "8"), ("What is 9-6?", "3"), ("What is 10/2?", "5")] * 4


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_script(tmp_path: Path, source: str, *args: str) -> str:
    script = tmp_path / "example.py"
    script.write_text(source)
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env={
            "PYTHONPATH": str(REPO),
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "TOKENIZERS_PARALLELISM": "false",
        },
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc.stdout


def test_trl_quickstart(tmp_path, vllm_tiny_path):
    data = write_jsonl(
        tmp_path / "deepmath" / "train.jsonl",
        [{"prompt": [{"role": "user", "content": q}], "solution": a} for q, a in MATH],
    )
    source = textwrap.dedent(f"""
        from datasets import load_dataset
        from hf_grpo import DistributedGRPOTrainer as GRPOTrainer, GRPOConfig   # was: from trl import GRPOTrainer
        from trl.rewards import accuracy_reward

        dataset = load_dataset("json", data_files={str(data)!r}, split="train")

        trainer = GRPOTrainer(
            model={vllm_tiny_path!r},
            reward_funcs=accuracy_reward,
            args=GRPOConfig(output_dir="out", **{RUN!r}),
            train_dataset=dataset,
        )
        trainer.train()
        print("STEPS", trainer.state.global_step, "BACKEND", trainer.args.generation_backend)
        print("REWARD_KEYS", sorted(k for k in trainer.state.log_history[0] if k.startswith("rewards/")))
    """)
    out = run_script(tmp_path, source)
    assert "STEPS 2 BACKEND vllm" in out
    assert "rewards/accuracy_reward/mean" in out


def test_conversational_dataset_with_trl_rewards_and_extra_columns(tmp_path, vllm_tiny_path):
    rows = [
        {
            "prompt": [
                {"role": "system", "content": "Think in <think></think>, then answer."},
                {"role": "user", "content": q},
            ],
            "solution": a,
            "difficulty": i % 3,
        }
        for i, (q, a) in enumerate(MATH)
    ]
    data = write_jsonl(tmp_path / "conv" / "train.jsonl", rows)
    source = textwrap.dedent(f"""
        from datasets import load_dataset
        from hf_grpo import DistributedGRPOTrainer as GRPOTrainer, GRPOConfig   # was: from trl import ...
        from trl.rewards import accuracy_reward, think_format_reward

        seen = []

        def difficulty_bonus(completions, difficulty, solution, **kwargs):   # extra columns arrive by name
            seen.append((len(completions), list(difficulty), list(solution)))
            return [0.1 * d for d in difficulty]

        dataset = load_dataset("json", data_files={str(data)!r}, split="train")
        trainer = GRPOTrainer(model={vllm_tiny_path!r}, reward_funcs=[accuracy_reward, think_format_reward,
                              difficulty_bonus], args=GRPOConfig(output_dir="out", **{RUN!r}), train_dataset=dataset)
        trainer.train()
        n, difficulty, solution = seen[0]
        assert n == len(difficulty) == len(solution) == 4 and set(solution) <= {{"3", "5", "8"}}
        print("STEPS", trainer.state.global_step)
        print("KEYS", sorted(k for k in trainer.state.log_history[0] if k.endswith("/mean") and "rewards" in k))
    """)
    out = run_script(tmp_path, source)
    assert "STEPS 2" in out
    for name in ("accuracy_reward", "think_format_reward", "difficulty_bonus"):
        assert f"rewards/{name}/mean" in out


@pytest.mark.parametrize("variant", ["full", "qlora"])
def test_trl_grpo_script_with_a_recipe(tmp_path, vllm_tiny_path, variant):
    """TRL's own grpo.py with two imports swapped. ``qlora``: TRL's ModelConfig flags (``load_in_4bit``, ``use_peft``)
    reach the trainer as TRL's script builds them (``get_quantization_config``, ``get_peft_config``)."""
    data_dir = tmp_path / "math_data"
    write_jsonl(
        data_dir / "train.jsonl", [{"prompt": [{"role": "user", "content": q}], "solution": a} for q, a in MATH]
    )
    source = (Path(trl.__file__).parent / "scripts" / "grpo.py").read_text()
    # The only change: GRPOTrainer and GRPOConfig come from hf_grpo.
    swaps = {
        "    from trl import GRPOTrainer, get_dataset, get_peft_config, get_quantization_config\n": (
            "    from trl import get_dataset, get_peft_config, get_quantization_config\n"
            "    from hf_grpo import DistributedGRPOTrainer as GRPOTrainer\n"
        ),
        "    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser\n": (
            "    from trl import DatasetMixtureConfig, ModelConfig, TrlParser\n"
            "    from hf_grpo.trl_script import GRPOConfig\n"
        ),
    }
    for old, new in swaps.items():
        assert source.count(old) == 1, f"TRL's grpo.py changed: {old!r}"
        source = source.replace(old, new)
    recipe = {
        "model_name_or_path": vllm_tiny_path,
        "dataset_name": str(data_dir),
        "reward_funcs": ["accuracy_reward"],
        "output_dir": str(tmp_path / "out"),
        **RUN,
    }
    if variant == "qlora":
        recipe.update(load_in_4bit=True, use_peft=True, lora_r=4, lora_target_modules=["q_proj", "v_proj"])
        recipe.update(save_strategy="steps", save_steps=2)  # the checkpoint's card names the base's quantization
    (tmp_path / "recipe.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in recipe.items()))
    out = run_script(tmp_path, source, "--config", str(tmp_path / "recipe.yaml"))
    assert "Training completed" in out
    weights = "adapter_model.safetensors" if variant == "qlora" else "model.safetensors"
    assert (tmp_path / "out" / weights).exists()
    if variant == "qlora":
        card = (tmp_path / "out" / "checkpoint-2" / "README.md").read_text()
        assert "library_name: peft" in card and "loaded in 4-bit nf4 (bitsandbytes)" in card
