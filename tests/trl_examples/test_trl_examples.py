"""TRL's documented GRPO examples, run with only the import changed (plus the model id, a local dataset and the
run size), with colocated vLLM: TRL's quickstart, a conversational dataset scored by `trl.rewards` (extra columns
reach the rewards), and TRL's own `trl/scripts/grpo.py` driven by a recipe (full weights, and QLoRA).

The four runs are scripts run as a user runs them (``python SCRIPT ARGS``, each in its own folder, with its own
argv and environment), two to a subprocess, one after the other (`tests.helpers.one_process`): the import of torch,
transformers, TRL and vLLM is paid twice, not four times. Each run builds its own trainer and engine; the second
trainer's engine retires the first one's, as hf_grpo does for any later colocated trainer in a process. TRL's grpo.py
runs second in its process: it ends with ``trainer.end()``, which destroys the process group, and retiring its engine
afterwards fails (``ValueError: Invalid process group specified`` from vLLM's shutdown), so two grpo.py runs cannot
share a process.

Steps: the quickstart and the QLoRA recipe run 2 steps, so the second round generates after a weight sync into the
engine (full weights; a LoRA adapter over a 4-bit base: two different sync paths). The conversational example and the
full-weight recipe prove what one step shows (the columns reach the rewards, the script trains and saves), and their
sync is the quickstart's path, so they run 1 step.
"""

import json
import textwrap
from pathlib import Path

import pytest
import trl

from tests.helpers.one_process import ScriptResult, ScriptRun, run_scripts

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# The run size every example gets (TRL's examples train for epochs on a GPU); max_steps is set per example.
RUN = dict(
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
VARIANTS = ("full", "qlora")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def quickstart(folder: Path, model: str) -> str:
    data = write_jsonl(
        folder / "deepmath" / "train.jsonl",
        [{"prompt": [{"role": "user", "content": q}], "solution": a} for q, a in MATH],
    )
    run = {**RUN, "max_steps": 2}
    return textwrap.dedent(f"""
        from datasets import load_dataset
        from hf_grpo import DistributedGRPOTrainer as GRPOTrainer, GRPOConfig   # was: from trl import GRPOTrainer
        from trl.rewards import accuracy_reward

        dataset = load_dataset("json", data_files={str(data)!r}, split="train")

        trainer = GRPOTrainer(
            model={model!r},
            reward_funcs=accuracy_reward,
            args=GRPOConfig(output_dir="out", **{run!r}),
            train_dataset=dataset,
        )
        trainer.train()
        print("STEPS", trainer.state.global_step, "BACKEND", trainer.args.generation_backend)
        print("REWARD_KEYS", sorted(k for k in trainer.state.log_history[0] if k.startswith("rewards/")))
    """)


def conversational(folder: Path, model: str) -> str:
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
    data = write_jsonl(folder / "conv" / "train.jsonl", rows)
    run = {**RUN, "max_steps": 1}
    return textwrap.dedent(f"""
        from datasets import load_dataset
        from hf_grpo import DistributedGRPOTrainer as GRPOTrainer, GRPOConfig   # was: from trl import ...
        from trl.rewards import accuracy_reward, think_format_reward

        seen = []

        def difficulty_bonus(completions, difficulty, solution, **kwargs):   # extra columns arrive by name
            seen.append((len(completions), list(difficulty), list(solution)))
            return [0.1 * d for d in difficulty]

        dataset = load_dataset("json", data_files={str(data)!r}, split="train")
        trainer = GRPOTrainer(model={model!r}, reward_funcs=[accuracy_reward, think_format_reward,
                              difficulty_bonus], args=GRPOConfig(output_dir="out", **{run!r}), train_dataset=dataset)
        trainer.train()
        n, difficulty, solution = seen[0]
        assert n == len(difficulty) == len(solution) == 4 and set(solution) <= {{"3", "5", "8"}}
        print("STEPS", trainer.state.global_step)
        print("KEYS", sorted(k for k in trainer.state.log_history[0] if k.endswith("/mean") and "rewards" in k))
    """)


def trl_grpo_script() -> str:
    """TRL's own grpo.py with two imports swapped: the lines docs/trl_compatibility.md gives."""
    source = (Path(trl.__file__).parent / "scripts" / "grpo.py").read_text()
    # The only change: GRPOTrainer and GRPOConfig come from hf_grpo.
    swaps = {
        "    from trl import GRPOTrainer, get_dataset, get_peft_config, get_quantization_config\n": (
            "    from trl import get_dataset, get_peft_config, get_quantization_config\n"
            "    from hf_grpo import DistributedGRPOTrainer as GRPOTrainer\n"
        ),
        "    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser\n": (
            "    from trl import DatasetMixtureConfig, ModelConfig, TrlParser\n    from hf_grpo import GRPOConfig\n"
        ),
    }
    for old, new in swaps.items():
        assert source.count(old) == 1, f"TRL's grpo.py changed: {old!r}"
        source = source.replace(old, new)
    return source


def grpo_recipe(folder: Path, model: str, variant: str) -> Path:
    data_dir = folder / "math_data"
    write_jsonl(
        data_dir / "train.jsonl", [{"prompt": [{"role": "user", "content": q}], "solution": a} for q, a in MATH]
    )
    recipe = {
        "model_name_or_path": model,
        "dataset_name": str(data_dir),
        "reward_funcs": ["accuracy_reward"],
        "output_dir": str(folder / "out"),
        **RUN,
        "max_steps": 1,
    }
    if variant == "qlora":
        recipe.update(load_in_4bit=True, use_peft=True, lora_r=4, lora_target_modules=["q_proj", "v_proj"])
        # 2 steps: the sync path of an adapter over a 4-bit base; the checkpoint's card names the base's quantization
        recipe.update(max_steps=2, save_strategy="steps", save_steps=2)
    (folder / "recipe.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in recipe.items()))
    return folder / "recipe.yaml"


def example_run(name: str, folder: Path, source: str, *args: str) -> ScriptRun:
    script = folder / "example.py"
    script.write_text(source)
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(folder), "TOKENIZERS_PARALLELISM": "false"}
    return ScriptRun(name, str(script), list(args), str(folder), env, str(folder / "stdout"), str(folder / "stderr"))


@pytest.fixture(scope="module")
def examples(tmp_path_factory, vllm_tiny_path) -> dict[str, tuple[Path, ScriptResult | None]]:
    """Every example's folder and result: two subprocesses, each running one of our examples and then TRL's grpo.py
    (last: it ends with ``trainer.end()``, which destroys the process group a later engine's retirement needs)."""
    folders = {name: tmp_path_factory.mktemp(name) for name in ("quickstart", "conversational", *VARIANTS)}
    ours = [
        example_run(name, folders[name], write(folders[name], vllm_tiny_path))
        for name, write in (("quickstart", quickstart), ("conversational", conversational))
    ]
    try:
        source = trl_grpo_script()
    except AssertionError:  # TRL's script changed: its tests say so, the other examples still run
        source = None
    grpo = [
        example_run(v, folders[v], source, "--config", str(grpo_recipe(folders[v], vllm_tiny_path, v)))
        for v in (VARIANTS if source else ())
    ]
    # quickstart (2 steps) with the full recipe (1), the conversational example (1) with the QLoRA recipe (2).
    groups = [[ours[0], *grpo[:1]], [ours[1], *grpo[1:]]]
    env = {**ours[0].env, "HOME": str(tmp_path_factory.mktemp("runner_home"))}
    results = run_scripts(groups, tmp_path_factory.mktemp("runners"), env=env)
    return {name: (folders[name], results.get(name)) for name in folders}


def output_of(examples, name: str) -> tuple[Path, str]:
    folder, result = examples[name]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:] + result.runner_tail
    return folder, result.stdout


def test_trl_quickstart(examples):
    _, out = output_of(examples, "quickstart")
    assert "STEPS 2 BACKEND vllm" in out
    assert "rewards/accuracy_reward/mean" in out


def test_conversational_dataset_with_trl_rewards_and_extra_columns(examples):
    _, out = output_of(examples, "conversational")
    assert "STEPS 1\n" in out
    for name in ("accuracy_reward", "think_format_reward", "difficulty_bonus"):
        assert f"rewards/{name}/mean" in out


@pytest.mark.parametrize("variant", VARIANTS)
def test_trl_grpo_script_with_a_recipe(examples, variant):
    """TRL's own grpo.py with two imports swapped. ``qlora``: TRL's ModelConfig flags (``load_in_4bit``, ``use_peft``)
    reach the trainer as TRL's script builds them (``get_quantization_config``, ``get_peft_config``)."""
    trl_grpo_script()  # TRL's script still has the two import lines to swap
    folder, out = output_of(examples, variant)
    assert "Training completed" in out
    weights = "adapter_model.safetensors" if variant == "qlora" else "model.safetensors"
    assert (folder / "out" / weights).exists()
    if variant == "qlora":
        card = (folder / "out" / "checkpoint-2" / "README.md").read_text()
        assert "library_name: peft" in card and "loaded in 4-bit nf4 (bitsandbytes)" in card
