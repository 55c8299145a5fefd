"""Reward functions used by tests, importable by dotted path (``tests.helpers.rewards.<name>``)."""

import json
import os


def even_token_reward(completion_ids, **kwargs):
    """Fraction of even token ids: varies across random completions, so a random model gets non-zero advantages."""
    return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]


def recording_reward(prompts, completions, **kwargs):
    """Appends the prompts it scores to $HF_GRPO_TEST_RECORD (one JSON line per call) and returns 0/1 by parity."""
    path = os.environ["HF_GRPO_TEST_RECORD"]
    with open(path, "a") as f:
        f.write(
            json.dumps({"step": kwargs["trainer_state"].global_step, "prompts": [p[-1]["content"] for p in prompts]})
            + "\n"
        )
    return [float(i % 2) for i in range(len(completions))]


def failing_after_first_step(completion_ids, trainer_state=None, **kwargs):
    """Scores like even_token_reward on the first step, then raises: a user reward that crashes mid-run."""
    if trainer_state.global_step >= 1:
        raise RuntimeError("boom: user reward bug")
    return even_token_reward(completion_ids)


def half_constant_reward(prompts, completion_ids, **kwargs):
    """Constant 1.0 for the completions of the call's first prompt (a zero-std group, advantage 0), even-token
    fraction for the others, whatever the dataset holds (a call scores one process's round: several prompts)."""
    return [
        1.0 if p == prompts[0] else sum(t % 2 == 0 for t in ids) / max(len(ids), 1)
        for p, ids in zip(prompts, completion_ids)
    ]


def rank1_fails_after_first_step(completion_ids, trainer_state=None, **kwargs):
    """Process 1's reward raises from the second step on; process 0's never does."""
    if trainer_state.global_step >= 1 and int(os.environ["RANK"]) == 1:
        raise RuntimeError("boom on rank 1")
    return even_token_reward(completion_ids)


def rank1_constant_reward(completion_ids, **kwargs):
    """Even-token fraction on process 0, a constant 0 on process 1: process 1's groups have no reward variance, so
    its micro-batches shrink to one (zero-advantage) sample and dynamic sampling refills only there. The two
    processes then run forward passes of different shapes and different numbers of generation rounds."""
    if int(os.environ["RANK"]) == 1:
        return [0.0] * len(completion_ids)
    return even_token_reward(completion_ids)


def none_for_first_of_each_group(completion_ids, **kwargs):
    """None (does not apply) for the first completion of each group of 4, even-token fraction for the others."""
    return [
        None if i % 4 == 0 else sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for i, ids in enumerate(completion_ids)
    ]
