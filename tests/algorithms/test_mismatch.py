"""Truncated importance weights for the train/inference mismatch, against hand-computed values."""

import math

import pytest
import torch

from hf_grpo.algorithms import LossInputs, LossSettings, logp_difference, policy_loss, truncated_importance_weights


def test_token_level_weights_are_capped_ratios_and_zero_on_padding():
    trainer = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
    sampler = torch.tensor([[-1.5, -1.0, -3.0], [-1.0, -1.2, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    w = truncated_importance_weights(trainer, sampler, mask, "token", cap=2.0)
    expected = torch.tensor(
        [
            [math.exp(0.5), math.exp(-1.0), 2.0],  # exp(2.5) = 12.2 capped at 2
            [1.0, math.exp(0.2), 0.0],
        ]
    )
    torch.testing.assert_close(w, expected)


def test_sequence_level_weight_is_the_product_of_token_ratios():
    trainer = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0]])
    sampler = torch.tensor([[-1.1, -2.2, 0.0], [-1.0, -1.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    w = truncated_importance_weights(trainer, sampler, mask, "sequence", cap=3.0)
    torch.testing.assert_close(w[0], torch.tensor([math.exp(0.3), math.exp(0.3), 0.0]))
    torch.testing.assert_close(w[1], torch.full((3,), 3.0))  # exp(8) capped, no overflow


def test_long_sequences_do_not_overflow_before_the_cap():
    trainer = torch.zeros(1, 4000)
    sampler = torch.full((1, 4000), -1.0)  # log ratio sum = 4000 -> exp overflows
    w = truncated_importance_weights(trainer, sampler, torch.ones(1, 4000), "sequence", cap=2.0)
    assert torch.isfinite(w).all() and torch.allclose(w, torch.full_like(w, 2.0))


def test_unknown_level_is_rejected():
    with pytest.raises(ValueError, match="sequence"):
        truncated_importance_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), "seq")


def test_logp_difference_mean_and_max_over_real_tokens():
    trainer = torch.tensor([[-1.0, -2.0, 5.0]])
    sampler = torch.tensor([[-1.5, -1.0, 0.0]])
    mean, mx = logp_difference(trainer, sampler, torch.tensor([[1.0, 1.0, 0.0]]))
    assert mean.item() == pytest.approx(0.75) and mx.item() == pytest.approx(1.0)


def test_weights_scale_each_tokens_policy_gradient():
    """With is_weights the per-token loss is the unweighted one times w (on-policy ratio = 1: loss = -A * w)."""
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([1.0])
    mask = torch.ones(1, 2)
    w = torch.tensor([[0.5, 2.0]])
    out = policy_loss(
        LossInputs(logp, logp.detach(), adv, mask, is_weights=w),
        LossSettings(epsilon_low=0.2, epsilon_high=0.2, loss_type="grpo"),
    )
    torch.testing.assert_close(out.per_token_loss.detach(), torch.tensor([[-0.5, -2.0]]))
    out.loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.25, -1.0]]))  # d/dlogp of -(r*A*w)/T, r = 1
