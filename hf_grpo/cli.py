"""The `hf-grpo` command: `hf-grpo train [--recipe FILE] [--field value ...]`, `hf-grpo serve [--model M]`,
`hf-grpo eval --model M --dataset D`, `hf-grpo plan --trainer-hosts h1,h2 ...`,
`hf-grpo check-code-dataset FILE`."""

from __future__ import annotations

import sys

from .errors import run_command

USAGE = """usage: hf-grpo <command> [options]

commands:
  train   run GRPO training (same arguments as train.py: --recipe FILE and any RunConfig --field value)
  serve   start a vLLM server for vllm_mode: server (hf-grpo serve --help)
  eval    accuracy of a model or checkpoint on a dataset, strict and lenient (hf-grpo eval --help)
  plan    print the command each node of a multi-node run executes, servers and trainers (hf-grpo plan --help)
  check-code-dataset
          count the rows of a code dataset whose tests a program that does not read the task passes
          (hf-grpo check-code-dataset --help)
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
    # Bad input ends each command with one line naming it (hf_grpo.errors); --verbose shows the traceback.
    if command == "eval":
        from .evaluation.command import main as eval_main

        return run_command(eval_main, rest, prog="hf-grpo eval")
    if command == "serve":
        from .generation.serve import main as serve_main

        return run_command(serve_main, rest, prog="hf-grpo serve")
    if command == "check-code-dataset":
        from .rewards.code.check_command import main as check_main

        return run_command(check_main, rest, prog="hf-grpo check-code-dataset")
    if command == "plan":  # exits 2 with one line naming the flag itself
        from .runtime.launching import main as plan_main

        return plan_main(rest)
    print(f"hf-grpo: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
