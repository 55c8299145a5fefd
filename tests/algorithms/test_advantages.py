import pytest
import torch

from hf_grpo.algorithms import batch_whitened_advantages, group_advantages, group_std


def test_grpo_hand_computed():
    # group [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3) = 0.57735
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 4, "grpo", eps=0.0)
    assert torch.allclose(adv, torch.tensor([0.8660254, -0.8660254, -0.8660254, 0.8660254]), atol=1e-6)


def test_grpo_groups_are_independent_and_zero_std_gives_zero():
    rewards = torch.tensor([2.0, 2.0, 0.0, 3.0])           # group 0 constant, group 1 varies
    adv = group_advantages(rewards, 2, "grpo")
    assert torch.equal(adv[:2], torch.zeros(2))
    assert torch.allclose(adv[2:], torch.tensor([-1.5, 1.5]) / (2.1213203 + 1e-4), atol=1e-5)


def test_dr_grpo_is_mean_centred_only():
    adv = group_advantages(torch.tensor([3.0, 1.0, 0.0, 0.0, 0.0, 6.0]), 3, "dr_grpo")
    assert torch.allclose(adv, torch.tensor([5 / 3, -1 / 3, -4 / 3, -2.0, -2.0, 4.0]))


def test_rloo_leave_one_out():
    # r = [1, 2, 6]: baselines (2+6)/2=4, (1+6)/2=3.5, (1+2)/2=1.5
    adv = group_advantages(torch.tensor([1.0, 2.0, 6.0]), 3, "rloo")
    assert torch.allclose(adv, torch.tensor([-3.0, -1.5, 4.5]))
    # RLOO equals G/(G-1) times the mean-centred advantage
    r = torch.randn(12)
    assert torch.allclose(group_advantages(r, 4, "rloo"), group_advantages(r, 4, "dr_grpo") * 4 / 3, atol=1e-6)


def test_rloo_needs_two_samples():
    with pytest.raises(ValueError, match="num_generations >= 2"):
        group_advantages(torch.tensor([1.0, 2.0]), 1, "rloo")


def test_reinforce_pp_batch_whitening():
    r = torch.tensor([1.0, 3.0])
    adv = batch_whitened_advantages(r, batch_mean=2.0, batch_std=1.0, eps=0.0)
    assert torch.allclose(adv, torch.tensor([-1.0, 1.0]))


def test_shape_errors_and_unknown_estimator():
    with pytest.raises(ValueError, match="groups of num_generations=4"):
        group_advantages(torch.zeros(6), 4)
    with pytest.raises(ValueError, match="unknown estimator"):
        group_advantages(torch.zeros(4), 2, "ppo")


def test_group_std():
    assert torch.allclose(group_std(torch.tensor([1.0, 1.0, 0.0, 2.0]), 2), torch.tensor([0.0, 1.4142135]))
    assert torch.equal(group_std(torch.tensor([1.0, 2.0]), 1), torch.zeros(2))
