"""Recipes: YAML files whose keys are `GRPOConfig` fields, plus command-line overrides.

    accelerate launch train.py --recipe recipes/dapo.yaml --learning_rate 2e-6

An unknown key in a recipe is an error naming the file, the line and the closest valid key; so is an unknown
``--flag`` on the command line. Command-line values win over the recipe, which wins over the defaults.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from .config import GRPOConfig


class RecipeError(ValueError):
    """A recipe or command line that cannot be mapped onto `GRPOConfig`."""


def config_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(GRPOConfig) if f.init}


def _closest(name: str, candidates: set[str]) -> str:
    match = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.5)
    return f"; did you mean `{match[0]}`?" if match else ""


def read_recipe(path: str | Path) -> dict:
    """Parse a recipe into a dict of config values, validating every key against `GRPOConfig`."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe {path} does not exist")
    text = path.read_text()
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise RecipeError(f"{path}: invalid YAML: {e}") from e
    if root is None:
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise RecipeError(f"{path}:{root.start_mark.line + 1}: a recipe is a mapping of GRPOConfig fields to values")
    known = config_fields()
    for key_node, _ in root.value:
        key = key_node.value
        if key not in known:
            raise RecipeError(f"{path}:{key_node.start_mark.line + 1}: unknown key `{key}`{_closest(key, known)} "
                              f"(keys are GRPOConfig fields; see `hf-grpo train --help`)")
    values = yaml.safe_load(text)
    values.setdefault("recipe", str(path))
    return values


def parse_config(argv: list[str] | None = None) -> GRPOConfig:
    """Build a `GRPOConfig` from ``--recipe``/``--config FILE`` and ``--field value`` overrides."""
    argv = list(sys.argv[1:] if argv is None else argv)
    recipe_values: dict = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--recipe", "--config"):
            if i + 1 >= len(argv):
                raise RecipeError(f"{arg} needs a file path")
            recipe_values = read_recipe(argv[i + 1])
            i += 2
            continue
        if arg.startswith(("--recipe=", "--config=")):
            recipe_values = read_recipe(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    # No prefix matching: `--num_generation` must be an error with a suggestion, not silently `--num_generations`.
    parser = HfArgumentParser(GRPOConfig, allow_abbrev=False)
    # Recipe values become the parser's defaults, so explicit flags still override them.
    parser.set_defaults(**recipe_values)
    namespace, unknown = parser.parse_known_args(rest)
    if unknown:
        flag = next((u for u in unknown if u.startswith("--")), unknown[0])
        name = flag.lstrip("-").split("=", 1)[0]
        raise RecipeError(f"unknown command-line argument `{flag}`{_closest(name, config_fields())}")
    values = vars(namespace)
    # Structured values from YAML (lists, dicts) survive set_defaults untouched; strings from the CLI are parsed
    # by HfArgumentParser according to each field's type.
    return GRPOConfig(**values)
