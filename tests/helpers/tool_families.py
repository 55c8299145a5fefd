"""Model families' real chat templates (TRL's stored copies, installed with trl) and what each model writes when it
calls ``add(a=2, b=3)`` and then answers, for the tool round-trip tests (tests/agents/test_families.py).

A family's tokenizer is the embedded SmolLM2 tokenizer with the family's control tokens added as special tokens and
its chat template set: enough to drive the real template. Mistral has no template in TRL's set; `MISTRAL_TEMPLATE` is
written here after Mistral's v0.3 format (tool call ids of 9 alphanumeric characters, enforced by raising).
"""

import copy
import os
from dataclasses import dataclass, field, replace

import trl

TRL_TEMPLATES = os.path.join(os.path.dirname(trl.__file__), "chat_templates")

MISTRAL_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{%- if message.role == 'user' %}"
    "{%- if tools and loop.first %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}"
    "[INST]{{ message.content }}[/INST]"
    "{%- elif message.role == 'assistant' and message.tool_calls %}[TOOL_CALLS]["
    "{%- for c in message.tool_calls %}"
    "{%- if not (c.id is string and c.id|length == 9) %}"
    "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- endif %}"
    '{"name": {{ c.function.name|tojson }}, "arguments": {{ c.function.arguments|tojson }}, "id": {{ c.id|tojson }}}'
    "{%- if not loop.last %}, {% endif %}{%- endfor %}]{{ eos_token }}"
    "{%- elif message.role == 'assistant' %}{{ message.content }}{{ eos_token }}"
    "{%- elif message.role == 'tool' %}"
    '[TOOL_RESULTS]{"content": {{ message.content|tojson }}, "call_id": {{ message.tool_call_id|tojson }}}'
    "[/TOOL_RESULTS]{%- endif %}{%- endfor %}"
)

QWEN_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>'
QWEN_XML_CALL = (
    "<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n</function>\n"
    "</tool_call>"
)
CHATML = ["<|im_start|>", "<|im_end|>"]
QWEN_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


@dataclass
class Family:
    name: str
    template: str  # a TRL template file name (without .jinja), or the template text itself
    parser: str  # the parser hf_grpo must detect
    call: str  # what the model writes to call add(a=2, b=3), its stop token included
    answer: str  # what it writes after the result, its stop token included
    stops: list[str]  # the model's stop tokens (generation_config.eos_token_id)
    tokens: list[str] = field(default_factory=list)  # control tokens to add as special tokens
    eos: str | None = None  # the tokenizer's eos_token, when not the first stop


# Qwen3.5 writes its reasoning, then an XML call; the template opens the <think> block in the prompt.
QWEN3_5 = Family(
    "qwen3.5",
    "qwen3_5_think",
    "qwen3_xml",
    "add them\n</think>\n\n" + QWEN_XML_CALL + "<|im_end|>",
    "\n</think>\n\n5<|im_end|>",
    ["<|im_end|>"],
    QWEN_TOKENS,
)
LLAMA3_1 = Family(
    "llama3.1",
    "llama3_1",
    "llama3_json",
    '{"name": "add", "parameters": {"a": 2, "b": 3}}<|eot_id|>',
    "5<|eot_id|>",
    ["<|eot_id|>", "<|eom_id|>"],
    ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"],
)

FAMILIES = [
    Family("qwen2.5", "qwen2_5", "hermes", QWEN_CALL, "5<|im_end|>", ["<|im_end|>"], QWEN_TOKENS),
    # Qwen3: the model reasons first; its template draws <think> blocks only on the last assistant turn.
    Family(
        "qwen3",
        "qwen3",
        "hermes",
        "<think>\nadd them\n</think>\n\n" + QWEN_CALL,
        "5<|im_end|>",
        ["<|im_end|>"],
        QWEN_TOKENS,
    ),
    Family("qwen3-2507", "qwen3_instruct_2507", "hermes", QWEN_CALL, "5<|im_end|>", ["<|im_end|>"], QWEN_TOKENS),
    Family("qwen3-vl", "qwen3_vl", "hermes", QWEN_CALL, "5<|im_end|>", ["<|im_end|>"], QWEN_TOKENS),
    QWEN3_5,
    replace(QWEN3_5, name="qwen3.6", template="qwen3_6"),  # the same format, its own template file
    Family(
        "nemotron-3",
        "nemotron_3_nano",
        "qwen3_xml",
        "</think>\n" + QWEN_XML_CALL + "\n<|im_end|>",
        "</think>\n5\n<|im_end|>",
        ["<|im_end|>"],
        QWEN_TOKENS,
    ),
    LLAMA3_1,
    replace(LLAMA3_1, name="llama3.2", template="llama3_2"),
    Family(
        "gpt-oss",
        "gptoss",
        "harmony",
        "<|channel|>analysis<|message|>add them<|end|><|start|>assistant to=functions.add<|channel|>commentary json"
        '<|message|>{"a": 2, "b": 3}<|call|>',
        "<|channel|>final<|message|>5<|return|>",
        ["<|return|>", "<|call|>"],
        ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"],
    ),
    Family(
        "glm-4.5",
        "glm4moe",
        "glm45",
        "\n<think></think>\n<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>2</arg_value>\n<arg_key>b</arg_key>\n"
        "<arg_value>3</arg_value>\n</tool_call><|observation|>",
        "\n<think></think>\n5<|user|>",
        ["<|user|>", "<|observation|>"],
        [
            "[gMASK]",
            "<sop>",
            "<|system|>",
            "<|user|>",
            "<|assistant|>",
            "<|observation|>",
            *QWEN_TOKENS,
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
        ],
    ),
    Family(
        "gemma4",
        "gemma4",
        "gemma4",
        "<|tool_call>call:add{a:2,b:3}<tool_call|><|tool_response>",
        "5<turn|>",
        ["<turn|>", "<|tool_response>"],
        [
            "<|turn>",
            "<turn|>",
            "<|tool>",
            "<tool|>",
            "<|tool_call>",
            "<tool_call|>",
            "<|tool_response>",
            "<tool_response|>",
            '<|"|>',
            "<|channel>",
            "<channel|>",
        ],
    ),
    Family(
        "lfm2.5",
        "lfm2_2_5",
        "pythonic",
        "<|tool_call_start|>[add(a=2, b=3)]<|tool_call_end|><|im_end|>",
        "5<|im_end|>",
        ["<|im_end|>"],
        [
            "<|tool_call_start|>",
            "<|tool_call_end|>",
            "<|tool_list_start|>",
            "<|tool_list_end|>",
            "<|tool_response_start|>",
            "<|tool_response_end|>",
        ],
    ),
    Family(
        "mistral",
        MISTRAL_TEMPLATE,
        "mistral",
        '[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3}, "id": "a1b2c3d4e"}]</s>',
        "5</s>",
        ["</s>"],
        [
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
            "</s>",
        ],
    ),
]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def family_tokenizer(base, family: Family):
    tok = copy.deepcopy(base)
    tok.add_special_tokens({"additional_special_tokens": [t for t in family.tokens if t not in tok.get_vocab()]})
    template = family.template
    if "{" not in template:
        with open(os.path.join(TRL_TEMPLATES, template + ".jinja")) as f:
            template = f.read()
    tok.chat_template = template
    if family.eos is not None or family.stops[0] != tok.eos_token:
        tok.eos_token = family.eos or family.stops[0]
    return tok


def stop_ids(tokenizer, family: Family) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(s) for s in family.stops]
