"""Run TRL's own GRPOTrainer test file against TRL and against hf_grpo, offline, and compare.

TRL's ``tests/test_grpo_trainer.py`` is read from a TRL git checkout (``--trl-repo``, at ``--rev``) or a tests folder
(``--tests-dir``); nothing of it is copied into this repository. For each variant a throw-away folder gets:

* the test file with the hub ids of its tiny models replaced by local random-init models of the same architecture
  (built here, with the embedded SmolLM2 tokenizer and its chat template) and, for ``ours``, the one import line
  swapped: ``from hf_grpo import DistributedGRPOTrainer as GRPOTrainer, GRPOConfig``;
* ``load_dataset`` bound to a local stand-in for the ``trl-internal-testing/zen`` prompt-only configs (standard and
  conversational; ``split``, ``streaming`` honoured). The image datasets have no stand-in: those tests fail for both.

Both variants run with pytest in a subprocess (``HF_HUB_OFFLINE=1``); their junit reports are compared test by test.
Prints a table (variant: passed / failed / skipped, and ours' failures by theme) and ends with
``RESULT trl_tests passed=<n> failed=<m> skipped=<k> trl_passed=<n2>``.

    python bench/trl_tests.py --trl-repo /work/.mirror/huggingface+trl/repo [--rev HEAD] [-k EXPR] [--work DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = ("testing_utils.py", "testing_constants.py", "conftest.py")
TRL_IMPORT = "from trl import GRPOConfig, GRPOTrainer"
OUR_IMPORT = "from hf_grpo import DistributedGRPOTrainer as GRPOTrainer, GRPOConfig"
HUB_ID = re.compile(r'"trl-internal-testing/(tiny-[A-Za-z0-9_.\-]+)"')

# Test-name keywords -> (theme, engineer's scope) for the failures that remain.
THEMES = (
    (
        (
            "liger",
            "entropy",
            "moe",
            "Moe",
            "loss_type",
            "sapo",
            "vespo",
            "luspo",
            "cast_lm_head",
            "router",
            "off_policy",
            "importance_sampling",
            "delta",
            "beta",
            "kl",
            "bias_correction",
        ),
        "losses",
    ),
    (
        (
            "reward",
            "ref_model",
            "sync_ref",
            "generation_kwargs",
            "reward_processing",
            "final_log",
            "log_completions",
            "multi_objective",
            "weights",
        ),
        "rewards",
    ),
    (("paged", "continuous_batching", "structured", "regex", "vllm_model_impl", "vllm", "cache_implementation"), "gen"),
    (("hub", "wandb", "push", "model_card", "packaging"), "pkg"),
    (
        (
            "dataset",
            "eval",
            "iterable",
            "stream",
            "num_generations_eval",
            "dataloader",
            "steps_per_generation",
            "image",
            "vision",
            "vlm",
            "VL",
            "multimodal",
        ),
        "data",
    ),
    (("tool", "environment", "rollout_func", "agent", "multi_turn"), "agents"),
    (("peft", "lora", "Lora", "prompt_tuning", "bnb", "quantiz"), "peft/quant"),
)

LOCAL_HUB = '''"""Offline stand-ins for the hub datasets TRL's tests load (written by hf_grpo's bench/trl_tests.py)."""
import datasets

_ZEN = ["Beautiful is better than ugly.", "Explicit is better than implicit.", "Simple is better than complex.",
        "Complex is better than complicated.", "Flat is better than nested.", "Sparse is better than dense.",
        "Readability counts.", "Special cases aren't special enough to break the rules.",
        "Although practicality beats purity.", "Errors should never pass silently.", "Unless explicitly silenced.",
        "In the face of ambiguity, refuse the temptation to guess.",
        "There should be one-- and preferably only one --obvious way to do it.",
        "Although that way may not be obvious at first unless you're Dutch.", "Now is better than never.",
        "Although never is often better than *right* now.",
        "If the implementation is hard to explain, it's a bad idea.",
        "If the implementation is easy to explain, it may be a good idea.", "Namespaces are one honking great idea."]


def _rows(config, lines):
    if config == "standard_prompt_only":
        return {"prompt": [line.split(" ")[0] + " " + line.split(" ")[1] for line in lines]}
    if config == "conversational_prompt_only":
        return {"prompt": [[{"role": "user", "content": "What is " + line.split(" ")[0] + "?"}] for line in lines]}
    raise ValueError(f"no offline stand-in for trl-internal-testing/zen config {config!r}")


def load_dataset(path, name=None, split=None, streaming=False, **kwargs):
    if path != "trl-internal-testing/zen":
        return datasets.load_dataset(path, name, split=split, streaming=streaming, **kwargs)
    parts = {"train": datasets.Dataset.from_dict(_rows(name, _ZEN[:17])),
             "test": datasets.Dataset.from_dict(_rows(name, _ZEN[17:]))}
    if streaming:
        parts = {k: v.to_iterable_dataset() for k, v in parts.items()}
        return parts[split] if split else datasets.IterableDatasetDict(parts)
    return parts[split] if split else datasets.DatasetDict(parts)
'''


def read_sources(args) -> dict[str, str]:
    names = ("test_grpo_trainer.py",) + SUPPORT
    out = {}
    for name in names:
        if args.tests_dir:
            path = Path(args.tests_dir, name)
            if path.exists():
                out[name] = path.read_text()
        else:
            shown = subprocess.run(
                ["git", "--git-dir", args.trl_repo, "show", f"{args.rev}:tests/{name}"], capture_output=True, text=True
            )
            if shown.returncode == 0:
                out[name] = shown.stdout
    if "test_grpo_trainer.py" not in out:
        raise SystemExit("TRL's tests/test_grpo_trainer.py not found; pass --trl-repo (a git dir) or --tests-dir")
    return out


def build_models(ids: set[str], folder: Path) -> dict[str, str]:
    """Random-init tiny models for the hub ids whose architecture transformers has; returns id -> local path."""
    import torch
    import transformers

    sys.path.insert(0, str(ROOT))
    from hf_grpo.models import load_tokenizer, resolve_model_path

    tokenizer = load_tokenizer(resolve_model_path("smollm2-135m"))
    built = {}
    for hub_id in sorted(ids):
        match = re.match(r"tiny-([A-Za-z0-9]+?)For(CausalLM|SequenceClassification)", hub_id)
        if not match:
            continue
        arch, head = match.groups()
        config_cls = getattr(transformers, f"{arch}Config", None)
        model_cls = getattr(transformers, f"{arch}For{head}", None)
        if config_cls is None or model_cls is None:
            continue
        path = folder / hub_id
        if not (path / "config.json").exists():
            try:
                torch.manual_seed(0)
                # 64-dim heads: vLLM's CPU attention kernels need them (hf_grpo generates with vLLM when it is
                # installed); positions as many as the hub models declare, so the engine's context fits.
                config = config_cls(
                    vocab_size=len(tokenizer),
                    hidden_size=128,
                    intermediate_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    num_key_value_heads=1,
                    head_dim=64,
                    max_position_embeddings=32768,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                    bos_token_id=tokenizer.bos_token_id,
                    num_labels=1,
                    num_experts=4,
                    num_experts_per_tok=2,
                    moe_intermediate_size=8,
                    num_local_experts=4,
                )
                model = model_cls(config)
                model.save_pretrained(path)
                tokenizer.save_pretrained(path)
            except Exception as error:  # an architecture these generic sizes do not fit: left to the hub id
                print(f"  not built: {hub_id} ({type(error).__name__}: {str(error)[:80]})")
                continue
        built[hub_id] = str(path)
    return built


def tolerant_imports(text: str) -> str:
    """The snapshot's support file may name ``trl.import_utils`` helpers the installed TRL lacks: a missing one
    reads as "not available" (its tests skip) instead of failing the whole file's collection."""

    def shim(match):
        names = [n.strip() for n in match.group(1).replace("\n", " ").split(",") if n.strip()]
        return "import trl.import_utils as _trl_import_utils\n" + "".join(
            f"{n} = getattr(_trl_import_utils, {n!r}, lambda *a, **k: False)\n" for n in names
        )

    return re.sub(r"from trl\.import_utils import \(([^)]*)\)", shim, text)


def prepare(sources: dict[str, str], variant: str, models: dict[str, str], work: Path) -> Path:
    package = work / variant / "trl_tests"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (work / variant / "_local_hub.py").write_text(LOCAL_HUB)
    for name, text in sources.items():
        if name == "test_grpo_trainer.py":
            text = HUB_ID.sub(lambda m: f'"{models[m.group(1)]}"' if m.group(1) in models else m.group(0), text)
            if TRL_IMPORT not in text:
                raise SystemExit(f"the test file has no line {TRL_IMPORT!r} to swap")
            swapped = OUR_IMPORT if variant == "ours" else TRL_IMPORT
            text = text.replace(TRL_IMPORT, f"{swapped}\nfrom _local_hub import load_dataset", 1)
        elif name == "testing_utils.py":
            text = tolerant_imports(text)
        (package / name).write_text(text)
    return package


def run(variant: str, package: Path, work: Path, keyword: str | None) -> dict[str, str]:
    report = work / f"{variant}.xml"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join([str(work / variant), str(ROOT)]),
        "WANDB_MODE": "disabled",
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(package / "test_grpo_trainer.py"),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        "--rootdir",
        str(work / variant),
    ]
    if keyword:
        command += ["-k", keyword]
    subprocess.run(command, cwd=work / variant, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        tags = {child.tag for child in case}
        outcomes[name] = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
    return outcomes


def theme(test: str) -> str:
    for words, scope in THEMES:
        if any(w.lower() in test.lower() for w in words):
            return scope
    return "other"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trl-repo", default="/work/.mirror/huggingface+trl/repo", help="a TRL git directory")
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--tests-dir", help="a folder holding TRL's test_grpo_trainer.py (instead of --trl-repo)")
    parser.add_argument("--work", help="scratch folder (default: a new temporary one)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression (a subset of the tests)")
    parser.add_argument("--variants", default="trl,ours")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="trl_tests_"))
    sources = read_sources(args)
    models = build_models(set(HUB_ID.findall(sources["test_grpo_trainer.py"])), work / "models")
    print(f"local models for {len(models)} hub ids; work folder {work}")
    results = {}
    for variant in args.variants.split(","):
        results[variant] = run(variant, prepare(sources, variant, models, work), work, args.keyword)
        counts = collections.Counter(results[variant].values())
        print(
            f"{variant:>5}: passed {counts['passed']:4d}  failed {counts['failed']:4d}  skipped {counts['skipped']:4d}"
        )
    ours = results.get("ours", {})
    trl = results.get("trl", {})
    failing = [t for t, o in ours.items() if o == "failed"]
    by_theme = collections.defaultdict(list)
    for test in failing:
        by_theme[theme(test)].append(test)
    print("\nours' failures by theme (scope), with how TRL itself did on them:")
    for scope, tests in sorted(by_theme.items(), key=lambda kv: -len(kv[1])):
        trl_passed = sum(trl.get(t) == "passed" for t in tests)
        print(f"  {scope:<11} {len(tests):4d}  (TRL passed {trl_passed})")
        for test in tests:
            print(f"      {test}  [TRL: {trl.get(test, '-')}]")
    c = collections.Counter(ours.values())
    print(
        f"RESULT trl_tests passed={c['passed']} failed={c['failed']} skipped={c['skipped']} "
        f"trl_passed={collections.Counter(trl.values())['passed']}"
    )


if __name__ == "__main__":
    main()
