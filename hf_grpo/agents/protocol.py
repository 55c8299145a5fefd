"""How tool calls appear in the model's text, and how tool results enter its context, token-exactly.

Two protocols, chosen per tokenizer (``tool_protocol: auto``):

* ``template``: the model's own chat template renders tools (``apply_chat_template(tools=...)``) and tool turns.
  It is detected by rendering a sentinel conversation (user -> assistant with ``tool_calls`` -> ``tool``) and checking
  that the tool's description, the call and the result all survive. Qwen2.5/3, Llama 3.1+, Hermes and most tool
  models pass. TRL instead accepts only a fixed list of known templates.
* ``fallback``: for templates that drop tools or tool calls (the embedded SmolLM2's plain ChatML). hf_grpo writes the
  tool list and the call format into the system message (`FALLBACK_SYSTEM`), the model calls a tool with
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes' format), and results come back as a ``user``
  turn holding ``<tool_response>...</tool_response>`` blocks, rendered by the model's own template.

Token exactness (the invariant the trainer relies on): a rollout's training row is the sampled tokens, verbatim,
followed by observation tokens, followed by the next sampled tokens, and so on. Nothing sampled is re-tokenized.
Observation tokens are the *suffix* the chat template adds between the end of an assistant turn and the start of the
next assistant turn: rendered once with and once without the tool messages on a dummy conversation, with the prefix
cut right after the end-of-turn token the model actually sampled, so the template's separator after it (ChatML's
``\\n``) is part of the observation. The shared prefix is checked token for token (`observation_ids` raises if the
template is not prefix-preserving there).

Parsing: a ``<tool_call>`` block (Hermes), or, in template mode, a whole turn that is one JSON object with ``name``
and ``arguments``/``parameters`` (Llama 3.1's JSON calls). A block that is not valid JSON, or has no ``name``, is a
call with a parse error: it goes back to the model as an error message and is counted, where TRL treats it as plain
text and ends the episode silently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..data.prompts import as_token_ids, encode_prompt
from .tools import Tool, ToolCall, ToolResult

PROTOCOLS = ("auto", "template", "fallback")

FALLBACK_SYSTEM = (
    "You can call tools. To call one, write a JSON object inside <tool_call></tool_call> tags, for example:\n"
    """<tool_call>{{"name": "{example}", "arguments": {{{example_args}}}}}</tool_call>
The result comes back inside <tool_response></tool_response> tags. When you have the result, give the final answer.

Tools:
{tools}"""
)

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_SENTINEL = "hfgrpo_sentinel"


def _sentinel_tool(x: str) -> str:
    """hfgrpo_sentinel_description.

    Args:
        x: hfgrpo_sentinel_argument
    """
    return x


_sentinel_tool.__name__ = _SENTINEL


def template_supports_tools(tokenizer, chat_template_kwargs: dict | None = None) -> bool:
    """True when the chat template renders tool schemas, assistant ``tool_calls`` and ``tool`` turns."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    tool = Tool.from_callable(_sentinel_tool)
    messages = [
        {"role": "user", "content": "hfgrpo_user"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": _SENTINEL, "arguments": {"x": "hfgrpo_call_argument"}}}
            ],
        },
        {"role": "tool", "name": _SENTINEL, "content": "hfgrpo_tool_result"},
    ]
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=[tool.schema], tokenize=False, **(chat_template_kwargs or {})
        )
    except Exception:  # templates that raise on unknown roles or tools
        return False
    return all(s in text for s in ("hfgrpo_sentinel_description", "hfgrpo_call_argument", "hfgrpo_tool_result"))


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

    @classmethod
    def for_tokenizer(cls, tokenizer, protocol: str = "auto", chat_template_kwargs: dict | None = None):
        if protocol not in PROTOCOLS:
            raise ValueError(f"tool_protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        supported = template_supports_tools(tokenizer, chat_template_kwargs)
        if protocol == "template" and not supported:
            raise ValueError(
                f"tool_protocol=template, but {type(tokenizer).__name__}'s chat template does not render "
                f"tools, tool calls and tool results (checked with a sentinel conversation); use "
                f"tool_protocol: auto or fallback (hf_grpo then describes the tools in the system "
                f"prompt; docs/agents.md)"
            )
        mode = "template" if (protocol == "template" or (protocol == "auto" and supported)) else "fallback"
        return cls(tokenizer, mode, chat_template_kwargs)

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
            return [{**messages[0], "content": f"{text}\n\n{messages[0]['content']}"}, *messages[1:]]
        return [{"role": "system", "content": text}, *messages]

    def encode_prompt(self, messages: list[dict], tools: dict[str, Tool]) -> list[int]:
        # Rows from a datasets.Dataset carry every message key of every row (Arrow structs), set to None.
        messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
        kwargs = dict(self.chat_template_kwargs or {})
        if self.mode == "template" and tools:
            kwargs["tools"] = [t.schema for t in tools.values()]
        return encode_prompt(self.tokenizer, self.prompt_messages(messages, tools), kwargs)

    # ---- parsing ------------------------------------------------------------------------------------------------
    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        """``(content, calls)`` of one sampled assistant turn (special tokens already removed)."""
        calls = [_parse_call(body) for body in _TOOL_CALL.findall(text)]
        if calls:
            content = text[: text.index("<tool_call>")].strip()
            return content, calls
        if self.mode == "template":
            stripped = text.strip()
            if stripped.startswith("{") and stripped.endswith("}"):
                try:
                    obj = json.loads(stripped)
                except json.JSONDecodeError:
                    return text, []
                if isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj):
                    return "", [_parse_call(stripped)]
        return text, []

    # ---- observations -------------------------------------------------------------------------------------------
    def tool_messages(self, calls: list[ToolCall], results: list[ToolResult]) -> list[dict]:
        """The results as the reward functions see them (TRL's ``{"role": "tool", "name", "content"}``)."""
        return [{"role": "tool", "name": r.name, "content": r.content} for r in results]

    def observation_ids(self, calls: list[ToolCall], results: list[ToolResult], end_of_turn: int) -> list[int]:
        """Tokens between the model's end-of-turn token ``end_of_turn`` and its next turn (see the module docstring)."""
        tool_calls = [
            {"type": "function", "function": {"name": c.name or "tool", "arguments": c.arguments or {}}} for c in calls
        ]
        prefix_messages = [
            {"role": "user", "content": "dummy"},
            {
                "role": "assistant",
                "content": "dummy",
                **({"tool_calls": tool_calls} if self.mode == "template" else {}),
            },
        ]
        if self.mode == "template":
            new = self.tool_messages(calls, results)
        else:
            new = [
                {
                    "role": "user",
                    "content": "\n".join(f"<tool_response>\n{r.content}\n</tool_response>" for r in results),
                }
            ]
        kwargs = self.chat_template_kwargs or {}
        prefix = self._ids(prefix_messages, False, kwargs)
        full = self._ids(prefix_messages + new, True, kwargs)
        ends = [i for i, t in enumerate(prefix) if t == end_of_turn]
        if not ends:
            raise ValueError(
                f"the chat template does not end an assistant turn with token {end_of_turn} "
                f"({self.tokenizer.convert_ids_to_tokens(end_of_turn)!r}), the token the model stopped "
                f"on; multi-turn rollouts need the model's end-of-turn token to be its EOS"
            )
        prefix = prefix[: ends[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise ValueError(
                "the chat template is not prefix-preserving: adding tool messages changed how the "
                "earlier assistant turn renders, so observation tokens cannot be appended exactly"
            )
        return full[len(prefix) :]

    def _ids(self, messages: list[dict], generation_prompt: bool, kwargs: dict) -> list[int]:
        return as_token_ids(
            self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=generation_prompt, tokenize=True, **kwargs
            )
        )


def _call_object(function: dict) -> dict:
    return {"name": function["name"], "arguments": function.get("arguments", {})}


def fallback_history(messages: list[dict]) -> list[dict]:
    """TRL-format tool turns rewritten in the fallback protocol's syntax (see `ToolProtocol.prompt_messages`)."""
    out: list[dict] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = "".join(
                f"<tool_call>{json.dumps(_call_object(c['function']))}</tool_call>" for c in m["tool_calls"]
            )
            content = m.get("content") or ""
            out.append({"role": "assistant", "content": f"{content}\n{calls}" if content else calls})
        elif m["role"] == "tool":
            block = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1].get("_tool_turn"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_turn": True})
        else:
            out.append(m)
    return [{k: v for k, v in m.items() if k != "_tool_turn"} for m in out]


def _example_value(json_type: str | None):
    return {"string": "...", "integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}.get(
        json_type, "..."
    )


def _parse_call(body: str) -> ToolCall:
    body = body.strip()
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCall(name="", arguments=None, error=f"invalid JSON ({e.msg} at character {e.pos}): {body[:120]}")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall(
            name="", arguments=None, error=f'expected {{"name": ..., "arguments": {{...}}}}, got {body[:120]}'
        )
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # some models JSON-encode the arguments twice
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    return ToolCall(name=obj["name"], arguments=arguments, id=obj.get("id"))
