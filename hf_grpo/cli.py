"""The `hf-grpo` command: `hf-grpo train [--recipe FILE] [--field value ...]`, `hf-grpo serve [--model M]`,
`hf-grpo eval --model M --dataset D`."""

from __future__ import annotations

import sys

USAGE = """usage: hf-grpo <command> [options]

commands:
  train   run GRPO training (same arguments as train.py: --recipe FILE and any GRPOConfig --field value)
  serve   start a vLLM server for vllm_mode: server (hf-grpo serve --help)
  eval    accuracy of a model or checkpoint on a dataset, strict and lenient (hf-grpo eval --help)
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "train":
        from .train import main as train_main
        train_main(rest)
        return 0
    if command == "eval":
        from .eval_command import main as eval_main
        return eval_main(rest)
    if command == "serve":
        from .serve import main as serve_main
        return serve_main(rest)
    print(f"hf-grpo: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
