"""`hf-grpo eval`: accuracy of a model or checkpoint on a prompt dataset, with the trainer's evaluation code.

    hf-grpo eval --model outputs/gsm8k/checkpoint-200 --dataset ../shared/data/gsm8k/dev.jsonl \\
        --system_prompt "... \\boxed{N} ..." [--k 8 --temperature 1.0] [--max_samples 200] [--output preds.jsonl]

Greedy pass@1 by default; ``--k N`` samples N completions per prompt and reports mean@N and pass@N. Strict
accuracy is the ``--reward`` function's verdict (default ``boxed``: right answer inside ``\\boxed{}``); lenient
accuracy is the last number in the text (see `hf_grpo.evaluation`). Prints a table with 95% intervals and writes
every prediction as JSONL; ``--summary`` also writes the table's numbers as JSON. A checkpoint holding a LoRA adapter
(``adapter_config.json``) is merged into its base model first, so vLLM can load it. The dataset is read like a
training dataset (`hf_grpo.data`).

Bad input fails in one line before the model loads: numbers out of range and an output folder that does not exist
(argparse's usage error), then a model that cannot load, a dataset that cannot be read and an unknown ``--reward``
(``hf-grpo eval: error: ...``, exit status 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time

from .accuracy import EvalResult


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hf-grpo eval", description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--model", default="smollm2-135m", help="Model name, path, hub id, or a checkpoint folder.")
    parser.add_argument("--dataset", required=True, help="JSONL file, datasets folder/file, or arithmetic:N.")
    parser.add_argument("--system_prompt", default=None)
    parser.add_argument("--reward", default="boxed", help="Reward deciding strict correctness (score >= 1).")
    parser.add_argument("--k", type=int, default=1, help="Samples per prompt; 1 = greedy pass@1.")
    parser.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature when k > 1.")
    parser.add_argument("--max_tokens", type=int, default=256)
    parser.add_argument("--max_samples", type=int, default=None, help="Evaluate the first N rows only.")
    parser.add_argument("--backend", choices=("auto", "vllm", "hf"), default="auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--enforce_eager", action="store_true", help="vLLM without graph compilation.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="predictions.jsonl", help="Where every prediction is written.")
    parser.add_argument(
        "--summary",
        default=None,
        help="Also write the table's numbers as JSON here (accuracies, intervals, counts, seconds).",
    )
    args = parser.parse_args(argv)
    for problem in _argument_problems(args):
        parser.error(problem)
    return args


def _argument_problems(args: argparse.Namespace) -> list[str]:
    checks = [
        (args.k >= 1, f"--k must be >= 1, got {args.k}"),
        (args.max_tokens >= 1, f"--max_tokens must be >= 1, got {args.max_tokens}"),
        (
            args.max_samples is None or args.max_samples >= 1,
            f"--max_samples must be >= 1 (or left out for every row), got {args.max_samples}",
        ),
        (
            args.k == 1 or args.temperature > 0,
            f"--temperature must be > 0 to draw --k {args.k} different samples, got {args.temperature}",
        ),
    ]
    for flag, path in (("--output", args.output), ("--summary", args.summary)):
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        checks.append(
            (
                folder is None or os.path.isdir(folder),
                f"{flag} {path}: folder {folder} does not exist (create it first)",
            )
        )
        checks.append((path is None or not os.path.isdir(path), f"{flag} {path} is a folder; give a file name"))
    return [message for ok, message in checks if not ok]


def merged_checkpoint(path: str, dtype: str) -> str:
    """A folder with full weights: ``path`` itself, or its LoRA adapter merged into the base model."""
    if not os.path.isfile(os.path.join(path, "adapter_config.json")):
        return path
    from peft import PeftModel

    from ..models.loading import load_model, load_tokenizer

    with open(os.path.join(path, "adapter_config.json")) as f:
        base = json.load(f)["base_model_name_or_path"]
    merged = PeftModel.from_pretrained(load_model(base, dtype), path).merge_and_unload()
    out = tempfile.mkdtemp(prefix="hf_grpo-merged-")
    merged.save_pretrained(out)
    load_tokenizer(base).save_pretrained(out)
    return out


def format_table(name: str, result: EvalResult) -> str:
    metric = "pass@1 (greedy)" if result.k == 1 else f"mean@{result.k}"

    def pct(x: float) -> str:
        return f"{100 * x:5.1f}"

    def interval(lo_hi: tuple[float, float]) -> str:
        return f"[{pct(lo_hi[0])}, {pct(lo_hi[1])}]"

    lines = [
        f"{'dataset':<20}{'prompts':>8}  {'metric':<16}{'strict %':>9} {'95% CI':<15}{'lenient %':>10} {'95% CI':<15}",
        f"{name[:20]:<20}{result.count:>8}  {metric:<16}{pct(result.accuracy):>9} "
        f"{interval(result.strict_interval):<15}{pct(result.lenient_accuracy):>10} "
        f"{interval(result.lenient_interval):<15}",
    ]
    if result.k > 1:
        lines.append(
            f"{'':<20}{'':>8}  {f'pass@{result.k}':<16}{pct(result.strict_pass_at_k):>9} {'':<15}"
            f"{pct(result.lenient_pass_at_k):>10}"
        )
    lines.append(f"mean completion length: {result.mean_length:.1f} tokens")
    return "\n".join(lines)


def summary_record(args: argparse.Namespace, result: EvalResult, seconds: float) -> dict:
    """The numbers of the table, for scripts: the EvalResult without its predictions, and what was evaluated."""
    record = {key: value for key, value in dataclasses.asdict(result).items() if key != "predictions"}
    record.update(model=args.model, dataset=args.dataset, reward=args.reward, eval_seconds=seconds)
    return record


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    from accelerate import Accelerator

    from ..config.run_config import RunConfig
    from ..data import DataFormatError, load_prompt_dataset
    from ..generation import SamplingParams, build_generator
    from ..models.loading import ModelLoadError, check_model_path, load_model, load_tokenizer
    from ..rewards import RewardRunner, load_reward_function
    from .accuracy import evaluate_rows

    try:  # what the user named, checked before anything heavy loads
        config = RunConfig(
            output_dir=tempfile.mkdtemp(prefix="hf_grpo-eval-"),
            generation_backend=args.backend,
            dtype=args.dtype,
            max_completion_length=args.max_tokens,
            temperature=args.temperature,
            vllm_enforce_eager=args.enforce_eager,
            seed=args.seed,
            report_to="none",
            num_generations=max(args.k, 2),
            per_device_train_batch_size=max(args.k, 2),
        )
        model_path = check_model_path(args.model)
        dataset = load_prompt_dataset(args.dataset, system_prompt=args.system_prompt)
        reward = load_reward_function(args.reward, config)
    except (ModelLoadError, DataFormatError, FileNotFoundError, ValueError, ImportError) as e:
        print(f"hf-grpo eval: error: {e}", file=sys.stderr)
        return 2
    model_path = merged_checkpoint(model_path, args.dtype)
    accelerator = Accelerator()  # after the config, which sets up the processes (gloo on CPU, see GRPOConfig)
    tokenizer = load_tokenizer(model_path)
    model = load_model(model_path, args.dtype) if config.generation_backend == "hf" else None
    generator = build_generator(config, accelerator, model, tokenizer, model_path)
    runner = RewardRunner([reward], timeout=config.reward_timeout)
    sampling = SamplingParams.from_config(config, greedy=args.k == 1)
    result = evaluate_rows(
        generator, tokenizer, dataset, runner, sampling, accelerator, max_rows=args.max_samples, k=args.k
    )
    # Each process holds the predictions of its own rows (r, r + W, ...): the main process gathers them all, in
    # dataset order, and alone writes the files (several writers to one path would keep only one process's rows).
    predictions = result.predictions
    if accelerator.num_processes > 1:
        from accelerate.utils import gather_object

        predictions = sorted(gather_object(predictions), key=lambda record: (record["row"], record["sample"]))
    if accelerator.is_main_process:
        with open(args.output, "w") as f:
            for record in predictions:
                f.write(json.dumps(record) + "\n")
        print(format_table(os.path.basename(args.dataset), result))
        if args.summary:
            with open(args.summary, "w") as f:
                json.dump(summary_record(args, result, time.perf_counter() - start), f, indent=1)
        print(f"predictions: {args.output}", file=sys.stderr)
    generator.close()
    return 0
