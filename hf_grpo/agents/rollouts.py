"""The trainer's entry to agentic rollouts: tools and environments (`AgentRollouts`) or TRL's ``rollout_func``
(`custom_rollouts`), both returning an `AgentResult` that `hf_grpo.rollout.RolloutCollector` scores like any other.
"""

from __future__ import annotations

import importlib
import logging
import math

from ..data import is_conversational
from .backends import turn_backend
from .calculator import calculator
from .environments import Environments, with_observation
from .loop import AgentLoop, AgentResult, Rollout
from .protocol import ToolProtocol
from .tools import ToolDefinitionError, ToolExecutor, tools_from_callables

logger = logging.getLogger(__name__)


def _python_tool():
    from .python_tool import python

    return python


# Built-in tools a recipe names (``tools: [calculator, python]``); anything else is a dotted path.
BUILTIN_TOOLS = {"calculator": lambda: calculator, "python": _python_tool}


def resolve_tool(spec):
    """A tool callable from a callable, a built-in name or a ``module.function`` / ``module:function`` path."""
    if callable(spec):
        return spec
    if not isinstance(spec, str):
        raise ToolDefinitionError(f"tools: {spec!r} is neither a function nor a name")
    if spec in BUILTIN_TOOLS:
        return BUILTIN_TOOLS[spec]()
    module, sep, name = spec.replace(":", ".").rpartition(".")
    if not sep:
        raise ToolDefinitionError(
            f"tools: unknown tool {spec!r}; built-in tools are {', '.join(BUILTIN_TOOLS)}, "
            f"others are given as module.function"
        )
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ToolDefinitionError(f"tools: cannot import {spec!r} ({e}); give an importable module.function") from e


class AgentRollouts:
    """Multi-turn rollouts for one trainer: its tools, environments, protocol and tool executor."""

    def __init__(self, tokenizer, args, tools=None, environment_factory=None):
        specs = list(tools) if tools else list(args.tools or [])
        self.tools = tools_from_callables([resolve_tool(t) for t in specs])
        self.envs = Environments(environment_factory, args.seed) if environment_factory is not None else None
        self.protocol = ToolProtocol.for_tokenizer(tokenizer, args.tool_protocol, args.chat_template_kwargs)
        self.executor = ToolExecutor(args.max_concurrent_tools, args.tool_timeout)
        known = set(self.tools) | (self.envs.tool_names if self.envs else set())
        self.loop = AgentLoop(
            tokenizer,
            self.protocol,
            self.executor,
            args.max_completion_length,
            args.max_tool_calling_iterations,
            args.max_tool_output_tokens,
            sorted(known),
        )
        self.num_generations = args.num_generations
        self.max_prompt_length = args.max_prompt_length
        logger.info(
            "agentic rollouts: %d tool(s) %s, %s, tool protocol %s",
            len(self.tools),
            sorted(self.tools),
            "environments" if self.envs else "no environment",
            self.protocol.mode,
        )

    def tool_functions(self) -> list:
        """TRL's ``trainer.tools``: the tool callables, then each environment's tool methods not already named."""
        funcs = [tool.func for tool in self.tools.values()]
        return funcs + [m for m in (self.envs.probe_tools if self.envs else []) if m.__name__ not in self.tools]

    def encode_prompt(self, prompt) -> list[int]:
        """A dataset prompt's ids as the policy will see them: with the tool descriptions (not an environment's)."""
        return self.protocol.encode_prompt(prompt, self.tools)

    def reward_functions(self) -> list:
        return self.envs.reward_functions() if self.envs else []

    def generate(
        self, generator, rows: list[dict], n: int, sampling, round_key: int, process: int, lockstep_any_rank=None
    ) -> AgentResult:
        for i, row in enumerate(rows):
            if not is_conversational(row["prompt"]):
                raise ValueError(
                    f"row {i} of this round has a plain-text prompt; tool and environment rollouts need "
                    f"conversational prompts (a list of {{'role', 'content'}} messages)"
                )
        instances = observations = env_tools = None
        inconsistent = 0
        if self.envs is not None:
            instances, observations, env_tools, inconsistent = self.envs.start(rows, n, round_key, process)
        rollouts, encoded = [], {}
        for p, row in enumerate(rows):
            for g in range(n):
                i = p * n + g
                tools = {**self.tools, **(env_tools[i] if env_tools else {})}
                obs = observations[i] if observations else None
                key = (p, obs)
                if key not in encoded:  # a group shares its prompt unless its resets disagreed
                    encoded[key] = self.protocol.encode_prompt(with_observation(row["prompt"], obs), tools)
                    if self.max_prompt_length is not None and len(encoded[key]) > self.max_prompt_length:
                        raise ValueError(
                            f"prompt {p} of this round is {len(encoded[key])} tokens with its tool descriptions"
                            f"{' and reset observation' if obs else ''}, over max_prompt_length="
                            f"{self.max_prompt_length} (the engine is sized for prompt + max_completion_length); "
                            f"raise max_prompt_length: tools add their schemas to every prompt"
                        )
                rollouts.append(
                    Rollout(index=i, prompt_ids=encoded[key], tools=tools, env=instances[i] if instances else None)
                )
        result = self.loop.run(rollouts, turn_backend(generator, lockstep_any_rank), sampling)
        if self.envs is not None:
            result.metrics["env/inconsistent_groups"] = float(inconsistent)
        return result

    def close(self) -> None:
        self.executor.close()


ROLLOUT_FUNC_KEYS = ("prompt_ids", "completion_ids", "logprobs")


def custom_rollouts(rollout_func, prompts: list, trainer, n: int, eos_ids: set[int]) -> AgentResult:
    """TRL's ``rollout_func(prompts, trainer)``: called with this process's prompts (each once); returns
    ``prompt_ids`` (one per prompt or one per completion), ``completion_ids`` and ``logprobs`` (one per completion,
    ``n`` per prompt, group-major), optionally ``env_mask`` (1 on the model's tokens); every other key reaches the
    reward functions, per completion (a list of that length) or broadcast (anything else), as in TRL."""
    name = getattr(rollout_func, "__name__", "rollout_func")
    out = rollout_func(prompts, trainer)
    if not isinstance(out, dict):
        raise TypeError(f"{name} must return a dict with {', '.join(ROLLOUT_FUNC_KEYS)}, got {type(out).__name__}")
    missing = [k for k in ROLLOUT_FUNC_KEYS if k not in out]
    if missing:
        raise ValueError(f"{name} must return keys {missing} in its output dict (it returned {sorted(out)})")
    completions = [list(map(int, c)) for c in out["completion_ids"]]
    total = len(prompts) * n
    if len(completions) != total:
        raise ValueError(
            f"{name} returned {len(completions)} completions for {len(prompts)} prompts x "
            f"num_generations={n}; it must return {total}, group-major"
        )
    prompt_ids = [list(map(int, p)) for p in out["prompt_ids"]]
    if len(prompt_ids) == len(prompts):
        prompt_ids = [prompt_ids[i // n] for i in range(total)]
    elif len(prompt_ids) != total:
        raise ValueError(
            f"{name} returned {len(prompt_ids)} prompt_ids; expected one per prompt ({len(prompts)}) "
            f"or one per completion ({total})"
        )
    logprobs = out["logprobs"]
    if logprobs is not None:
        logprobs = [
            [math.nan if x is None else float(x[0] if isinstance(x, (list, tuple)) else x) for x in lp]
            for lp in logprobs
        ]
        bad = [i for i, (lp, c) in enumerate(zip(logprobs, completions)) if len(lp) != len(c)]
        if bad:
            raise ValueError(
                f"{name}: completion {bad[0]} has {len(completions[bad[0]])} tokens but "
                f"{len(logprobs[bad[0]])} logprobs"
            )
        if any(math.isnan(x) for lp in logprobs for x in lp):
            logprobs = None  # incomplete: no mismatch correction rather than a NaN one
    mask = out.get("env_mask")
    if mask is not None:
        mask = [[int(m) for m in row] for row in mask]
        bad = [i for i, (m, c) in enumerate(zip(mask, completions)) if len(m) != len(c)]
        if bad or len(mask) != total:
            raise ValueError(
                f"{name}: env_mask must have one entry per completion token (completion "
                f"{bad[0] if bad else len(mask)} does not)"
            )
    extras = {
        k: (v if isinstance(v, list) and len(v) == total else [v] * total)
        for k, v in out.items()
        if k not in (*ROLLOUT_FUNC_KEYS, "env_mask")
    }
    return AgentResult(
        completion_ids=completions,
        finished=[bool(c) and c[-1] in eos_ids for c in completions],  # TRL: ends in EOS
        logprobs=logprobs,
        completion_mask=mask,
        prompt_ids=prompt_ids,
        extras=extras,
    )
