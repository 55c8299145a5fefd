"""Run TRL's own GRPOTrainer test file against TRL and against hf_grpo, offline, and compare.

TRL's ``tests/test_grpo_trainer.py`` is read from a TRL git checkout (``--trl-repo``, at ``--rev``) or a tests folder
(``--tests-dir``); nothing of it is copied into this repository. For each variant a throw-away folder gets:

* the test file with the hub ids of its tiny models replaced by local random-init models of the same architecture
  (built here, with the embedded SmolLM2 tokenizer and its chat template) and, for ``ours``, the one import line
  swapped: ``from hf_grpo import DistributedGRPOTrainer as GRPOTrainer, GRPOConfig``;
* the hub ids of TRL's tiny vision-language models (``TestGRPOTrainerVLM``) replaced likewise, by the tiny VLMs of
  ``tests/helpers/vlm_models.py`` (same families; LLaVA's ``vision_feature_layer`` set to -2, as in the hub models,
  since the tests assert which vision layers train; Qwen3.5 / Qwen3.5-MoE by its ``tiny_qwen3_5``). Gemma4 has no
  local build (transformers' Gemma4 processor module imports torchvision): its hub id stays, its tests fail for both;
* ``load_dataset`` bound to a local stand-in for the ``trl-internal-testing/zen`` prompt-only configs (standard and
  conversational; ``split``, ``streaming`` honoured) and for the ``conversational_prompt_only`` configs of
  ``trl-internal-testing/zen-image`` (``prompt`` plus one ``image``) and ``zen-multi-image`` (``prompt`` of text and
  image parts plus ``images``, 0 to 3 a row), with the questions, columns, features and 17 / 2 split of TRL's
  ``scripts/generate_zen_*image_dataset.py`` and seeded random-noise images of 32 to 63 pixels a side;
* a ``conftest.py`` (see ``CONFTEST``) naming parametrized tests by TRL's hub ids (so ``-k`` and the reports match
  TRL's test ids, whatever the local paths) and registering the helper's image-only processors.

Both variants run with pytest in a subprocess (``HF_HUB_OFFLINE=1``, ``OMP_NUM_THREADS=--threads``, default 1); their
junit reports are compared test by test. Each variant's pytest output (``-v``: one line per test as it ends) goes to
``<work>/<variant>/pytest.log``, so a run stopped early still shows how far it got. ``--ours-generation hf`` gives
ours TRL's default generation (transformers' generate) where a test leaves ``use_vllm`` unset, instead of hf_grpo's
``auto`` (vLLM when installed): on a machine where vLLM cannot load the tests' VLMs (its VLM model modules import
torchvision) the trainer's own paths still run.
Prints a table (variant: passed / failed / skipped, and ours' failures by theme) and ends with
``RESULT trl_tests passed=<n> failed=<m> skipped=<k> trl_passed=<n2>``.

    python bench/trl_tests.py --trl-repo /work/.mirror/huggingface+trl/repo [--rev HEAD] [-k EXPR] [--work DIR]
    python bench/trl_tests.py -k "VLM or multimodal"    # TRL's vision-language group (TestGRPOTrainerVLM)
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
    (("TestGRPOTrainerVLM", "multimodal"), "vision"),
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
import numpy as np
import PIL.Image
from datasets import Features, Image, List, Value

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


# trl-internal-testing/zen-multi-image's prompts as in TRL's scripts/generate_zen_multi_image_dataset.py, "<i>" marking
# an image part; zen-image's are the same questions as plain strings.
_MULTI = ["<i>What is better than ugly?", "What is better than implicit?<i>", "<i>What is better than complex?<i>",
          "<i><i>What is better than complicated?", "<i>What is better than nested?", "What is better than dense?<i>",
          "<i>What counts?<i>", "Are special cases enough to break the rules?", "What beats purity?<i><i>",
          "<i><i>What should never pass silently?<i>", "<i>When can errors pass silently?",
          "What should you do in the face of ambiguity?<i>", "<i>How many ways should there be to do it?<i><i>",
          "For whom may the way not be obvious at first?", "What is better than never?<i>",
          "Is<i> never better than *right* now?", "<i>What does it mean if the implementation is hard to explain?",
          "What does it mean if the implementation is easy to explain?<i>", "Any great ideas?"]
_TEXT = [{"content": Value("string"), "role": Value("string")}]
_PARTS = List({"content": List({"text": Value("string"), "type": Value("string")}), "role": Value("string")})


def _noise(rng, count):
    """Random-noise RGB images of 32 to 63 pixels a side, as TRL's generators make them (seeded here)."""
    sizes = [tuple(int(n) for n in rng.integers(32, 64, size=2)) for _ in range(count)]
    return [PIL.Image.fromarray(rng.integers(0, 256, size=(*size, 3), dtype=np.uint8)) for size in sizes]


def _parts(text):
    pieces = text.split("<i>")
    out = [{"type": "text", "text": pieces[0]}] if pieces[0] else []
    for piece in pieces[1:]:
        out += [{"type": "image"}] + ([{"type": "text", "text": piece}] if piece else [])
    return out


def _image_dataset(path, name):
    if name != "conversational_prompt_only":
        raise ValueError(f"no offline stand-in for {path} config {name!r}")
    rng = np.random.default_rng(0)
    if path == "trl-internal-testing/zen-image":
        data = {"prompt": [[{"role": "user", "content": q.replace("<i>", "")}] for q in _MULTI],
                "image": _noise(rng, len(_MULTI))}
        features = Features(prompt=_TEXT, image=Image())
    else:
        data = {"prompt": [[{"role": "user", "content": _parts(q)}] for q in _MULTI],
                "images": [_noise(rng, q.count("<i>")) for q in _MULTI]}
        features = Features(prompt=_PARTS, images=List(Image()))
    return datasets.Dataset.from_dict(data, features=features).train_test_split(test_size=0.1, shuffle=False)


def load_dataset(path, name=None, split=None, streaming=False, **kwargs):
    if path in ("trl-internal-testing/zen-image", "trl-internal-testing/zen-multi-image"):
        parts = dict(_image_dataset(path, name))
    elif path != "trl-internal-testing/zen":
        return datasets.load_dataset(path, name, split=split, streaming=streaming, **kwargs)
    else:
        parts = {"train": datasets.Dataset.from_dict(_rows(name, _ZEN[:17])),
                 "test": datasets.Dataset.from_dict(_rows(name, _ZEN[17:]))}
    if streaming:
        parts = {k: v.to_iterable_dataset() for k, v in parts.items()}
        return parts[split] if split else datasets.IterableDatasetDict(parts)
    return parts[split] if split else datasets.DatasetDict(parts)
'''


CONFTEST = '''"""Written by hf_grpo's bench/trl_tests.py in the folder above TRL's test package.

* Parametrized tests are named by TRL's hub ids, not by the local folders that stand in for them: their ids are then
  TRL's own, and ``-k`` selects what it selects on TRL's CI whatever the work folder is called (a path holding "vlm"
  would otherwise match ``-k VLM`` on every test parametrized by a local model).
* The helper's image-only processors (Qwen2-VL, Qwen2.5-VL, SmolVLM, Qwen3.5: transformers builds theirs only with
  torchvision) are registered before any test loads a local tiny VLM.
"""
try:
    from tests.helpers.vlm_models import register_image_only_processors, register_qwen3_5_processors
except ImportError:  # hf_grpo's tests folder not on the path: only the text models can load
    pass
else:
    register_image_only_processors()
    register_qwen3_5_processors()

HUB_IDS = %r


def pytest_make_parametrize_id(config, val, argname):
    return HUB_IDS.get(val) if isinstance(val, str) else None
'''


# Appended to ours' conftest with ``--ours-generation hf``.
HF_GENERATION = """

# --ours-generation hf: a test that leaves use_vllm unset gets TRL's default, use_vllm=False (transformers' generate),
# instead of hf_grpo's generation_backend auto (vLLM when it is installed).
import hf_grpo as _hf_grpo

_post_init = _hf_grpo.GRPOConfig.__post_init__


def _trl_generation_default(self, *args, **kwargs):
    if self.use_vllm is None and self.generation_backend == "auto":
        self.use_vllm = False
    _post_init(self, *args, **kwargs)


_hf_grpo.GRPOConfig.__post_init__ = _trl_generation_default
"""


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
    return built | build_vlms(ids, folder / "image_text")


# Hub VLM ids of TRL's tests with no local build, and why (transformers 5.19 has the model classes).
UNBUILT_VLMS = {
    "Gemma4ForConditionalGeneration": "transformers' Gemma4 processor module imports torchvision, not installable here",
}


def build_vlms(ids: set[str], folder: Path) -> dict[str, str]:
    """The tiny VLMs of ``tests/helpers/vlm_models.py`` for the hub ids of its families; returns id -> local path.

    The hub's tiny LLaVA / LLaVA-NeXT keep their source checkpoints' ``vision_feature_layer=-2`` (the last vision layer
    gets no gradient, which ``test_train_vlm`` asserts), the helper's use -1: the saved config is set to -2 (same
    weights). Hub ids of families the helper does not build are listed with the reason."""
    import json

    from tests.helpers.vlm_models import HUB_IDS, QWEN3_5_HUB_IDS, tiny_qwen3_5, tiny_vlm

    built = {}
    for hub_id in sorted(ids):
        family = HUB_IDS.get(f"trl-internal-testing/{hub_id}")
        if f"trl-internal-testing/{hub_id}" in QWEN3_5_HUB_IDS:
            built[hub_id] = tiny_qwen3_5(QWEN3_5_HUB_IDS[f"trl-internal-testing/{hub_id}"], folder)
            continue
        if family is None:
            reason = next((why for arch, why in UNBUILT_VLMS.items() if hub_id.startswith(f"tiny-{arch}")), None)
            if reason:
                print(f"  not built: {hub_id} ({reason})")
            continue
        path = Path(tiny_vlm(family, folder))
        if family in ("llava", "llava_next"):
            config = json.loads((path / "config.json").read_text())
            if config.get("vision_feature_layer") != -2:
                config["vision_feature_layer"] = -2
                (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
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


def prepare(
    sources: dict[str, str], variant: str, models: dict[str, str], work: Path, generation: str = "auto"
) -> Path:
    package = work / variant / "trl_tests"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (work / variant / "_local_hub.py").write_text(LOCAL_HUB)
    hub_ids = {path: f"trl-internal-testing/{hub_id}" for hub_id, path in sorted(models.items())}
    conftest = CONFTEST % hub_ids
    if variant == "ours" and generation == "hf":
        conftest += HF_GENERATION
    (work / variant / "conftest.py").write_text(conftest)
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


def run(variant: str, package: Path, work: Path, keyword: str | None, threads: int = 1) -> dict[str, str]:
    report = work / f"{variant}.xml"
    env = {
        **os.environ,
        # torch's intra-op threads: tiny models gain nothing from more, and on a busy machine threads that spin-wait
        # for each other made a VLM step ten to twenty times slower (2 threads against 1 on 2 loaded cores).
        "OMP_NUM_THREADS": str(threads),
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
        "-v",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        "--rootdir",
        str(work / variant),
    ]
    if keyword:
        command += ["-k", keyword]
    # Each test's outcome is written as it ends (the junit report only at the end): a run stopped early still says
    # how far it got and what passed.
    with open(work / variant / "pytest.log", "w") as log:
        subprocess.run(command, cwd=work / variant, env=env, stdout=log, stderr=subprocess.STDOUT)
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
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the pytest processes (default 1)")
    parser.add_argument(
        "--ours-generation",
        choices=("auto", "hf"),
        default="auto",
        help="ours, where a test leaves use_vllm unset: auto (hf_grpo's default: vLLM when installed) or hf (TRL's "
        "default, transformers' generate; e.g. where vLLM cannot load the tests' VLMs: its VLM modules import "
        "torchvision)",
    )
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="trl_tests_"))
    sources = read_sources(args)
    models = build_models(set(HUB_ID.findall(sources["test_grpo_trainer.py"])), work / "models")
    print(f"local models for {len(models)} hub ids; work folder {work}")
    results = {}
    for variant in args.variants.split(","):
        package = prepare(sources, variant, models, work, args.ours_generation)
        results[variant] = run(variant, package, work, args.keyword, args.threads)
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
