"""What reward functions are called with, built from a round's rows and completions (TRL's contract): the
completions as they see them (chat messages for chat prompts, else text) and every dataset column but the prompt,
one entry per completion. Training (`hf_grpo.rollout.collector`) and evaluation (`hf_grpo.evaluation`) both call
the reward functions with these.
"""

from __future__ import annotations

from ..data import is_conversational


def decode_completions(tokenizer, rows: list[dict], completion_ids: list[list[int]]) -> tuple[list[str], list]:
    """Completion texts, and the completions as reward functions see them: chat messages for chat prompts."""
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    if rows and is_conversational(rows[0]["prompt"]):
        return texts, [[{"role": "assistant", "content": t}] for t in texts]
    return texts, texts


def reward_columns(rows: list[dict], repeats: int) -> dict[str, list]:
    """Every dataset column but the prompt, one entry per completion (``repeats`` completions per row)."""
    keys = rows[0].keys() if rows else []
    return {k: [r[k] for r in rows for _ in range(repeats)] for k in keys if k != "prompt"}
