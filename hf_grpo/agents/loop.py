"""Multi-turn rollouts: the model's turns, tool calls and observations, kept as one exact token ledger per rollout.

A rollout alternates: sample an assistant turn (with ``max_tokens`` = what is left of ``max_completion_length``),
parse its tool calls, run them in order on the rollout's lane (`tools.Lane`; other rollouts' calls run meanwhile,
bounded, with a timeout each), append the observation tokens the chat template puts between turns, and sample the
next turn. Its training row is ``prompt_ids`` + the ledger; the ledger's mask is 1 on sampled tokens and 0 on
observation tokens, and its sampling log-probs are 0.0 (masked) on the latter.

A vision-language policy's rollout also keeps its media in step with the ledger (`hf_grpo.agents.media.RolloutMedia`):
the images of its prompt and its tool results, its context before image expansion (what a vLLM engine is sent) and
its vision tensors; every turn is generated from the whole context's. A text-only policy given an image block stops
the run with an error naming the tool (TRL prints the block list into the context, then fails in the forward pass).

Termination reasons (``rollout/termination/<reason>`` fractions): ``eos`` (a turn without tool calls), ``max_turns``
(``max_tool_calling_iterations`` tool rounds done, the last turn's calls not run), ``length`` (a turn hit its budget),
``tool_output_overflow`` (the observation did not fit in the remaining budget), ``env_done`` (the environment set
``done``), ``error`` (generation failed for this rollout). ``length`` and ``tool_output_overflow`` rollouts count as
truncated (``finished`` False): ``completions/clipped_ratio`` and ``mask_truncated_completions`` see them, unlike
TRL's loop, which rolls the observation back and leaves the row looking finished.

Departures from TRL's ``_tool_call_loop``: every turn's budget is what remains (TRL asks for the full
``max_completion_length`` each turn and cuts afterwards, discarding generation); tool output is capped in tokens
with a visible marker; malformed calls are answered with an error and counted (the completion the rewards see keeps
TRL's shape: such a call stays text in ``content``, out of ``tool_calls``, with no tool turn); rollouts advance
independently (streaming backends) instead of in batch-wide iterations; no collective runs inside the loop
(`hf_grpo.generation.turns`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, field

from ..generation import GenerationResult, SamplingParams
from ..generation.base import Turn
from .encoding import valid_text
from .media import ImageText, RolloutMedia
from .protocol import ToolProtocol
from .tools import ERROR_KINDS, Lane, Tool, ToolCall, ToolExecutor, ToolResult, ToolStats, result_of

logger = logging.getLogger(__name__)

TERMINATIONS = ("eos", "max_turns", "length", "tool_output_overflow", "env_done", "error")


@dataclass
class Rollout:
    index: int
    prompt_ids: list[int]
    tools: dict[str, Tool]
    env: object | None = None
    ids: list[int] = field(default_factory=list)  # the ledger: sampled + observation tokens
    mask: list[int] = field(default_factory=list)  # 1 sampled, 0 observation
    logprobs: list[float] | None = field(default_factory=list)
    # Per ledger token, the weight version that sampled it (-1 on observation tokens); None: a backend without labels.
    versions: list[int] | None = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)  # the completion as reward functions see it
    turns: int = 0
    tool_rounds: int = 0
    termination: str | None = None
    pending: list = field(default_factory=list)  # (call, future) of the tool round in flight
    lane: Lane = field(default_factory=Lane)  # where its calls run, in order (its environment's, if it has one)
    error: str | None = None
    media: RolloutMedia | None = None  # a vision-language policy's: images and vision tensors, in step with `ids`

    @property
    def finished(self) -> bool:
        return self.termination in ("eos", "max_turns", "env_done")


@dataclass
class AgentResult(GenerationResult):
    """`GenerationResult` plus what multi-turn rollouts add (all ``[P*n]``, group-major)."""

    completion_mask: list[list[int]] | None = None  # 1 sampled, 0 observation
    prompt_ids: list[list[int]] | None = None  # per rollout (an environment may extend the prompt)
    prompts: list | None = None  # per rollout, the prompt messages with reset()'s text: what rewards get as `prompts`
    completions: list | None = None  # messages, TRL's multi-turn completion format
    environments: list | None = None
    extras: dict[str, list] = field(default_factory=dict)  # rollout_func's extra keys, for the reward functions
    metrics: dict[str, float] = field(default_factory=dict)
    # A vision-language policy's: per rollout, the images and vision tensors of its prompt and completion.
    media: list | None = None


def assistant_message(text: str, content: str, calls: list[ToolCall]) -> dict:
    """A sampled turn as reward functions see it, in TRL's shape: ``tool_calls`` holds only the calls that parsed
    (``{"type": "function", "function": {"name": str, "arguments": dict}}``). When one did not, ``content`` is the
    turn's whole text, so the unreadable call stays there as TRL leaves it; the model itself still gets an error
    observation for it, and it is counted (``tools/errors/parse_error``)."""
    parsed = [c for c in calls if c.error is None]
    # The parser's content drops the family's markup (GPT-OSS channels, reasoning delimiters' special tokens).
    message = {"role": "assistant", "content": content if len(parsed) == len(calls) else text}
    if parsed:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in parsed
        ]
    return message


def parsed_only(calls: list[ToolCall], results: list[ToolResult]) -> tuple[list[ToolCall], list[ToolResult]]:
    """The calls in the assistant message's ``tool_calls`` and their results: an unparsed call has no tool turn."""
    kept = [(c, res) for c, res in zip(calls, results) if c.error is None]
    return [c for c, _ in kept], [res for _, res in kept]


class AgentLoop:
    def __init__(
        self,
        tokenizer,
        protocol: ToolProtocol,
        executor: ToolExecutor,
        max_completion_length: int,
        max_tool_rounds: int | None,
        max_tool_output_tokens: int | None,
        tool_names: list[str],
        images: ImageText | None = None,
    ):
        self.tokenizer = tokenizer
        self.images = images  # a vision-language policy's (hf_grpo.agents.media); None: a text-only policy
        self.protocol = protocol
        self.executor = executor
        self.budget = max_completion_length
        self.max_tool_rounds = max_tool_rounds
        self.max_tool_output_tokens = max_tool_output_tokens
        # Per-tool metrics exist for every configured tool, called or not: every process must log the same keys
        # (one collective reduces them), and a hallucinated name must not mint a new metric.
        self.tool_names = tool_names

    def run(self, rollouts: list[Rollout], backend, sampling: SamplingParams) -> AgentResult:
        stats = ToolStats()
        start = time.perf_counter()
        with backend.session():
            for r in rollouts:
                backend.submit(r.index, r.prompt_ids, self._turn_sampling(sampling, r), _context_media(r))
            if backend.streaming:
                self._stream(rollouts, backend, sampling, stats)
            else:
                self._waves(rollouts, backend, sampling, stats)
            backend.finish()
        return self._result(rollouts, stats, time.perf_counter() - start)

    # ---- scheduling ---------------------------------------------------------------------------------------------
    def _stream(self, rollouts, backend, sampling, stats) -> None:
        by_key = {r.index: r for r in rollouts}
        active = len(rollouts)
        while active:
            waiting = [r for r in rollouts if r.pending]
            for r in waiting:
                if all(f.done() for _, f in r.pending):
                    active -= self._after_tools(r, backend, sampling, stats)
            waiting = [r for r in rollouts if r.pending]
            if backend.busy():
                for turn in backend.poll(0.005 if waiting else 0.5):
                    active -= self._after_turn(by_key[turn.key], turn)
            elif waiting:
                wait([f for r in waiting for _, f in r.pending], timeout=1.0, return_when=FIRST_COMPLETED)

    def _waves(self, rollouts, backend, sampling, stats) -> None:
        by_key = {r.index: r for r in rollouts}
        while backend.more():
            for turn in backend.poll(0.0):
                self._after_turn(by_key[turn.key], turn)
            for r in rollouts:
                if r.pending:
                    wait([f for _, f in r.pending])
                    self._after_tools(r, backend, sampling, stats)

    def _turn_sampling(self, sampling: SamplingParams, r: Rollout) -> SamplingParams:
        return dataclasses.replace(sampling, max_tokens=self.budget - len(r.ids))

    # ---- one rollout's steps ------------------------------------------------------------------------------------
    def _after_turn(self, r: Rollout, turn: Turn) -> int:
        """Record a sampled turn; start its tool calls. Returns 1 if the rollout ended."""
        ids, done, logprobs = turn.token_ids, turn.finished, turn.logprobs
        r.turns += 1
        r.ids += ids
        r.mask += [1] * len(ids)
        if r.media is not None:
            r.media.add_turn(ids)
        if r.logprobs is not None:
            r.logprobs = r.logprobs + list(logprobs) if logprobs is not None else None
        if r.versions is not None:
            r.versions = r.versions + list(turn.versions) if turn.versions is not None else None
        text = self.protocol.plain_text(ids)
        content, calls = self.protocol.parse(ids, r.prompt_ids + r.ids[: len(r.ids) - len(ids)], r.tools)
        r.messages.append(assistant_message(text, content, calls))
        if not done:
            return self._end(r, "length")
        if not calls:
            return self._end(r, "eos")
        if self.max_tool_rounds is not None and r.tool_rounds >= self.max_tool_rounds:
            return self._end(r, "max_turns")
        r.pending = [(c, self.executor.submit(c, r.tools, r.lane)) for c in calls]
        return 0

    def _after_tools(self, r: Rollout, backend, sampling, stats: ToolStats) -> int:
        """Append the finished tool round's observation and submit the next turn. Returns 1 if the rollout ended."""
        calls = [c for c, _ in r.pending]
        results = [self._shown(result_of(c, f)) for c, f in r.pending]
        r.pending = []
        for result in results:
            stats.add(result)
        if r.media is None and any(result.parts for result in results):
            name = next(result.name for result in results if result.parts)
            raise ValueError(
                f"tool `{name}` returned an image block, but the policy is a text-only model, which cannot see "
                f"images: train a vision-language model (its processor then shows the image to it), or have the "
                f"tool return text"
            )
        try:
            if r.media is not None:
                seen = self.images.observation(calls, results, r.ids[-1])
                obs = seen.ids
            else:
                obs = self.protocol.observation_ids(calls, results, r.ids[-1])
        except ValueError as e:
            r.error = str(e)
            return self._end(r, "error")
        if len(r.ids) + len(obs) >= self.budget:  # no room for the observation and at least one more token
            return self._end(r, "tool_output_overflow")
        r.messages += self.protocol.tool_messages(*parsed_only(calls, results))
        r.ids += obs
        r.mask += [0] * len(obs)
        if r.media is not None:
            r.media.add_observation(seen)
        if r.logprobs is not None:
            r.logprobs = r.logprobs + [0.0] * len(obs)
        if r.versions is not None:
            r.versions = r.versions + [-1] * len(obs)
        r.tool_rounds += 1
        if getattr(r.env, "done", False):
            return self._end(r, "env_done")
        backend.submit(r.index, r.prompt_ids + r.ids, self._turn_sampling(sampling, r), _context_media(r))
        return 0

    def _shown(self, result: ToolResult) -> ToolResult:
        """Tool output as the model sees it: text a tokenizer can encode (`valid_text`; the tool's name is logged), cut
        to ``max_tool_output_tokens`` with a marker saying how much was cut. A multimodal result's text blocks share
        the cap, in order (the block that reaches it is cut, later ones dropped, the marker a block of its own at the
        end); its images are kept: their tokens count toward ``max_completion_length``."""
        texts = [p["text"] for p in result.parts if p["type"] == "text"] if result.parts else [result.content]
        valid = [valid_text(t) for t in texts]
        if valid != texts:
            logger.warning(
                "tool `%s` returned text with lone surrogates (not encodable as UTF-8): shown with U+FFFD in their "
                "place",
                result.name,
            )
        kept, cut = self._capped(valid)
        marker = f"\n...[tool output truncated: {cut} more tokens]" if cut else ""
        if not result.parts:
            content = kept[0] + marker
            return result if content == result.content else dataclasses.replace(result, content=content)
        it = iter(kept)
        parts = [{**p, "text": next(it)} if p["type"] == "text" else p for p in result.parts]
        parts = [p for p in parts if p["type"] != "text" or p["text"]] + (
            [{"type": "text", "text": marker}] * bool(cut)
        )
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        return dataclasses.replace(result, content=text, parts=parts)

    def _capped(self, texts: list[str]) -> tuple[list[str], int]:
        """``texts`` within ``max_tool_output_tokens`` together, in order, and how many tokens were cut."""
        if self.max_tool_output_tokens is None:
            return texts, 0
        kept, cut, left = [], 0, self.max_tool_output_tokens
        for text in texts:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            kept.append(text if len(ids) <= left else self.tokenizer.decode(ids[:left]))
            cut += max(0, len(ids) - left)
            left = max(0, left - len(ids))
        return kept, cut

    @staticmethod
    def _end(r: Rollout, reason: str) -> int:
        r.termination = reason
        return 1

    # ---- result -------------------------------------------------------------------------------------------------
    def _result(self, rollouts: list[Rollout], stats: ToolStats, seconds: float) -> AgentResult:
        n = max(len(rollouts), 1)
        reasons = Counter(r.termination for r in rollouts)
        metrics = {
            # TRL's definitions: calls per rollout, and failed calls per call.
            "tools/call_frequency": stats.calls / n,
            "tools/failure_frequency": stats.failures / stats.calls if stats.calls else 0.0,
            "rollout/turns_mean": sum(r.turns for r in rollouts) / n,
            "rollout/tool_rounds_mean": sum(r.tool_rounds for r in rollouts) / n,
            "rollout/observation_tokens_mean": sum(len(r.mask) - sum(r.mask) for r in rollouts) / n,
            "timing/agent_rollout_s": seconds,
        }
        metrics.update({f"rollout/termination/{k}": reasons.get(k, 0) / n for k in TERMINATIONS})
        metrics.update({f"tools/errors/{k}": float(stats.errors.get(k, 0)) for k in ERROR_KINDS})
        for name in self.tool_names:
            calls = stats.per_tool_calls.get(name, 0)
            metrics[f"tools/{name}/calls"] = float(calls)
            metrics[f"tools/{name}/failures"] = float(stats.per_tool_failures.get(name, 0))
            metrics[f"tools/{name}/latency_s"] = stats.per_tool_seconds.get(name, 0.0) / max(calls, 1)
        for r in rollouts:
            if r.error:
                logger.warning("rollout %d ended with an error: %s", r.index, r.error)
        logprobs = [r.logprobs for r in rollouts]
        versions = [r.versions for r in rollouts]
        return AgentResult(
            completion_ids=[r.ids for r in rollouts],
            finished=[r.finished for r in rollouts],
            logprobs=None if any(lp is None for lp in logprobs) else logprobs,
            versions=None if any(v is None for v in versions) else versions,
            completion_mask=[r.mask for r in rollouts],
            prompt_ids=[r.prompt_ids for r in rollouts],
            completions=[r.messages for r in rollouts],
            environments=[r.env for r in rollouts] if any(r.env is not None for r in rollouts) else None,
            metrics=metrics,
            media=[r.media.snapshot() for r in rollouts] if any(r.media is not None for r in rollouts) else None,
        )


def _context_media(r: Rollout):
    """What a backend needs besides the ids to generate a rollout's next turn: its images and vision tensors."""
    return r.media.snapshot() if r.media is not None else None
