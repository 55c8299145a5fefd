"""Tool-call syntax, one parser per model family: one sampled assistant turn in, ``(content, calls)`` out.

A parser reads the turn's text decoded *with* its special tokens (several families delimit calls with them:
``<|tool_call_start|>``, ``<|call|>``, ``[TOOL_CALLS]``, Gemma's ``<|"|>`` string quotes) and never raises: text that
looks like a call but cannot be read becomes a `ToolCall` with ``error`` set, which the model gets back as an error
message. Values written as untyped text (the XML families) are typed with the tool's JSON schema, as transformers'
``parse_response(tools=...)`` types them.

=================  ======================================================================  ==========================
parser             a call looks like                                                       families
=================  ======================================================================  ==========================
``hermes``         ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``             Qwen2.5, Qwen3, Qwen3-VL,
                                                                                           Hermes, the fallback
``llama3_json``    the whole turn is ``{"name": ..., "parameters": {...}}``                 Llama 3.1 / 3.2
``qwen3_xml``      ``<tool_call><function=NAME><parameter=KEY>value</parameter>...``        Qwen3.5 / 3.6, Qwen3-Coder,
                                                                                           Nemotron-3
``glm45``          ``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>value</arg_value>``     GLM-4.5 and later
``harmony``        ``to=functions.NAME ... <|message|>{...}<|call|>``                       GPT-OSS
``gemma4``         ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|>``             Gemma 4
``pythonic``       ``<|tool_call_start|>[name(key='text', n=1)]<|tool_call_end|>``          LFM2 / LFM2.5
``mistral``        ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]`` or ``NAME[ARGS]{...}``  Mistral
=================  ======================================================================  ==========================

Which parser a tokenizer gets is decided by `hf_grpo.agents.protocol` at init, by rendering a sentinel call with the
chat template and keeping the parser that reads it back (no list of known templates, unlike TRL's identity match).
Python-style arguments are read with ``ast.literal_eval`` on each value: nothing the model writes is executed.
"""

from __future__ import annotations

import ast
import json
import re

from .tools import ToolCall

Parsed = tuple[str, list[ToolCall]]


def _error(text: str, why: str) -> ToolCall:
    return ToolCall(name="", arguments=None, error=f"{why}: {text.strip()[:120]}")


def _json_call(body: str) -> ToolCall:
    """``{"name": ..., "arguments"|"parameters": {...}}`` (the JSON families)."""
    body = body.strip()
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as e:
        return _error(body, f"invalid JSON ({e.msg} at character {e.pos})" if hasattr(e, "msg") else "invalid JSON")
    return _call_from_object(obj, body)


def _call_from_object(obj, body: str) -> ToolCall:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return _error(body, 'expected {"name": ..., "arguments": {...}}, got')
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # some models JSON-encode the arguments twice
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            pass
    call_id = obj.get("id")
    return ToolCall(name=obj["name"], arguments=arguments, id=call_id if isinstance(call_id, str) else None)


def _typed(value: str, spec: dict | None):
    """An untyped text value typed by its JSON-schema entry: strings stay text, anything else is read as JSON (a
    value that does not read stays text, and the argument check then names the type it should have had)."""
    types = (spec or {}).get("type")
    types = types if isinstance(types, list) else [types]
    if "string" in types or types == [None]:
        return value
    try:
        return json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return value


def _schema_props(schemas: dict, name: str) -> dict:
    return schemas.get(name, {}).get("parameters", {}).get("properties", {})


def _before(text: str, marker: str) -> str:
    return text[: text.index(marker)] if marker in text else text


# ---- the parsers ----------------------------------------------------------------------------------------------------
_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


def parse_hermes(text: str, schemas: dict) -> Parsed:
    bodies = _HERMES.findall(text)
    return _before(text, "<tool_call>"), [_json_call(b) for b in bodies]


_TRAILING_SPECIALS = re.compile(r"(?:<\|[a-z_]+\|>\s*)+$")


def parse_llama3_json(text: str, schemas: dict) -> Parsed:
    stripped = _TRAILING_SPECIALS.sub("", text.replace("<|python_tag|>", "").strip()).strip()
    if not stripped.startswith(("{", "[")):
        return text, []
    try:
        obj = json.loads(stripped)
    except (json.JSONDecodeError, RecursionError):
        # Several calls separated by ';' (Llama 3.2's "one or more" instructions), else a broken call.
        parts = [p for p in stripped.split(";") if p.strip()]
        if len(parts) > 1 and all(p.strip().startswith("{") for p in parts):
            return "", [_json_call(p) for p in parts]
        if stripped.startswith('{"name"') or stripped.startswith('{"type"'):
            return "", [_json_call(stripped)]
        return text, []
    objs = obj if isinstance(obj, list) else [obj]
    if not all(isinstance(o, dict) and "name" in o for o in objs):
        return text, []  # JSON that is not a call is an answer
    return "", [_call_from_object(o, stripped) for o in objs]


_XML_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_XML_FUNCTION = re.compile(r"^<function=([^>\n]+)>(.*?)</function>$", re.S)
_XML_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


def parse_qwen3_xml(text: str, schemas: dict) -> Parsed:
    calls = []
    for body in _XML_CALL.findall(text):
        m = _XML_FUNCTION.match(body.strip())
        if m is None:
            calls.append(_error(body, "expected <function=NAME><parameter=KEY>value</parameter></function>, got"))
            continue
        name, inner = m.group(1).strip(), m.group(2)
        props = _schema_props(schemas, name)
        params = _XML_PARAM.findall(inner)
        leftover = _XML_PARAM.sub("", inner).strip()
        if leftover:
            calls.append(_error(body, "text outside <parameter=...> blocks in"))
            continue
        calls.append(ToolCall(name=name, arguments={k.strip(): _typed(v, props.get(k.strip())) for k, v in params}))
    return _before(text, "<tool_call>"), calls


_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def parse_glm45(text: str, schemas: dict) -> Parsed:
    calls = []
    for body in _XML_CALL.findall(text):
        name, _, rest = body.partition("<arg_key>")
        name = name.strip()
        rest = "<arg_key>" + rest if rest else ""
        if not name or not re.fullmatch(r"[\w.\-]+", name) or _GLM_ARG.sub("", rest).strip():
            calls.append(_error(body, "expected NAME<arg_key>KEY</arg_key><arg_value>value</arg_value>, got"))
            continue
        props = _schema_props(schemas, name)
        calls.append(
            ToolCall(
                name=name, arguments={k.strip(): _typed(v, props.get(k.strip())) for k, v in _GLM_ARG.findall(rest)}
            )
        )
    return _before(text, "<tool_call>"), calls


_HARMONY_CALL = re.compile(
    r"to=functions\.([^\s<]+)[^<]*(?:<\|channel\|>[^<]*)?(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)(?:<\|call\|>|$)",
    re.S,
)
_HARMONY_FINAL = re.compile(r"<\|channel\|>final<\|message\|>(.*?)(?:<\|return\|>|<\|end\|>|$)", re.S)


def parse_harmony(text: str, schemas: dict) -> Parsed:
    calls = []
    for name, body in _HARMONY_CALL.findall(text):
        call = _json_call('{"name": ' + json.dumps(name) + ', "arguments": ' + (body.strip() or "{}") + "}")
        calls.append(call if call.error is None else _error(body, "the call's <|message|> is not a JSON object"))
    final = _HARMONY_FINAL.search(text)
    if final:
        return final.group(1), calls
    # No final-channel message: a call turn (its analysis text is reasoning, not content) or an unchannelled answer.
    return ("" if calls else text), calls


_GEMMA_CALL = re.compile(r"<\|tool_call>call:([\w.\-]+)(\{.*?\})<tool_call\|>", re.S)
_GEMMA_STRING = re.compile(r'<\|"\|>(.*?)<\|"\|>', re.S)
_MARK = "@@hfgrpo-string@@"  # stands for a <|"|>-quoted string while the rest is read as JSON
_GEMMA_KEY = re.compile(r"([{,])\s*([A-Za-z_][\w\-]*)\s*:")


def _gemma_object(body: str):
    """Gemma 4's argument notation (bare keys, strings quoted by ``<|"|>``) as a Python object, via JSON."""
    strings: list[str] = []

    def keep(m):
        strings.append(m.group(1))
        return f'"{_MARK}{len(strings) - 1}"'

    masked = _GEMMA_STRING.sub(keep, body)
    masked = _GEMMA_KEY.sub(r'\1"\2":', masked)
    obj = json.loads(masked)

    def restore(v):
        if isinstance(v, str) and v.startswith(_MARK):
            return strings[int(v[len(_MARK) :])]
        if isinstance(v, dict):
            return {restore(k): restore(x) for k, x in v.items()}
        if isinstance(v, list):
            return [restore(x) for x in v]
        return v

    return restore(obj)


def parse_gemma4(text: str, schemas: dict) -> Parsed:
    calls = []
    for name, body in _GEMMA_CALL.findall(text):
        try:
            calls.append(ToolCall(name=name, arguments=_gemma_object(body)))
        except (json.JSONDecodeError, RecursionError, ValueError, IndexError):
            calls.append(_error(body, "unreadable arguments"))
    opened = text.count("<|tool_call>")
    if opened > len(calls):  # a call block without a readable name and closing marker
        calls.append(_error(text[text.index("<|tool_call>") :], "expected <|tool_call>call:NAME{...}<tool_call|>, got"))
    return _before(text, "<|tool_call>"), calls


_PYTHONIC = re.compile(r"<\|tool_call_start\|>(.*?)(?:<\|tool_call_end\|>|$)", re.S)


def _pythonic_calls(body: str) -> list[ToolCall]:
    try:
        tree = ast.parse(body.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [_error(body, "not a Python list of calls")]
    nodes = tree.elts if isinstance(tree, ast.List) else [tree]
    calls = []
    for node in nodes:
        if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and not node.args):
            calls.append(_error(ast.unparse(node), "expected name(key=value, ...), got"))
            continue
        try:
            arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            calls.append(_error(ast.unparse(node), "arguments must be literals, got"))
            continue
        calls.append(ToolCall(name=ast.unparse(node.func), arguments=arguments))
    return calls


def parse_pythonic(text: str, schemas: dict) -> Parsed:
    calls = [c for body in _PYTHONIC.findall(text) for c in _pythonic_calls(body)]
    return _before(text, "<|tool_call_start|>"), calls


_MISTRAL_NAMED = re.compile(r"([\w.\-]+)\[ARGS\](.*?)(?=\[TOOL_CALLS\]|</s>|$)", re.S)


def parse_mistral(text: str, schemas: dict) -> Parsed:
    if "[TOOL_CALLS]" not in text:
        return text, []
    content, _, rest = text.partition("[TOOL_CALLS]")
    rest = rest.replace("[TOOL_CALLS]", "").split("</s>")[0].strip()
    if "[ARGS]" in rest:  # tokenizer v11+: NAME[ARGS]{...} per call
        return content, [
            _json_call('{"name": ' + json.dumps(n) + ', "arguments": ' + a.strip() + "}")
            for n, a in _MISTRAL_NAMED.findall(rest)
        ]
    try:
        obj = json.loads(rest)
    except (json.JSONDecodeError, RecursionError):
        return content, [_error(rest, "[TOOL_CALLS] must be followed by a JSON list of calls, got")]
    return content, [_call_from_object(o, rest) for o in (obj if isinstance(obj, list) else [obj])]


PARSERS = {
    "hermes": parse_hermes,
    "llama3_json": parse_llama3_json,
    "qwen3_xml": parse_qwen3_xml,
    "glm45": parse_glm45,
    "harmony": parse_harmony,
    "gemma4": parse_gemma4,
    "pythonic": parse_pythonic,
    "mistral": parse_mistral,
}
