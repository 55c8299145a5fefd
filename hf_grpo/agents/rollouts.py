"""The trainer's entry to agentic rollouts: tools and environments (`AgentRollouts`) or TRL's ``rollout_func``
(`custom_rollouts`), both returning an `AgentResult` that `hf_grpo.rollout.RolloutCollector` scores like any other.

Reward functions get each rollout's prompt with the text its environment's ``reset()`` appended, as in TRL.
Departure from TRL, which has no prompt limit: a prompt whose tool descriptions and ``reset()`` text take it past
what the engine's context leaves (or past ``max_prompt_length`` when the user set it; `prompt_token_limit`) stops
the round with an error naming the environment, the sizes and the field to change, instead of failing in the engine.
"""

from __future__ import annotations

import importlib
import logging
import math

from ..data import is_conversational
from ..data.checks import prompt_token_limit
from ..data.images import images_of
from .calculator import calculator
from .environments import Environments, with_observation
from .loop import AgentLoop, AgentResult, Rollout
from .media import AgentPrompts, ImageText, RolloutMedia
from .protocol import ToolProtocol
from .tools import Lane, ToolDefinitionError, ToolExecutor, tools_from_callables

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

    def __init__(
        self, tokenizer, args, tools=None, environment_factory=None, max_position_embeddings=None, vision=None
    ):
        specs = list(tools) if tools else list(args.tools or [])
        self.tools = tools_from_callables([resolve_tool(t) for t in specs])
        self.executor = ToolExecutor(args.max_concurrent_tools, args.tool_timeout)
        self.envs = (
            Environments(environment_factory, args.seed, self.executor) if environment_factory is not None else None
        )
        template_kwargs = dict(args.chat_template_kwargs or {})
        if vision is not None and isinstance(getattr(vision.processor, "chat_template", None), str):
            # A vision-language policy's conversations are its processor's (VisionPrompts renders with it), whose
            # template may be stored apart from its tokenizer's (chat_template.json).
            template_kwargs.setdefault("chat_template", vision.processor.chat_template)
        self.protocol = ToolProtocol.for_tokenizer(tokenizer, args.tool_protocol, template_kwargs, args.tool_parser)
        # A vision-language policy's images: the prompts' and the tools' (hf_grpo.agents.media).
        self.images = ImageText(vision.processor, self.protocol) if vision is not None else None
        known = set(self.tools) | (self.envs.tool_names if self.envs else set())
        self.loop = AgentLoop(
            tokenizer,
            self.protocol,
            self.executor,
            args.max_completion_length,
            args.max_tool_calling_iterations,
            args.max_tool_output_tokens,
            sorted(known),
            self.images,
        )
        self.num_generations = args.num_generations
        # The longest prompt a rollout may start from, tool descriptions and reset() text included, and why
        # (hf_grpo.data.checks: they count toward max_prompt_length only when the user set it).
        self.prompt_limit, self.prompt_limit_reason = prompt_token_limit(args, max_position_embeddings, tools=True)
        # What the data checks measure a dataset prompt with: the tools, and one environment's (a dict of environments
        # gives each row its own, counted at step time).
        self.prompt_tools = dict(self.tools)
        if self.envs is not None and not self.envs.multi:
            self.prompt_tools.update(tools_from_callables(self.envs.probe_tools, "environment_factory"))
        # What the data checks measure an image row with: its text with the tools, its images expanded.
        self.vision = AgentPrompts(vision, self.protocol, self.prompt_tools) if vision is not None else None
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

    def encode_prompt(self, prompt, tools: bool = True) -> list[int]:
        """A dataset prompt's ids as the policy will see them, with the tool descriptions (`prompt_tools`); or, with
        ``tools=False``, without any (how much of a prompt is the tools', for the data checks' messages)."""
        return self.protocol.encode_prompt(prompt, self.prompt_tools if tools else {})

    def _check_length(self, p: int, prompt: list[dict], tools: dict, observation, tokens: int, env) -> None:
        """Raise, naming the environment, the sizes and the field to change, when prompt ``p`` of a round, with its
        tools and ``reset()`` text, is over `prompt_limit`. The data checks measured the dataset's prompts at init;
        what reaches this is what only exists now: the reset() text, or the tools of one of several environments."""
        if self.prompt_limit is None or tokens <= self.prompt_limit:
            return
        own = len(self.protocol.encode_prompt(prompt, {}))
        with_tools = len(self.protocol.encode_prompt(prompt, tools)) if observation else tokens
        parts = f"{own} of the prompt, {with_tools - own} of tool descriptions"
        if observation:
            parts += f", {tokens - with_tools} of the text reset() returned"
        who = f"environment {type(env).__name__}: " if env is not None else ""
        raise ValueError(
            f"{who}prompt {p} of this round is {tokens} tokens ({parts}), over the {self.prompt_limit} tokens a "
            f"prompt may have: {self.prompt_limit_reason}"
        )

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
                env = instances[i] if instances else None
                if key not in encoded:  # a group shares its prompt unless its resets disagreed
                    encoded[key] = (
                        self.images.prompt(row["prompt"], tools, obs, images_of(row))
                        if self.images is not None
                        else (self.protocol.encode_prompt(row["prompt"], tools, obs), None)
                    )
                    self._check_length(p, row["prompt"], tools, obs, len(encoded[key][0]), env)
                ids, media = encoded[key]
                # Its calls run in order on its lane: its environment's (reset there, get_reward later) or its own.
                lane = self.envs.lane_of(env) if env is not None else Lane()
                rollout = Rollout(index=i, prompt_ids=ids, tools=tools, env=env, lane=lane)
                rollout.media = RolloutMedia(ids, media) if media is not None else None
                rollouts.append(rollout)
        try:
            result = self.loop.run(rollouts, generator.turns(lockstep_any_rank), sampling)
        except BaseException:
            if instances is not None:
                instances.release()
            raise
        finally:
            for r in rollouts:
                if r.env is None:  # environment lanes live on until the round is scored
                    r.lane.close()
        # Reward functions get each rollout's prompt as the policy saw it: TRL passes reset()'s text with it.
        result.prompts = [
            with_observation(row["prompt"], observations[p * n + g] if observations else None)
            for p, row in enumerate(rows)
            for g in range(n)
        ]
        if self.envs is not None:
            result.environments = instances  # its lanes close when the trainer drops it, after scoring
            result.metrics["env/inconsistent_groups"] = float(inconsistent)
        return result

    def close(self) -> None:
        self.executor.close()
        if self.envs is not None:
            self.envs.close()


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
