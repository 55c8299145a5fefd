import math

import pytest
import torch

from hf_grpo.algorithms import LossInputs, LossSettings, aggregate, kl_penalty, policy_loss


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
    out = policy_loss(LossInputs(logp, logp.detach(), adv, mask), LossSettings(loss_type="bnpo"))
    assert out.loss.item() == pytest.approx(-(2 + 2 - 1 - 1) / 4)
    out.loss.backward()
    # d/dlogp of -A * exp(logp - sg(logp)) is -A at ratio 1, divided by the 4 tokens
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, -0.5], [0.25, 0.25]]))


def test_clipping_hand_computed():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.7]]))  # ratios
    mask = torch.ones(1, 4)
    pos = policy_loss(
        LossInputs(logp, old, torch.tensor([1.0]), mask),
        LossSettings(epsilon_low=0.2, epsilon_high=0.28, loss_type="bnpo"),
    )
    # A>0: min(r, clip(r, .8, 1.28)) = [1.28, 0.5, 1.1, 0.7]
    assert pos.loss.item() == pytest.approx(-(1.28 + 0.5 + 1.1 + 0.7) / 4, rel=1e-5)
    assert pos.high_clipped.tolist() == [[True, False, False, False]]
    assert not pos.low_clipped.any()
    neg = policy_loss(
        LossInputs(logp, old, torch.tensor([-1.0]), mask),
        LossSettings(epsilon_low=0.2, epsilon_high=0.28, loss_type="bnpo"),
    )
    # A<0: -min(-r, -clip(r)) = max(r, clip(r)) = [1.5, 0.8, 1.1, 0.8]
    assert neg.loss.item() == pytest.approx((1.5 + 0.8 + 1.1 + 0.8) / 4, rel=1e-5)
    assert neg.low_clipped.tolist() == [[False, True, False, True]]


def test_gspo_sequence_ratio_is_geometric_mean():
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[2.0, 0.5, 1.0]]))  # geometric mean of ratios = 1
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # last token masked out
    out = policy_loss(
        LossInputs(logp, old, torch.tensor([1.0]), mask),
        LossSettings(importance_sampling_level="sequence", loss_type="grpo", epsilon_low=0.2, epsilon_high=0.2),
    )
    assert torch.allclose(out.ratio, torch.ones(1, 3))
    assert out.loss.item() == pytest.approx(-1.0)


def test_kl_added_per_token():
    logp = torch.zeros(1, 2)
    ref = torch.full((1, 2), math.log(0.5))
    out = policy_loss(
        LossInputs(logp, logp, torch.tensor([0.0]), torch.ones(1, 2), ref_logp=ref),
        LossSettings(beta=0.1, loss_type="bnpo"),
    )
    d = math.log(0.5)
    assert out.loss.item() == pytest.approx(0.1 * (math.exp(d) - d - 1))
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(LossInputs(logp, logp, torch.tensor([0.0]), torch.ones(1, 2)), LossSettings(beta=0.1))


def test_is_weights_scale_the_loss_without_gradient():
    logp = torch.zeros(1, 2, requires_grad=True)
    w = torch.tensor([[2.0, 0.0]], requires_grad=True)
    out = policy_loss(
        LossInputs(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2), is_weights=w),
        LossSettings(loss_type="bnpo"),
    )
    assert out.loss.item() == pytest.approx(-1.0)
    out.loss.backward()
    assert w.grad is None


# ---- numerical guards (verl's clamps) ------------------------------------------------------------------------------
def test_an_extreme_ratio_with_zero_advantage_stays_finite_and_is_counted():
    # log-ratio 100: exp overflows to inf, and inf * advantage 0 is NaN in the loss without the clamp.
    logp = torch.tensor([[100.0, -1.0]], requires_grad=True)
    old = torch.tensor([[0.0, -1.0]])
    out = policy_loss(
        LossInputs(logp, old, torch.tensor([0.0]), torch.ones(1, 2), ref_logp=old),
        LossSettings(beta=0.1, loss_type="bnpo"),
    )
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert torch.isfinite(logp.grad).all()
    assert out.ratio_clamped.tolist() == [[True, False]]
    assert out.ratio[0, 0].item() == pytest.approx(math.exp(20.0), rel=1e-5)


def test_k3_exponent_and_value_are_clamped_and_counted():
    logp = torch.tensor([[-100.0, -1.0, -2.0]])
    ref = torch.tensor([[0.0, -1.0, -2.0 + 25.0]])  # d = ref - logp: 100 (exp overflows), 0, 25
    kl, clamped = kl_penalty(logp, ref, "k3")
    assert kl.tolist() == [[10.0, 0.0, 10.0]]  # exp(20) - 21 > 10, clamped to 10
    assert clamped.tolist() == [[True, False, True]]
    kl, clamped = kl_penalty(torch.tensor([[0.0]]), torch.tensor([[math.log(0.5)]]), "k3")
    assert not clamped.any() and kl.item() == pytest.approx(0.5 - math.log(0.5) - 1)


def test_policy_loss_reports_kl_clamps():
    logp = torch.tensor([[-60.0, -1.0]])
    out = policy_loss(
        LossInputs(logp, logp, torch.tensor([1.0]), torch.ones(1, 2), ref_logp=torch.zeros(1, 2)),
        LossSettings(beta=0.1, loss_type="bnpo"),
    )
    assert out.kl_clamped.tolist() == [[True, False]]
    assert torch.isfinite(out.loss)
    assert not policy_loss(
        LossInputs(logp, logp, torch.tensor([1.0]), torch.ones(1, 2)), LossSettings()
    ).kl_clamped.any()  # beta 0: no KL


# ---- KL gradients: k3+ (verl) and the importance-weighted KL (TRL's use_bias_correction_kl) -------------------------
def test_k3_plus_has_k3s_value_and_k2s_gradient():
    d = math.log(0.5)  # ref_logp - logp
    logp = torch.tensor([[0.0]], requires_grad=True)
    ref = torch.tensor([[d]])
    k3, _ = kl_penalty(logp, ref, "k3")
    k3.sum().backward()
    assert logp.grad.item() == pytest.approx(1 - math.exp(d))  # d/dlogp (e^d - d - 1) = 1 - e^d = 0.5
    logp.grad = None
    k3p, _ = kl_penalty(logp, ref, "k3+")
    assert k3p.item() == pytest.approx(math.exp(d) - d - 1)  # the value is k3's
    k3p.sum().backward()
    assert logp.grad.item() == pytest.approx(-d)  # d/dlogp (logp - ref)^2 / 2 = -d = 0.693


def test_bias_corrected_kl_hand_computed():
    # ratio r = 0.6 / 0.5 = 1.2; d = log(0.3 / 0.6); loss = beta * r * k3 (advantage 0, one token).
    logp = torch.tensor([[math.log(0.6)]], requires_grad=True)
    old, ref = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.3)]])
    out = policy_loss(
        LossInputs(logp, old, torch.tensor([0.0]), torch.ones(1, 1), ref_logp=ref),
        LossSettings(beta=1.0, loss_type="bnpo", use_bias_correction_kl=True),
    )
    r, d = 1.2, math.log(0.5)
    k3 = math.exp(d) - d - 1
    assert out.loss.item() == pytest.approx(r * k3, rel=1e-5)
    out.loss.backward()
    # d/dlogp (r * k3) = r * k3 + r * (1 - e^d): on-policy (r = 1) this is -d, the true reverse-KL gradient.
    assert logp.grad.item() == pytest.approx(r * k3 + r * (1 - math.exp(d)), rel=1e-5)


def test_bias_corrected_k3_gradient_is_the_kl_gradient_on_policy():
    # E_p[grad(r * k3)] = grad KL(p || q) for a softmax policy, estimated from samples (r = 1 on-policy).
    torch.manual_seed(0)
    theta = torch.tensor([1.5, -0.5, 0.0], requires_grad=True)
    q = torch.tensor([0.2, 0.4, 0.4])
    p = theta.softmax(-1)
    (true_grad,) = torch.autograd.grad((p * (p / q).log()).sum(), theta)
    x = torch.multinomial(p.detach(), 200_000, replacement=True)
    logp = theta.log_softmax(-1)[x].unsqueeze(0)  # [1, N]
    out = policy_loss(
        LossInputs(logp, logp.detach(), torch.zeros(1), torch.ones_like(logp), ref_logp=q.log()[x].unsqueeze(0)),
        LossSettings(beta=1.0, loss_type="bnpo", use_bias_correction_kl=True),
    )
    (grad,) = torch.autograd.grad(out.loss, theta, retain_graph=True)
    assert torch.allclose(grad, true_grad, atol=0.01)
    plain = policy_loss(
        LossInputs(logp, logp.detach(), torch.zeros(1), torch.ones_like(logp), ref_logp=q.log()[x].unsqueeze(0)),
        LossSettings(beta=1.0, loss_type="bnpo"),
    )
    (biased,) = torch.autograd.grad(plain.loss, theta)
    assert (biased - true_grad).abs().max() > 0.05  # k3's own gradient is not the KL's


# ---- bnpo: the trainer's normaliser ---------------------------------------------------------------------------------
def test_bnpo_with_the_step_normaliser_is_the_local_token_mean_of_the_step():
    # Two micro-batches of one optimizer step (accumulation 2) with 3 and 1 active tokens. The trainer passes
    # num_tokens = step tokens / accumulation steps; Trainer averages the micro-batch losses.
    a, mask_a = torch.tensor([[1.0, 2.0, 3.0]]), torch.ones(1, 3)
    b, mask_b = torch.tensor([[4.0, 9.0, 9.0]]), torch.tensor([[1.0, 0.0, 0.0]])
    step = (aggregate(a, mask_a, "bnpo", num_tokens=4 / 2) + aggregate(b, mask_b, "bnpo", num_tokens=4 / 2)) / 2
    assert step.item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    # Without num_tokens each micro-batch is normalised by its own count (TRL's bnpo): a different weighting.
    alone = (aggregate(a, mask_a, "bnpo") + aggregate(b, mask_b, "bnpo")) / 2
    assert alone.item() == pytest.approx((2.0 + 4.0) / 2)


# ---- ratio skip threshold (ColossalChat's skip_threshold) -----------------------------------------------------------
def test_completions_above_the_ratio_threshold_leave_the_loss_and_are_counted():
    old = torch.zeros(3, 2)
    logp = torch.log(torch.tensor([[3.0, 3.0], [1.1, 0.9], [2.5, 1.0]])).requires_grad_(True)  # mean ratios 3, 1, 1.75
    adv = torch.tensor([-1.0, 1.0, -1.0])
    mask = torch.ones(3, 2)
    out = policy_loss(LossInputs(logp, old, adv, mask), LossSettings(loss_type="grpo", ratio_skip_threshold=2.0))
    assert out.ratio_skipped.tolist() == [True, False, False]
    # The kept rows' per-sequence means, over all 3 sequences (denominators as planned):
    # row 1: -min(r, clip(r)) with A=1 -> -(1.1 + 0.9) / 2; row 2: A=-1 -> (2.5 + 1.0) / 2.
    assert out.loss.item() == pytest.approx((-(1.1 + 0.9) / 2 + (2.5 + 1.0) / 2) / 3, rel=1e-5)
    out.loss.backward()
    assert torch.equal(logp.grad[0], torch.zeros(2))
    unskipped = policy_loss(LossInputs(logp, old, adv, mask), LossSettings(loss_type="grpo"))
    assert not unskipped.ratio_skipped.any() and unskipped.loss.item() > out.loss.item()
