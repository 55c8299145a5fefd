"""What a chat template does with tools, found at init by rendering a sentinel conversation.

`inspect_template` renders ``user -> assistant with one tool call -> tool result`` with a sentinel tool and reports
whether the tool's description, the call's argument and the result survive, and which call parser
(`hf_grpo.agents.parsers`) reads the rendered call back to the sentinel call. The protocol then chooses:

* the template renders tools, calls and results, and a parser reads its call syntax: **template** protocol with that
  parser (or the tokenizer's own ``response_template`` through transformers' ``parse_response``, when the model ships
  one);
* the template ignores tools entirely (plain ChatML, the embedded SmolLM2): the **fallback** protocol, logged;
* anything in between (tools rendered but calls or results dropped, a template that raises, a call syntax no parser
  reads) is an error at init naming the template's behaviour and the options, never a silent switch of protocol.

The sentinel call carries a 9-character alphanumeric ``id`` on the call and a matching ``tool_call_id`` on the result,
because Mistral's templates raise without them. Departure from TRL: TRL recognises a fixed list of templates by
identity and swaps in stored training templates; here any template is accepted by what it does.
"""

from __future__ import annotations

from dataclasses import dataclass

from .parsers import PARSERS
from .tools import Tool

SENTINEL = "hfgrpo_sentinel"
SENTINEL_ID = "hfgrpoid1"  # 9 alphanumeric characters (Mistral's rule for tool call ids)
SENTINEL_ARGS = {"x": "hfgrpo_call_argument", "n": 7}


def _sentinel_tool(x: str, n: int) -> str:
    """hfgrpo_sentinel_description.

    Args:
        x: hfgrpo_sentinel_argument
        n: hfgrpo_sentinel_count
    """
    return x


_sentinel_tool.__name__ = SENTINEL


@dataclass
class TemplateReport:
    renders_tools: bool = False  # the tool's description appears when tools are passed
    renders_calls: bool = False  # the assistant's call appears
    renders_results: bool = False  # the tool result appears
    error: str | None = None  # the template raised on the sentinel conversation
    call_text: str = ""  # the rendered assistant turn, for messages
    parsers: tuple[str, ...] = ()  # parsers that read the rendered call back exactly

    @property
    def supports_tools(self) -> bool:
        return self.renders_tools and self.renders_calls and self.renders_results and self.error is None


def sentinel_schema() -> dict:
    return Tool.from_callable(_sentinel_tool).schema


def sentinel_messages() -> list[dict]:
    call = {"type": "function", "id": SENTINEL_ID, "function": {"name": SENTINEL, "arguments": dict(SENTINEL_ARGS)}}
    return [
        {"role": "user", "content": "hfgrpo_user"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": SENTINEL, "tool_call_id": SENTINEL_ID, "content": "hfgrpo_tool_result"},
    ]


def inspect_template(tokenizer, chat_template_kwargs: dict | None = None) -> TemplateReport:
    report = TemplateReport()
    if not getattr(tokenizer, "chat_template", None):
        return report
    kwargs = dict(chat_template_kwargs or {})
    schema = sentinel_schema()
    messages = sentinel_messages()

    def render(msgs, generation_prompt=False):
        return tokenizer.apply_chat_template(
            msgs, tools=[schema], tokenize=False, add_generation_prompt=generation_prompt, **kwargs
        )

    try:
        report.renders_tools = "hfgrpo_sentinel_description" in render(messages[:1], True)
    except Exception as e:  # a template that cannot even render a user turn with tools
        report.error = f"{type(e).__name__}: {e}"
        return report
    try:
        head = render(messages[:1], True)
        with_call = render(messages[:2])
        full = render(messages)
    except Exception as e:  # templates that raise on tool calls or the tool role
        report.error = f"{type(e).__name__}: {e}"
        return report
    report.renders_calls = "hfgrpo_call_argument" in with_call
    report.renders_results = "hfgrpo_tool_result" in full
    common = 0
    while common < min(len(head), len(with_call)) and head[common] == with_call[common]:
        common += 1
    report.call_text = with_call[common:]
    schemas = {SENTINEL: schema["function"]}
    report.parsers = tuple(name for name, parse in PARSERS.items() if _reads_back(parse, report.call_text, schemas))
    return report


def _reads_back(parse, text: str, schemas: dict) -> bool:
    try:
        _, calls = parse(text, schemas)
    except Exception:  # a parser bug must not decide detection; parsers are tested not to raise
        return False
    return len(calls) == 1 and calls[0].name == SENTINEL and calls[0].arguments == SENTINEL_ARGS


def choose_parser(tokenizer, report: TemplateReport, requested: str | None) -> str:
    """The parser for the template protocol: ``requested`` (``tool_parser``) if given, else the tokenizer's own
    response template (transformers' ``parse_response``), else the first parser that reads the sentinel back."""
    if requested is not None:
        if requested != "transformers" and requested not in PARSERS:
            raise ValueError(
                f"tool_parser={requested!r} is not a known parser; choose one of "
                f"{', '.join(['transformers', *PARSERS])} (docs/agents.md lists the families each reads)"
            )
        if requested == "transformers" and not has_response_template(tokenizer):
            raise ValueError(
                "tool_parser=transformers, but the tokenizer has no response_template (or response_schema) for "
                "transformers' parse_response; set one on the tokenizer or name one of hf_grpo's parsers: "
                f"{', '.join(PARSERS)}"
            )
        return requested
    if has_response_template(tokenizer):
        return "transformers"
    if report.parsers:
        return report.parsers[0]
    raise ValueError(
        "the chat template renders tools, tool calls and tool results, but none of hf_grpo's tool-call parsers "
        f"reads its call syntax back (the sentinel call renders as {report.call_text.strip()[:200]!r}). Options: "
        f"set tool_parser to one of {', '.join(PARSERS)} if one matches what the model writes; give the tokenizer "
        "a response_template for transformers' parse_response (tool_parser: transformers); or set "
        "tool_protocol: fallback (hf_grpo then describes the tools in the system prompt and parses "
        "<tool_call> JSON). docs/agents.md lists the families and their parsers"
    )


def has_response_template(tokenizer) -> bool:
    return any(getattr(tokenizer, name, None) for name in ("response_template", "response_schema"))


def unsupported_reason(report: TemplateReport) -> str:
    if report.error is not None:
        return f"it raises on a tool exchange ({report.error})"
    missing = [
        what for what, ok in (("tool calls", report.renders_calls), ("tool results", report.renders_results)) if not ok
    ]
    return f"it renders the tools' schemas but drops {' and '.join(missing)}"
