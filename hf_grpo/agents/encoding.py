"""Token ids of chat-template text in which some spans are literal text: tool results and environment observations.

The tokenizer turns every special-token string in its input into that special token. Text a tool or an environment
writes is data, not markup: a tool that returns ``<|im_end|>`` must not end the turn in the model's context, nor open
a new role. TRL tokenizes the rendered conversation whole, so a tool can forge control tokens; here those spans are
tokenized with ``split_special_tokens=True`` (the string stays text, in ordinary tokens).

The template may transform a literal before it shows it (Llama 3.1 writes tool results through ``tojson``), so the
spans are found by rendering: once with every literal replaced by a placeholder, once per literal with only that one
real. The placeholders' positions and the rendered literals' lengths then cut the real text into template pieces and
literal pieces. When no literal holds a special-token string, the real text is tokenized whole, exactly as before
(segmenting would be equally safe but may merge tokens differently at the seams, and the common case should stay the
canonical tokenization).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial


def valid_text(text: str) -> str:
    """``text`` as a tokenizer can encode it: lone UTF-16 surrogates (``"\\ud800"``, or the bytes a tool decoded with
    ``errors="surrogateescape"``), which no tokenizer accepts, become U+FFFD; a surrogate pair becomes its character.
    Tool and environment text is checked so: a str Python holds may still not be text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def special_strings(tokenizer) -> list[str]:
    """The strings the tokenizer turns into special tokens (its added tokens marked special)."""
    return [str(t) for t in tokenizer.added_tokens_decoder.values() if t.special] or list(tokenizer.all_special_tokens)


def has_special(text: str, specials: list[str]) -> bool:
    return any(s and s in text for s in specials)


def _placeholder(k: int) -> str:
    return f"HFGRPOLITERAL{k}X"


def encode_with_literals(
    tokenizer, render: Callable[[list[str]], str], literals: list[str], encode: Callable | None = None
) -> list[int]:
    """Ids of ``render(literals)`` (template text around ``literals``), with the literals' special-token strings kept
    as text. ``render`` must be a pure function of the strings it is given. ``encode(text, split)`` tokenizes one
    piece, in text order (default: the tokenizer; a vision-language policy's expands the image placeholders of the
    template pieces with its processor, `hf_grpo.agents.media`)."""
    piece_ids = encode or partial(_tokenize, tokenizer)
    text = render(literals)
    if not has_special("".join(literals), special_strings(tokenizer)):
        return piece_ids(text, split=False)
    marks = [_placeholder(k) for k in range(len(literals))]
    masked = render(marks)
    # The length each literal takes once rendered (the template may escape it).
    lengths = []
    for k in range(len(literals)):
        one = render([lit if j == k else marks[j] for j, lit in enumerate(literals)])
        lengths.append(len(one) - len(masked) + len(marks[k]))
    ids: list[int] = []
    pos_masked = pos_text = 0
    for k, mark in enumerate(marks):
        at = masked.find(mark, pos_masked)
        if at < 0:  # the template dropped this literal: nothing to protect
            continue
        piece = masked[pos_masked:at]
        ids += piece_ids(piece, split=False)
        pos_text += len(piece)
        ids += piece_ids(text[pos_text : pos_text + lengths[k]], split=True)
        pos_text += lengths[k]
        pos_masked = at + len(mark)
    ids += piece_ids(masked[pos_masked:], split=False)
    return ids


def _tokenize(tokenizer, text: str, split: bool) -> list[int]:
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=split)["input_ids"])
