"""How tool calls appear in the model's text, and how tool results enter its context, token-exactly.

Two protocols, chosen per tokenizer at init (``tool_protocol: auto``; `hf_grpo.agents.templates` inspects the
template):

* ``template``: the model's own chat template renders tools (``apply_chat_template(tools=...)``) and tool turns, and
  the family's parser (`hf_grpo.agents.parsers`, or ``tool_parser:``) reads the calls the model writes.
* ``fallback``: for templates that ignore tools (the embedded SmolLM2's plain ChatML). hf_grpo writes the tool list
  and the call format into the system message (`FALLBACK_SYSTEM`), the model calls a tool with
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes' format), and results come back as a ``user``
  turn holding ``<tool_response>...</tool_response>`` blocks, rendered by the model's own template.

Token exactness (the invariant the trainer relies on): a rollout's training row is the sampled tokens, verbatim,
followed by observation tokens, followed by the next sampled tokens, and so on. Nothing sampled is re-tokenized.
Observation tokens are what the chat template writes after the token the model stopped on (its end-of-turn or
call token: ``<|im_end|>``, ``<|eot_id|>``, GPT-OSS's ``<|call|>``, GLM's ``<|observation|>``, ...) up to and
including the next assistant header: rendered on a dummy conversation with the tool messages, cut right after the
first occurrence of that token inside the dummy assistant turn. Only the observation is taken from the render, never
the earlier turns, so templates that render earlier assistant turns differently once more messages follow (Qwen3's
empty ``<think></think>`` block, drawn only on the last assistant turn; reasoning dropped from earlier turns) need
no substitute "training template": what the model sampled, reasoning included, stays in the row as sampled.
Departure from TRL, which requires prefix-preserving templates and swaps in stored training templates for the
families whose templates are not.

A multimodal result (text and image blocks, `hf_grpo.agents.media`) is rendered as its blocks: a ``tool`` message whose
content is the blocks (template), or the ``<tool_response>`` user turn holding them (fallback); the image blocks
become the template's image placeholders, which the policy's processor then expands (``encode``).

Tool and environment text is encoded so that special-token strings in it stay text (`hf_grpo.agents.encoding`).
Calls get a 9-character id when the model wrote none (Mistral's templates require one); the ids are rendered in the
observation only, and reward functions see TRL's message shapes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import partial

from ..data.prompts import is_conversational
from ..data.schema import without_nulls
from .encoding import encode_with_literals, special_strings
from .parsers import PARSERS
from .templates import choose_parser, inspect_template, unsupported_reason
from .tools import Tool, ToolCall, ToolResult

logger = logging.getLogger(__name__)

PROTOCOLS = ("auto", "template", "fallback")

FALLBACK_SYSTEM = (
    "You can call tools. To call one, write a JSON object inside <tool_call></tool_call> tags, for example:\n"
    """<tool_call>{{"name": "{example}", "arguments": {{{example_args}}}}}</tool_call>
The result comes back inside <tool_response></tool_response> tags. When you have the result, give the final answer.

Tools:
{tools}"""
)


def _describe(tool: Tool) -> str:
    fn = tool.schema["function"]
    params = fn.get("parameters", {}).get("properties", {})
    required = set(fn.get("parameters", {}).get("required", []))
    args = ", ".join(
        f"{name}: {spec.get('type', 'any')}{'' if name in required else ' (optional)'}" for name, spec in params.items()
    )
    line = f"- {fn['name']}({args}): {fn.get('description', '')}"
    for name, spec in params.items():
        if spec.get("description"):
            line += f"\n    {name}: {spec['description']}"
    return line


@dataclass
class ToolProtocol:
    tokenizer: object
    mode: str  # "template" or "fallback"
    chat_template_kwargs: dict | None = None
    parser: str = "hermes"  # a key of PARSERS, or "transformers" (the tokenizer's own response template)

    @classmethod
    def for_tokenizer(
        cls, tokenizer, protocol: str = "auto", chat_template_kwargs: dict | None = None, parser: str | None = None
    ):
        if protocol not in PROTOCOLS:
            raise ValueError(f"tool_protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        if protocol == "fallback":
            if parser not in (None, "hermes"):
                raise ValueError(
                    f"tool_parser={parser!r} with tool_protocol=fallback: the fallback protocol teaches the model "
                    "Hermes' <tool_call> JSON, so its parser is hermes; use tool_protocol: template (or auto) "
                    "to parse the model's own format"
                )
            return cls(tokenizer, "fallback", chat_template_kwargs)
        report = inspect_template(tokenizer, chat_template_kwargs)
        name = type(tokenizer).__name__
        if not report.supports_tools:
            if protocol == "auto" and not report.renders_tools:  # it may also raise on the tool role
                logger.warning(
                    "%s's chat template ignores tools: using the fallback tool protocol (tools described in the "
                    "system prompt, <tool_call> JSON calls; docs/agents.md)",
                    name,
                )
                return cls(tokenizer, "fallback", chat_template_kwargs)
            raise ValueError(
                f"tool_protocol={protocol}, but {name}'s chat template cannot carry a tool exchange: "
                f"{unsupported_reason(report) if report.renders_tools or report.error else 'it ignores tools'} "
                "(checked at init with a sentinel conversation). Options: tool_protocol: fallback (hf_grpo "
                "describes the tools in the system prompt and parses <tool_call> JSON), or a chat template that "
                "renders tools, assistant tool_calls and tool messages (docs/agents.md)"
            )
        chosen = choose_parser(tokenizer, report, parser)
        logger.info("tool protocol: the chat template's own, call parser %s", chosen)
        return cls(tokenizer, "template", chat_template_kwargs, chosen)

    # ---- prompts ------------------------------------------------------------------------------------------------
    def system_text(self, tools: dict[str, Tool]) -> str:
        """The fallback protocol's instructions, with the tools described and the first one as the example."""
        first = next(iter(tools.values()))
        params = first.schema["function"].get("parameters", {}).get("properties", {})
        example_args = ", ".join(f'"{k}": {json.dumps(_example_value(v.get("type")))}' for k, v in params.items())
        return FALLBACK_SYSTEM.format(
            example=first.name, example_args=example_args, tools="\n".join(_describe(t) for t in tools.values())
        )

    def prompt_messages(self, messages: list[dict], tools: dict[str, Tool]) -> list[dict]:
        """The conversation to render: unchanged in template mode. In fallback mode, earlier tool turns in the prompt
        (few-shot demonstrations, a resumed episode) are written in the protocol's own syntax (assistant
        ``tool_calls`` as ``<tool_call>`` text, ``tool`` messages as one ``user`` turn of ``<tool_response>``
        blocks), and the protocol goes into the system message (before the row's own system message if it has one).
        """
        if self.mode == "template" or not tools:
            return messages
        messages = fallback_history(messages)
        text = self.system_text(tools)
        if messages and messages[0]["role"] == "system":
            return [
                {**messages[0], "content": with_text(messages[0]["content"], f"{text}\n\n", before=True)},
                *messages[1:],
            ]
        return [{"role": "system", "content": text}, *messages]

    def encode_prompt(
        self, messages: list[dict], tools: dict[str, Tool], observation: str | None = None, encode=None
    ) -> list[int]:
        """The prompt's ids with the tools; ``observation`` (an environment's ``reset()`` text) is appended to the last
        user message as literal text: its special-token strings stay text. ``encode(render, literals)``: the render's
        ids (default `encode_with_literals`; a vision-language policy's expands the images, `hf_grpo.agents.media`)."""
        render = self._prompt_render(messages, tools)
        encode = encode or partial(encode_with_literals, self.tokenizer)
        return encode(render, [observation] if observation else [])

    def prompt_text(self, messages: list[dict], tools: dict[str, Tool]) -> str:
        """The prompt's text with the tools, as `encode_prompt` renders it."""
        return self._prompt_render(messages, tools)([])

    def _prompt_render(self, messages: list[dict], tools: dict[str, Tool]):
        if not is_conversational(messages):
            raise ValueError("tool and environment rollouts need conversational prompts (a list of messages)")
        # Rows from a datasets.Dataset carry every key of every row at every depth (Arrow structs), set to None: a
        # user message's tool_calls, one call's arguments with another call's argument names.
        messages = without_nulls(messages)
        kwargs = dict(self.chat_template_kwargs or {})
        if self.mode == "template" and tools:
            kwargs["tools"] = [t.schema for t in tools.values()]
        rendered = self.prompt_messages(messages, tools)

        def render(literals: list[str]) -> str:
            convo = rendered
            if literals:
                last = convo[-1]
                convo = [*convo[:-1], {**last, "content": with_text(last["content"], literals[0])}]
            return self.tokenizer.apply_chat_template(convo, add_generation_prompt=True, tokenize=False, **kwargs)

        return render

    # ---- parsing ------------------------------------------------------------------------------------------------
    def parse(self, ids: list[int], prompt_ids: list[int] | None = None, tools: dict[str, Tool] | None = None):
        """``(content, calls)`` of one sampled assistant turn ``ids`` (its stop token included). Never raises: what
        the model writes cannot end a run; a turn the parser fails on is one call with a parse error."""
        schemas = {name: t.schema["function"] for name, t in (tools or {}).items()}
        try:
            if self.parser == "transformers":
                return self._parse_transformers(ids, prompt_ids, tools)
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            content, calls = PARSERS[self.parser](text, schemas)
        except Exception as e:  # a parser bug or a pathological turn: the model gets an error, the run goes on
            return self.plain_text(ids), [ToolCall("", None, f"unreadable turn ({type(e).__name__}: {e})"[:200])]
        return self._clean(content), calls

    def _parse_transformers(self, ids, prompt_ids, tools):
        parsed = self.tokenizer.parse_response(
            ids, prefix=prompt_ids, tools=[t.schema for t in tools.values()] if tools else None
        )
        calls = []
        for call in parsed.get("tool_calls") or []:
            fn = call.get("function", call)
            calls.append(ToolCall(name=str(fn.get("name", "")), arguments=fn.get("arguments"), id=call.get("id")))
        return self._clean(parsed.get("content") or ""), calls

    def plain_text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _clean(self, content: str) -> str:
        for s in special_strings(self.tokenizer):
            content = content.replace(s, "")
        return content.strip()

    # ---- observations -------------------------------------------------------------------------------------------
    def tool_messages(self, calls: list[ToolCall], results: list[ToolResult]) -> list[dict]:
        """The results as the reward functions see them (TRL's ``{"role": "tool", "name", "content"}``; a multimodal
        result's content is its list of text and image blocks, the images as PIL images, as in TRL)."""
        return [{"role": "tool", "name": r.name, "content": r.parts or r.content} for r in results]

    def observation_ids(
        self, calls: list[ToolCall], results: list[ToolResult], end_of_turn: int, encode=None
    ) -> list[int]:
        """Tokens between the model's stop token ``end_of_turn`` and its next turn (see the module docstring).
        ``encode(render, literals)``: see `encode_prompt` (a vision-language policy's expands the results' images).

        Raises ValueError (the rollout ends with ``error``; the run goes on) when the template cannot render the
        exchange even with one well-formed dummy call, or does not contain ``end_of_turn`` in the assistant turn."""
        try:
            return self._observation(calls, results, end_of_turn, encode)
        except ValueError:
            raise
        except Exception:
            pass
        # The template refused the calls as written (Llama 3.1 takes one call per turn; some templates iterate the
        # arguments as a mapping): render the results against one plain call instead. The model still reads
        # every result; only the dummy assistant turn, which is cut off, changes.
        dummy = [ToolCall(name=calls[0].name or "tool", arguments={}, id=None)]
        merged = ToolResult(results[0].name, "\n\n".join(r.content for r in results), results[0].error_kind)
        if any(r.parts for r in results):
            separator = [{"type": "text", "text": "\n\n"}]
            merged.parts = [p for k, r in enumerate(results) for p in (separator if k else []) + result_parts(r)]
        try:
            return self._observation(dummy, [merged], end_of_turn, encode)
        except ValueError:
            raise
        except Exception as e:
            raise ValueError(f"the chat template cannot render this tool exchange ({type(e).__name__}: {e})") from e

    def _observation(self, calls: list[ToolCall], results: list[ToolResult], end_of_turn: int, encode) -> list[int]:
        ids = [
            c.id if isinstance(c.id, str) and c.id.isalnum() and len(c.id) == 9 else f"call{k:05d}"
            for k, c in enumerate(calls)
        ]
        user = {"role": "user", "content": "dummy"}
        if self.mode == "template":
            tool_calls = [
                {
                    "type": "function",
                    "id": ids[k],
                    "function": {
                        "name": c.name or "tool",
                        "arguments": c.arguments if isinstance(c.arguments, dict) else {},
                    },
                }
                for k, c in enumerate(calls)
            ]
            assistant = {"role": "assistant", "content": "", "tool_calls": tool_calls}
        else:
            assistant = {"role": "assistant", "content": "dummy"}
        kwargs = self.chat_template_kwargs or {}
        # The results' text, in order: one literal per result, or per text block of a multimodal result.
        literals = [p["text"] for r in results for p in result_parts(r) if p["type"] == "text"]

        def messages(literals: list[str]) -> list[dict]:
            contents = _contents(results, literals)
            if self.mode == "template":
                # One result per call, in order; a call without a result (never: the loop answers every call) would
                # be dropped by the zip.
                return [
                    {"role": "tool", "name": r.name, "tool_call_id": ids[min(k, len(ids) - 1)], "content": content}
                    for k, (r, content) in enumerate(zip(results, contents))
                ]
            if not any(r.parts for r in results):
                return [
                    {"role": "user", "content": "\n".join(f"<tool_response>\n{c}\n</tool_response>" for c in contents)}
                ]
            parts: list[dict] = []
            for k, content in enumerate(contents):
                parts += [_text("\n" if k else ""), _text("<tool_response>\n"), *content, _text("\n</tool_response>")]
            return [{"role": "user", "content": _merged_text(parts)}]

        def render(literals: list[str]) -> str:
            return self.tokenizer.apply_chat_template(
                [user, assistant, *messages(literals)], add_generation_prompt=True, tokenize=False, **kwargs
            )

        head_text = self.tokenizer.apply_chat_template([user], add_generation_prompt=True, tokenize=False, **kwargs)
        full_text = render(literals)
        common = 0
        while common < min(len(head_text), len(full_text)) and head_text[common] == full_text[common]:
            common += 1
        full = (encode or partial(encode_with_literals, self.tokenizer))(render, literals)
        # The dummy assistant turn starts after the shared text; its first ``end_of_turn`` token ends it.
        start = len(self.tokenizer(full_text[:common], add_special_tokens=False)["input_ids"]) - 1
        ends = [i for i, t in enumerate(full) if t == end_of_turn and i >= max(start, 0)]
        if not ends:
            raise ValueError(
                f"the chat template does not write token {end_of_turn} "
                f"({self.tokenizer.convert_ids_to_tokens(end_of_turn)!r}), the token the model stopped on, at the end "
                f"of an assistant tool-call turn; multi-turn rollouts need the model to stop on the token its "
                f"template ends a tool-call turn with"
            )
        return full[ends[0] + 1 :]


def result_parts(result: ToolResult) -> list[dict]:
    """A result's blocks: a multimodal result's own, or one text block of its content."""
    return result.parts or [_text(result.content)]


def _text(text: str) -> dict:
    return {"type": "text", "text": text}


def _contents(results: list[ToolResult], literals: list[str]) -> list:
    """Each result's message content with ``literals`` (its text, or placeholders) in its text blocks: a string, or for
    a multimodal result a list of text blocks and ``{"type": "image"}`` parts (the template's image placeholder)."""
    it = iter(literals)
    out: list = []
    for r in results:
        if r.parts is None:
            out.append(next(it))
        else:
            out.append([_text(next(it)) if p["type"] == "text" else {"type": "image"} for p in r.parts])
    return out


def _merged_text(parts: list[dict]) -> list[dict]:
    """Adjacent text blocks joined (templates draw a message's blocks one after another), empty ones dropped."""
    out: list[dict] = []
    for p in parts:
        if p["type"] != "text":
            out.append(p)
        elif p["text"]:
            if out and out[-1]["type"] == "text":
                out[-1] = _text(out[-1]["text"] + p["text"])
            else:
                out.append(p)
    return out


def with_text(content, text: str, before: bool = False):
    """A message content (a string, or a list of typed blocks: an image row's) with ``text`` appended (or, with
    ``before``, prepended)."""
    if isinstance(content, list):
        return [_text(text), *content] if before else [*content, _text(text)]
    return text + (content or "") if before else (content or "") + text


def _call_object(function: dict) -> dict:
    return {"name": function["name"], "arguments": function.get("arguments", {})}


def fallback_history(messages: list[dict]) -> list[dict]:
    """TRL-format tool turns rewritten in the fallback protocol's syntax (see `ToolProtocol.prompt_messages`). A
    content given as typed blocks (an image row's) stays blocks, images included."""
    out: list[dict] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = "".join(
                f"<tool_call>{json.dumps(_call_object(c['function']))}</tool_call>" for c in m["tool_calls"]
            )
            content = m.get("content") or ""
            if isinstance(content, list):  # the assistant's text blocks
                content = "".join(p.get("text") or "" for p in content)
            out.append({"role": "assistant", "content": f"{content}\n{calls}" if content else calls})
        elif m["role"] == "tool":
            block = with_text(with_text(m["content"], "<tool_response>\n", before=True), "\n</tool_response>")
            previous = out[-1]["content"] if out and out[-1].get("_tool_turn") else None
            if isinstance(previous, str) and isinstance(block, str):
                out[-1]["content"] = f"{previous}\n{block}"
            elif previous is not None:
                out[-1]["content"] = [*_as_blocks(previous), _text("\n"), *_as_blocks(block)]
            else:
                out.append({"role": "user", "content": block, "_tool_turn": True})
        else:
            out.append(m)
    return [{k: v for k, v in m.items() if k != "_tool_turn"} for m in out]


def _as_blocks(content) -> list[dict]:
    return content if isinstance(content, list) else [_text(content)]


def _example_value(json_type: str | None):
    return {"string": "...", "integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}.get(
        json_type, "..."
    )
