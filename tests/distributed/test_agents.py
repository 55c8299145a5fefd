"""Multi-turn rollouts under `accelerate launch` with 2 processes whose tool use is as uneven as it gets: rank 0's
rollouts all answer at turn 1, rank 1's call the tool until the limit. The agent loop has no collective inside it,
so this cannot hang on DDP; under ZeRO-3 the real HF generate runs every wave's forward passes in lock-step (one
agreement per wave), so rank 0 keeps joining rank 1's waves with empty ones. Both must finish, agree on the weights,
and log what each rank did."""

import pytest

from tests.helpers.launch import assert_ranks_agree_and_trained, launch, results, step_logs

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


@pytest.mark.parametrize("backend,peft", [("ddp", False), ("zero3", False)])
def test_uneven_tool_use_across_ranks_does_not_hang(backend, peft, tiny_llama_path, tmp_path):
    config = {
        "max_tool_calling_iterations": 4,
        "max_completion_length": 256,
        "max_steps": 1,  # one step shows it: the second repeated the same lock-step (279 s of the suite with two)
        "use_peft": peft,
        "beta": 0.0 if peft else 0.04,
    }
    launch(backend, tiny_llama_path, tmp_path, {"config": config, "scripted_tool_calls": [0, 50]}, timeout=420)
    r0, r1 = results(tmp_path)
    if not peft:
        assert_ranks_agree_and_trained(r0, r1, tiny_llama_path)
    for log in step_logs(r0):
        # Logged values are means over both ranks: rank 0 made no call, rank 1 four per rollout (the limit).
        assert log["tools/call_frequency"] == pytest.approx(2.0)
        assert log["rollout/termination/eos"] == pytest.approx(0.5)
        assert log["rollout/termination/max_turns"] == pytest.approx(0.5)
        assert log["rollout/observation_tokens_mean"] > 0
