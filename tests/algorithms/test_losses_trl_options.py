"""TRL's algorithm options as pure tensor functions: hand-computed values, and TRL's own code on identical tensors
where TRL has a callable implementation (its entropy mask, its nanstd)."""

import math
import warnings

import pytest
import torch
from accelerate import Accelerator

from hf_grpo.algorithms import (
    LossInputs,
    LossSettings,
    batch_std_group_advantages,
    entropy_threshold,
    high_entropy_mask,
    importance_sampling_weights,
    policy_loss,
    truncated_importance_weights,
    unbiased_std,
    whitening_sums,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import nanstd


def test_delta_caps_the_unclipped_ratio():
    logp = torch.log(torch.tensor([[3.0, 0.5, 1.0]]))  # ratios 3, 0.5, 1 against old log-prob 0
    old = torch.zeros(1, 3)
    mask = torch.ones(1, 3)
    adv = torch.tensor([-1.0])
    # Negative advantage: -min(r*A, clip(r)*A) = max(r, clip(r)) -> r=3 unbounded without delta, 2 with delta=2.
    plain = policy_loss(LossInputs(logp, old, adv, mask), LossSettings(loss_type="bnpo")).per_token_loss
    capped = policy_loss(LossInputs(logp, old, adv, mask), LossSettings(loss_type="bnpo", delta=2.0)).per_token_loss
    torch.testing.assert_close(plain, torch.tensor([[3.0, 0.8, 1.0]]))
    torch.testing.assert_close(capped, torch.tensor([[2.0, 0.8, 1.0]]))
    # TRL's formula (grpo_trainer._compute_loss) on the same tensors.
    coef_1 = torch.exp(logp - old)
    coef_2 = torch.clamp(coef_1, 0.8, 1.2)
    trl = -torch.min(torch.clamp(coef_1, max=2.0) * adv.unsqueeze(1), coef_2 * adv.unsqueeze(1))
    torch.testing.assert_close(capped, trl)


def test_entropy_mask_matches_trl_and_leaves_kl_alone():
    torch.manual_seed(0)
    entropy = torch.rand(3, 5)
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]).float()

    class Owner:  # TRL's method needs only an accelerator
        accelerator = Accelerator(cpu=True)

    for rho in (0.0, 0.2, 0.5, 1.0):
        ours = high_entropy_mask(entropy, mask, entropy_threshold(entropy[mask.bool()], rho))
        theirs = GRPOTrainer.get_high_entropy_mask(Owner(), entropy, mask, 1 - rho)
        assert torch.equal(ours.bool(), theirs), rho
    kept = high_entropy_mask(entropy, mask, entropy_threshold(entropy[mask.bool()], 0.2))
    assert kept.sum() == 3  # 20% of 11 tokens, interpolated threshold: the top 3
    logp = torch.randn(3, 5, requires_grad=True)
    out = policy_loss(
        LossInputs(
            logp, logp.detach(), torch.tensor([1.0, -1.0, 0.5]), mask, ref_logp=logp.detach() + 0.3, entropy_mask=kept
        ),
        LossSettings(loss_type="bnpo", beta=0.1),
    )
    pg = -torch.tensor([1.0, -1.0, 0.5]).unsqueeze(1) * kept  # ratio 1: -A on kept tokens only
    torch.testing.assert_close(out.per_token_loss, pg + 0.1 * out.kl)  # KL on every token


def test_importance_sampling_modes_hand_computed():
    trainer = torch.log(torch.tensor([[1.0, 4.0, 0.25], [1.5, 1.5, 1.0]]))
    sampler = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    w = importance_sampling_weights(trainer, sampler, mask, "token_truncate", clip_max=3.0, clip_min=0.5)
    torch.testing.assert_close(w, torch.tensor([[1.0, 3.0, 0.5], [1.5, 1.5, 0.0]]))
    w = importance_sampling_weights(trainer, sampler, mask, "token_mask", clip_max=3.0, clip_min=0.5)
    torch.testing.assert_close(w, torch.tensor([[1.0, 0.0, 0.0], [1.5, 1.5, 0.0]]))
    # Sequence ratios: 1*4*0.25 = 1 (kept), 1.5*1.5 = 2.25 (masked above 2, truncated to 2).
    w = importance_sampling_weights(trainer, sampler, mask, "sequence_mask", clip_max=2.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    w = importance_sampling_weights(trainer, sampler, mask, "sequence_truncate", clip_max=2.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))
    # token_truncate without a floor is the original truncated importance sampling.
    torch.testing.assert_close(
        importance_sampling_weights(trainer, sampler, mask, "token_truncate", 2.0),
        truncated_importance_weights(trainer, sampler, mask, "token", 2.0),
    )
    # A long sequence does not overflow before the bound applies; a NaN sampler log-prob counts as ratio 1.
    big = importance_sampling_weights(
        torch.full((1, 400), 1.0), torch.zeros(1, 400), torch.ones(1, 400), "sequence_truncate", 3.0
    )
    assert torch.isfinite(big).all() and math.isclose(big[0, 0].item(), 3.0, rel_tol=1e-5)
    nan = importance_sampling_weights(
        torch.zeros(1, 2), torch.tensor([[float("nan"), 0.0]]), torch.ones(1, 2), "token_mask", 2.0
    )
    torch.testing.assert_close(nan, torch.ones(1, 2))
    with pytest.raises(ValueError, match="unknown vllm_importance_sampling_mode 'token'"):
        importance_sampling_weights(trainer, sampler, mask, "token")


def test_batch_std_advantages_match_trl():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 2.0, 0.5])
    ours = batch_std_group_advantages(rewards, 4, unbiased_std(whitening_sums(rewards, torch.ones(8))))
    group_mean = rewards.view(-1, 4).mean(1).repeat_interleave(4)
    theirs = (rewards - group_mean) / (nanstd(rewards) + 1e-4)  # TRL's scale_rewards="batch"
    torch.testing.assert_close(ours, theirs)
    valid = torch.tensor([True] * 7 + [False])
    masked = batch_std_group_advantages(rewards, 4, unbiased_std(whitening_sums(rewards, valid.double())), valid=valid)
    assert masked[-1] == 0
    nan_rewards = torch.where(valid, rewards, torch.tensor(float("nan")))
    expected_std = nanstd(nan_rewards)
    expected = (rewards[:4] - rewards[:4].mean()) / (expected_std + 1e-4)
    torch.testing.assert_close(masked[:4], expected)
