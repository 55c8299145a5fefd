import math

import pytest

from hf_grpo.algorithms import scheduled_temperature


def test_linear_and_cosine_annealing_hand_computed():
    assert [scheduled_temperature(s, 4, 1.0, 0.5, "linear") for s in range(6)] == [1.0, 0.875, 0.75, 0.625, 0.5, 0.5]
    cosine = [scheduled_temperature(s, 4, 1.0, 0.5, "cosine") for s in (0, 1, 2, 4, 9)]
    assert cosine == pytest.approx([1.0, 1.0 - 0.5 * (1 - math.cos(math.pi / 4)) / 2, 0.75, 0.5, 0.5])
    assert scheduled_temperature(3, 4, 1.0, 0.5, "constant") == 1.0
    assert scheduled_temperature(3, 4, 0.6, 1.2, "linear") == pytest.approx(1.05)  # warming up works too
    with pytest.raises(ValueError, match="unknown temperature schedule"):
        scheduled_temperature(0, 4, 1.0, 0.5, "exponential")
