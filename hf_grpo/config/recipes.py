"""Recipes: YAML files whose keys are `RunConfig` fields (`GRPOConfig`'s, and the model, dataset, reward, adapter and
quantization fields), plus command-line overrides.

    accelerate launch train.py --recipe recipes/dapo.yaml --learning_rate 2e-6

An unknown key in a recipe is an error naming the file, the line and the closest valid key; so is an unknown
``--flag`` on the command line, a key given twice, and a value of the wrong type for its field. Command-line values
win over the recipe, which wins over the defaults.

YAML is read with YAML 1.2's scalars, not PyYAML's 1.1 ones: ``no``/``yes``/``on``/``off`` are strings (so
``save_strategy: no`` means "no", not ``False``; a bool field still accepts them), and ``1e-5`` is a number (1.1 reads
it as a string).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from ..errors import InputError
from .run_config import RunConfig
from .validation import ConfigError, describe, field_types, matches, takes_list_not_str


class RecipeError(InputError):
    """A recipe or command line that cannot be mapped onto `RunConfig`."""


_BOOL_WORDS = {"yes": True, "y": True, "on": True, "no": False, "n": False, "off": False}
# A number in exponent notation without a dot (1e-5, 3E+2): YAML 1.2 reads it as a float, PyYAML's 1.1 as a string.
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
# A negative number argparse would take for an option (its own test misses the exponent forms).
_NEGATIVE_NUMBER = re.compile(r"^-(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^-inf$")


class _RecipeLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans and exponent floats, refusing duplicate keys (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise RecipeError(
                    f"line {key_node.start_mark.line + 1}: key `{key}` is given twice (first on line "
                    f"{seen[key]}); YAML would silently keep the last value"
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


# Only true/false are booleans; the 1.1 words (yes/no/on/off) stay strings.
_RecipeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_RecipeLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789"))


def config_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(RunConfig) if f.init}


def _closest(name: str, candidates: set[str]) -> str:
    match = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.5)
    return f"; did you mean `{match[0]}`?" if match else ""


def _typed(value, tp, where: str, key: str):
    """``value`` checked against the field's type, with a scalar wrapped for a list field and a yes/no word read as a
    bool for a bool field."""
    if isinstance(value, str) and value.lower() in _BOOL_WORDS and matches(True, tp) and not matches(value, tp):
        return _BOOL_WORDS[value.lower()]
    if isinstance(value, (str, int, float)) and not isinstance(value, bool) and takes_list_not_str(tp):
        value = [value]
    if not matches(value, tp):
        raise RecipeError(f"{where}: key `{key}`: expected {describe(tp)}, got {value!r} ({type(value).__name__})")
    return value


def read_recipe(path: str | Path) -> dict:
    """Parse a recipe into a dict of config values, validating every key and value against `RunConfig`."""
    return _read_recipe(path)[0]


def _read_recipe(path: str | Path) -> tuple[dict, dict[str, str]]:
    """The recipe's values, and each key's ``file:line`` (for errors found later, in `GRPOConfig.__post_init__`)."""
    path = Path(path)
    if path.is_dir():
        raise RecipeError(f"recipe {path} is a folder; pass a .yaml file, e.g. recipes/quickstart.yaml")
    if not path.is_file():
        raise RecipeError(f"recipe {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise RecipeError(f"{path}:{line}: not UTF-8 text (byte 0x{e.object[e.start]:02x})") from None
    try:
        root = yaml.compose(text, Loader=_RecipeLoader)
        values = yaml.load(text, Loader=_RecipeLoader) if root is not None else {}
    except RecipeError as e:
        raise RecipeError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise RecipeError(
            f"{where}: invalid YAML: {problem}" + (f" ({e.context})" if getattr(e, "context", None) else "")
        ) from None
    if root is None:
        return {"recipe": str(path)}, {}
    if not isinstance(root, yaml.MappingNode):
        raise RecipeError(f"{path}:{root.start_mark.line + 1}: a recipe is a mapping of RunConfig fields to values")
    known, types, lines = config_fields(), field_types(RunConfig), {}
    for key_node, _ in root.value:
        key = key_node.value
        where = lines[key] = f"{path}:{key_node.start_mark.line + 1}"
        if key not in known:
            raise RecipeError(
                f"{where}: unknown key `{key}`{_closest(key, known)} "
                f"(keys are RunConfig fields; see `hf-grpo train --help`)"
            )
        values[key] = _typed(values[key], types[key], where, key)
    values.setdefault("recipe", str(path))
    return values, lines


def _join_negative_values(argv: list[str]) -> list[str]:
    """``--flag -1e-5`` -> ``--flag=-1e-5``: argparse would read an exponent-form negative number as an option."""
    out: list[str] = []
    for arg in argv:
        if out and _NEGATIVE_NUMBER.match(arg) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def parse_config(argv: list[str] | None = None) -> RunConfig:
    """Build a `RunConfig` from ``--recipe``/``--config FILE`` and ``--field value`` overrides."""
    argv = _join_negative_values(list(sys.argv[1:] if argv is None else argv))
    recipe_values: dict = {}
    lines: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--recipe", "--config"):
            if i + 1 >= len(argv):
                raise RecipeError(f"{arg} needs a file path")
            recipe_values, lines = _read_recipe(argv[i + 1])
            i += 2
            continue
        if arg.startswith(("--recipe=", "--config=")):
            recipe_values, lines = _read_recipe(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    # No prefix matching: `--num_generation` must be an error with a suggestion, not silently `--num_generations`.
    parser = HfArgumentParser(RunConfig, allow_abbrev=False)
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
    try:
        return RunConfig(**values)
    except ConfigError as e:
        # A value the recipe set (and no flag overrode) is reported at its line.
        flag_set = any(a.split("=", 1)[0] in (f"--{e.field}", f"--{(e.field or '').replace('_', '-')}") for a in rest)
        if e.field in lines and not flag_set:
            raise RecipeError(f"{lines[e.field]}: key `{e.field}`: {str(e).removeprefix('GRPOConfig: ')}") from None
        raise
