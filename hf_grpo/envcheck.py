"""`python -m hf_grpo.envcheck`: fail loudly if the installed environment cannot train.

Catches the known traps: a CUDA torch pulled onto a CPU machine by a loose requirement, and a torchvision whose
compiled ops do not match torch (transformers imports it when present, and every `from_pretrained` then fails).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile


def check() -> list[str]:
    problems = []
    import torch

    if torch.__version__.split("+")[0] != "2.13.0":
        problems.append(f"torch {torch.__version__} installed; the tested set (constraints.txt) pins 2.13.0")
    if importlib.util.find_spec("torchvision") is not None:
        try:
            import torchvision  # noqa: F401

            _ = torch.ops.torchvision.nms  # the op whose absence breaks transformers' image utilities
        except (RuntimeError, AttributeError, ImportError) as e:
            problems.append(
                f"torchvision is installed but broken against this torch ({e}); "
                f"run: pip uninstall -y torchvision torchaudio torchcodec"
            )
    try:
        from transformers import AutoModelForCausalLM, LlamaConfig

        config = LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
        with tempfile.TemporaryDirectory() as tmp:
            AutoModelForCausalLM.from_config(config).save_pretrained(tmp)
            AutoModelForCausalLM.from_pretrained(tmp)
    except Exception as e:  # any failure here means training cannot start
        problems.append(f"transformers cannot save/load a model: {type(e).__name__}: {e}")
    return problems


def main() -> int:
    problems = check()
    for p in problems:
        print(f"hf_grpo envcheck: {p}", file=sys.stderr)
    if not problems:
        print("hf_grpo envcheck: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
