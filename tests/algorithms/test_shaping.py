import torch

from hf_grpo.algorithms import dynamic_sampling_keep, group_success_rate, overlong_penalty, truncated_completion_mask


def test_overlong_penalty_hand_computed():
    # max 100, cache 20: free up to 80, then linear to -1 at 100
    pen = overlong_penalty(torch.tensor([10, 80, 90, 100]), 100, 20, penalty_factor=1.0)
    assert torch.allclose(pen, torch.tensor([0.0, 0.0, -0.5, -1.0]))
    assert torch.allclose(overlong_penalty(torch.tensor([95]), 100, 20, 2.0), torch.tensor([-1.5]))


def test_truncated_mask():
    mask = torch.ones(2, 3)
    out = truncated_completion_mask(torch.tensor([True, False]), mask)
    assert out.tolist() == [[1, 1, 1], [0, 0, 0]]


def test_dynamic_sampling_keeps_mixed_groups_only():
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    assert torch.allclose(group_success_rate(rewards, 4, 1.0), torch.tensor([1.0, 0.0, 0.25]))
    assert dynamic_sampling_keep(rewards, 4, (0.01, 0.99)).tolist() == [False, False, True]
    # a format bonus below the threshold is not a success
    assert dynamic_sampling_keep(torch.tensor([0.5, 0.5]), 2, (0.01, 0.99), 1.0).tolist() == [False]
