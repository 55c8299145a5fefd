import math

import pytest
import torch

from hf_grpo.algorithms import aggregate, kl_penalty, policy_loss


def test_kl_estimators_hand_computed():
    logp, ref = torch.tensor([[0.0]]), torch.tensor([[math.log(0.5)]])
    d = math.log(0.5)
    assert torch.allclose(kl_penalty(logp, ref, "k1")[0], torch.tensor([[-d]]))
    assert torch.allclose(kl_penalty(logp, ref, "k2")[0], torch.tensor([[d * d / 2]]))
    assert torch.allclose(kl_penalty(logp, ref, "k3")[0], torch.tensor([[0.5 - d - 1]]))
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_penalty(logp, ref, "k4")


def test_kl_estimators_are_unbiased_or_positive():
    # Samples from p = softmax(a); k1 and k3 estimate KL(p||q) without bias.
    torch.manual_seed(0)
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.4, 0.4, 0.2])
    x = torch.multinomial(p, 200_000, replacement=True)
    logp, logq = p.log()[x], q.log()[x]
    true_kl = float((p * (p / q).log()).sum())
    assert abs(float(kl_penalty(logp, logq, "k1")[0].mean()) - true_kl) < 0.01
    assert abs(float(kl_penalty(logp, logq, "k3")[0].mean()) - true_kl) < 0.01
    assert float(kl_penalty(logp, logq, "k3")[0].min()) >= 0


def test_aggregations_hand_computed():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(per_token, mask, "grpo") == pytest.approx((2.0 + 4.0) / 2)
    assert aggregate(per_token, mask, "bnpo") == pytest.approx(10.0 / 4)
    assert aggregate(per_token, mask, "dr_grpo", max_completion_length=5) == pytest.approx(10.0 / (2 * 5))
    assert aggregate(per_token, mask, "dapo", token_normalizer=20.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="token_normalizer"):
        aggregate(per_token, mask, "dapo")


def test_on_policy_loss_is_minus_advantage_and_gradient_is_policy_gradient():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]], requires_grad=True)
    adv = torch.tensor([2.0, -1.0])
    mask = torch.ones(2, 2)
    out = policy_loss(logp, logp.detach(), adv, mask, loss_type="bnpo")
    assert out.loss.item() == pytest.approx(-(2 + 2 - 1 - 1) / 4)
    out.loss.backward()
    # d/dlogp of -A * exp(logp - sg(logp)) is -A at ratio 1, divided by the 4 tokens
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, -0.5], [0.25, 0.25]]))


def test_clipping_hand_computed():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.7]]))    # ratios
    mask = torch.ones(1, 4)
    pos = policy_loss(logp, old, torch.tensor([1.0]), mask, epsilon_low=0.2, epsilon_high=0.28, loss_type="bnpo")
    # A>0: min(r, clip(r, .8, 1.28)) = [1.28, 0.5, 1.1, 0.7]
    assert pos.loss.item() == pytest.approx(-(1.28 + 0.5 + 1.1 + 0.7) / 4, rel=1e-5)
    assert pos.high_clipped.tolist() == [[True, False, False, False]]
    assert not pos.low_clipped.any()
    neg = policy_loss(logp, old, torch.tensor([-1.0]), mask, epsilon_low=0.2, epsilon_high=0.28, loss_type="bnpo")
    # A<0: -min(-r, -clip(r)) = max(r, clip(r)) = [1.5, 0.8, 1.1, 0.8]
    assert neg.loss.item() == pytest.approx((1.5 + 0.8 + 1.1 + 0.8) / 4, rel=1e-5)
    assert neg.low_clipped.tolist() == [[False, True, False, True]]


def test_gspo_sequence_ratio_is_geometric_mean():
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[2.0, 0.5, 1.0]]))          # geometric mean of ratios = 1
    mask = torch.tensor([[1.0, 1.0, 0.0]])                       # last token masked out
    out = policy_loss(logp, old, torch.tensor([1.0]), mask, importance_sampling_level="sequence", loss_type="grpo",
                      epsilon_low=0.2, epsilon_high=0.2)
    assert torch.allclose(out.ratio, torch.ones(1, 3))
    assert out.loss.item() == pytest.approx(-1.0)


def test_kl_added_per_token():
    logp = torch.zeros(1, 2)
    ref = torch.full((1, 2), math.log(0.5))
    out = policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 2), beta=0.1, ref_logp=ref, loss_type="bnpo")
    d = math.log(0.5)
    assert out.loss.item() == pytest.approx(0.1 * (math.exp(d) - d - 1))
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 2), beta=0.1)


def test_is_weights_scale_the_loss_without_gradient():
    logp = torch.zeros(1, 2, requires_grad=True)
    w = torch.tensor([[2.0, 0.0]], requires_grad=True)
    out = policy_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2), is_weights=w, loss_type="bnpo")
    assert out.loss.item() == pytest.approx(-1.0)
    out.loss.backward()
    assert w.grad is None
