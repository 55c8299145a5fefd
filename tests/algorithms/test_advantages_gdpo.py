"""TRL's ``multi_objective_aggregation="normalize_then_sum"`` (GDPO): hand-computed values, and TRL 1.16's own code
run on identical tensors.

TRL computes it inline in ``GRPOTrainer._generate_and_score_completions``; the test executes that branch's source,
read from the installed TRL at test time, on the same rewards (nothing of it is copied into hf_grpo).
"""

import inspect
import math
import textwrap
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from trl.trainer import grpo_trainer as trl_grpo
from trl.trainer.utils import nanstd

from hf_grpo.algorithms import AdvantageSettings, normalize_then_sum
from hf_grpo.learner.global_stats import rollout_advantages

NAN = float("nan")


def trl_normalize_then_sum(rewards_per_func: torch.Tensor, weights: torch.Tensor, G: int) -> torch.Tensor:
    """TRL's advantages for normalize_then_sum: its branch's source, executed on these tensors."""
    source = inspect.getsource(trl_grpo.GRPOTrainer._generate_and_score_completions)
    start = source.index('elif self.multi_objective_aggregation == "normalize_then_sum":')
    body = source[source.index("\n", start) + 1 :]
    indent = len(body) - len(body.lstrip(" "))
    lines = []
    for line in body.splitlines():
        if line.strip() and len(line) - len(line.lstrip(" ")) < indent:
            break  # the branch ends at the next less-indented line (its `else:`)
        lines.append(line)
    scope = {
        "torch": torch,
        "nanstd": nanstd,
        "rewards_per_func": rewards_per_func,
        "num_generations": G,
        "device": "cpu",
        "unscorable_mask": torch.isnan(rewards_per_func).all(dim=1),
        "self": SimpleNamespace(reward_weights=weights, reward_funcs=[None] * weights.numel()),
    }
    exec(textwrap.dedent("\n".join(lines)), scope)
    return torch.nan_to_num(scope["advantages"], nan=0.0)


def ours(rewards_per_func: torch.Tensor, weights: torch.Tensor, G: int) -> torch.Tensor:
    batch = SimpleNamespace(rewards_per_func=rewards_per_func, scored=~torch.isnan(rewards_per_func).all(dim=1))
    settings = AdvantageSettings("grpo", G, 1e-4, normalize_then_sum=True, token_whitening=False, mask_truncated=False)
    return rollout_advantages(batch, settings, Accelerator(cpu=True), weights)


def test_hand_computed_values():
    per_func = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, NAN], [1.0, 1.0]])  # [N*G=4, F=2], G=2
    w = torch.tensor([0.7, 0.3])
    a = 0.5 / (math.sqrt(0.5) + 1e-4)  # group 1, column 0: [1, 0], std sqrt(0.5)
    b = 1.0 / (math.sqrt(2.0) + 1e-4)  # group 1 column 1 [0, 2] and group 2 column 0 [3, 1]: std sqrt(2)
    # Group 2's column 1 has one value (the other is None): no spread, it contributes 0.
    expected = torch.tensor([0.7 * a - 0.3 * b, -0.7 * a + 0.3 * b, 0.7 * b, -0.7 * b])
    torch.testing.assert_close(normalize_then_sum(per_func, w, 2), expected)
    std = math.sqrt(float((expected - expected.mean()).pow(2).sum()) / 3)  # Bessel-corrected, over the batch
    torch.testing.assert_close(ours(per_func, w, 2), (expected - expected.mean()) / (std + 1e-4))


def test_weights_change_the_advantages():
    # The same rewards with the weights swapped give different advantages (the weights are used per objective).
    per_func = torch.tensor([[1.0, 0.0], [0.0, 5.0], [2.0, 1.0], [0.0, 1.0]])
    assert not torch.allclose(
        normalize_then_sum(per_func, torch.tensor([1.0, 0.0]), 2),
        normalize_then_sum(per_func, torch.tensor([0.0, 1.0]), 2),
    )


@pytest.mark.parametrize("G", [2, 4])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_trl_on_identical_tensors(G, seed):
    g = torch.Generator().manual_seed(seed)
    per_func = torch.randint(0, 4, (3 * G, 3), generator=g).float()  # [N*G, F], ties included
    per_func[torch.rand(per_func.shape, generator=g) < 0.2] = NAN  # some None per function
    per_func[1] = NAN  # one row no function scored
    per_func[G : 2 * G, 0] = 1.0  # a zero-spread column in a group
    w = torch.tensor([0.5, 1.5, -0.25])
    expected = trl_normalize_then_sum(per_func.clone(), w, G)
    got = ours(per_func.clone(), w, G)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert got[1] == 0.0


def test_shape_mismatch_names_the_weights():
    with pytest.raises(ValueError, match="3 reward weights"):
        normalize_then_sum(torch.zeros(4, 2), torch.ones(3), 2)
