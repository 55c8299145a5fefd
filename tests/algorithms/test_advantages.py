import pytest
import torch

from hf_grpo.algorithms import (
    batch_whitened_advantages,
    group_advantages,
    group_std,
    whitening_mean_std,
    whitening_sums,
)


def test_grpo_hand_computed():
    # group [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3) = 0.57735
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 4, "grpo", eps=0.0)
    assert torch.allclose(adv, torch.tensor([0.8660254, -0.8660254, -0.8660254, 0.8660254]), atol=1e-6)


def test_grpo_groups_are_independent_and_zero_std_gives_zero():
    rewards = torch.tensor([2.0, 2.0, 0.0, 3.0])  # group 0 constant, group 1 varies
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


# ---- completions no reward function scored (all None) ---------------------------------------------------------------
def test_an_unscored_row_is_left_out_of_its_groups_statistics_hand_computed():
    rewards = torch.tensor([0.0, 1.0, 2.0, 3.0, 5.0, 5.0, 7.0, 9.0])  # row 0: unscored (its runner total is 0)
    valid = torch.tensor([False, True, True, True, True, True, True, True])
    grpo = group_advantages(rewards, 4, "grpo", eps=0.0, valid=valid)
    # group 1 over {1, 2, 3}: mean 2, unbiased std 1
    assert torch.allclose(grpo[:4], torch.tensor([0.0, -1.0, 0.0, 1.0]))
    assert torch.allclose(grpo[4:], group_advantages(rewards[4:], 4, "grpo", eps=0.0))  # untouched group
    dr = group_advantages(rewards, 4, "dr_grpo", valid=valid)
    assert torch.allclose(dr[:4], torch.tensor([0.0, -1.0, 0.0, 1.0]))
    rloo = group_advantages(rewards, 4, "rloo", valid=valid)
    # leave-one-out over the other valid rows: 1 - 2.5, 2 - 2, 3 - 1.5
    assert torch.allclose(rloo[:4], torch.tensor([0.0, -1.5, 0.0, 1.5]))
    # Without the mask the unscored 0 drags the mean down and gets a large negative advantage.
    assert group_advantages(rewards, 4, "grpo")[0] < -1.0


def test_unscored_rows_match_trls_formula():
    """TRL 1.16 (grpo_trainer.py, sum_then_normalize, scale_rewards=group): rewards of unscored rows set to NaN,
    nanmean / TRL's nanstd per group, then NaN advantages -> 0. Same tensors, same numbers."""
    from trl.trainer.utils import nanstd

    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=g)
    valid = torch.ones(12, dtype=torch.bool)
    valid[[0, 5, 6, 7]] = False  # one, then three unscored rows in a group of 4 (one left)
    nan_rewards = torch.where(valid, rewards, torch.nan).view(-1, 4)
    mean = torch.nanmean(nan_rewards, dim=1, keepdim=True)
    std = nanstd(nan_rewards, dim=1, keepdim=True)
    trl = torch.nan_to_num(((nan_rewards - mean) / (std + 1e-4)).view(-1), nan=0.0)
    ours = group_advantages(torch.where(valid, rewards, 0.0), 4, "grpo", eps=1e-4, valid=valid)
    torch.testing.assert_close(ours, trl)


def test_reinforce_pp_leaves_unscored_rows_out_and_gives_them_zero():
    rewards = torch.tensor([1.0, 3.0, 0.0])
    valid = torch.tensor([True, True, False])
    mean, std = whitening_mean_std(whitening_sums(rewards, valid.double()))
    assert (mean, std) == (2.0, 1.0)
    adv = batch_whitened_advantages(rewards, mean, std, eps=0.0, valid=valid)
    assert adv.tolist() == [-1.0, 1.0, 0.0]


# ---- REINFORCE++ whitening per sequence (default) or per token (verl, OpenRLHF) ----------------------------------
def test_reinforce_pp_token_whitening_weights_completions_by_their_tokens():
    rewards = torch.tensor([1.0, 0.0])
    lengths = torch.tensor([3.0, 1.0])
    # per sequence: mean 0.5, std 0.5
    assert whitening_mean_std(whitening_sums(rewards, torch.ones(2))) == (0.5, 0.5)
    # per token: rewards repeated over tokens [1, 1, 1, 0]: mean 0.75, population std sqrt(0.1875)
    mean, std = whitening_mean_std(whitening_sums(rewards, lengths))
    assert mean == pytest.approx(0.75) and std == pytest.approx(0.1875**0.5)
    per_token = torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert std == pytest.approx(float(per_token.std(unbiased=False)))
    # Sums from several processes add up: the global statistics are those of the concatenated batch.
    split = whitening_sums(rewards[:1], lengths[:1]) + whitening_sums(rewards[1:], lengths[1:])
    assert whitening_mean_std(split) == whitening_mean_std(whitening_sums(rewards, lengths))
    assert whitening_mean_std(torch.zeros(3, dtype=torch.float64)) == (0.0, 0.0)


def test_advantage_settings_read_the_config_once_and_check_the_estimator():
    from types import SimpleNamespace

    from hf_grpo.algorithms import AdvantageSettings

    config = SimpleNamespace(
        advantage_estimator="reinforce_pp",
        num_generations=4,
        advantage_eps=1e-6,
        multi_objective_aggregation="sum_then_normalize",
        reinforce_pp_whitening="token",
        mask_truncated_completions=True,
    )
    settings = AdvantageSettings.from_config(config)
    assert (settings.num_generations, settings.eps, settings.normalize_then_sum) == (4, 1e-6, False)
    assert settings.token_whitening and settings.mask_truncated
    # A chunk of eval prompts is not a step: a batch-level estimator falls back to grpo, a group-local one stays.
    assert settings.group_local_estimator() == "grpo"
    rloo = SimpleNamespace(**(vars(config) | {"advantage_estimator": "rloo"}))
    assert AdvantageSettings.from_config(rloo).group_local_estimator() == "rloo"
    with pytest.raises(ValueError, match="advantage_estimator='ppo' is not one of"):
        AdvantageSettings("ppo", 4, 1e-6, False, False, False)
