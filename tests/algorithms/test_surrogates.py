"""TRL's cispo, sapo, luspo and vespo losses, its off-policy sequence mask and its entropy bonus (adaptive too):
hand-computed values, and TRL 1.16's own `GRPOTrainer._compute_loss` / static helpers on identical tensors (loss value
and gradient)."""

import math
from types import SimpleNamespace

import pytest
import torch
from trl import GRPOTrainer

from hf_grpo.algorithms import (
    LossInputs,
    LossSettings,
    Normalizers,
    cispo_per_token,
    off_policy_mask,
    policy_loss,
    sapo_per_token,
    vespo_weights,
)
from hf_grpo.algorithms.entropy_control import EntropyControl, entropy_bonus
from tests.helpers.trl_loss import TRLLoss, make_inputs

PARAMS = dict(
    sapo_temperature_pos=0.9,
    sapo_temperature_neg=1.3,
    vespo_k_pos=2.5,
    vespo_lambda_pos=2.0,
    vespo_k_neg=3.0,
    vespo_lambda_neg=1.5,
)


def trl_loss(logp, loss_type, level, eps_high, extra=None, off_policy=None):
    trl = TRLLoss(logp, loss_type=loss_type, level=level, beta=0.0, eps_low=0.2, eps_high=eps_high, max_len=5)
    trl.args = SimpleNamespace(**vars(trl.args), **PARAMS)
    trl.off_policy_mask_threshold = off_policy
    return trl


def inputs_for(mask, adv, old, **extra):
    return {
        "prompt_ids": torch.zeros(6, 2, dtype=torch.long),
        "prompt_mask": torch.ones(6, 2),
        "completion_ids": torch.zeros(6, 5, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum(),
        **extra,
    }


@pytest.mark.parametrize(
    "loss_type,level,eps_high",
    [
        ("cispo", "token", 5.0),
        ("cispo", "token", 1.1),
        ("cispo", "sequence", 1.05),
        ("sapo", "token", 0.2),
        ("sapo", "sequence", 0.2),
        ("luspo", "sequence", 4e-4),
        ("luspo", "token", 0.28),
        ("vespo", "token", 0.2),
    ],
)
def test_loss_and_gradient_match_trl(loss_type, level, eps_high):
    logp, old, _, adv, mask = make_inputs(seed=7)
    trl_logp = logp.clone().requires_grad_(True)
    trl = trl_loss(trl_logp, loss_type, level, eps_high)
    expected = trl._compute_loss(None, inputs_for(mask, adv, old))
    expected.backward()
    ours_logp = logp.clone().requires_grad_(True)
    ours = policy_loss(
        LossInputs(ours_logp, old, adv, mask),
        LossSettings(
            epsilon_low=0.2, epsilon_high=eps_high, loss_type=loss_type, importance_sampling_level=level, **PARAMS
        ),
        Normalizers(token_normalizer=mask.sum()),
    )
    ours.loss.backward()
    assert ours.loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(ours_logp.grad, trl_logp.grad, rtol=1e-5, atol=1e-7)
    assert trl_logp.grad.abs().max() > 1e-3  # a gradient that could differ
    if loss_type == "cispo":
        clipped = float((ours.cispo_clipped.float() * mask).sum() / mask.sum())
        assert clipped == pytest.approx(trl._metrics["train"]["cispo_clip_ratio"][0], abs=1e-6)
    if loss_type == "vespo":
        assert ours.vespo_phi.mean().item() == pytest.approx(trl._metrics["train"]["vespo/phi_seq_mean"][0], rel=1e-5)


def test_vespo_folds_the_train_inference_ratio_like_trl():
    logp, old, _, adv, mask = make_inputs(seed=11)
    g = torch.Generator().manual_seed(1)
    is_ratio = torch.exp(0.2 * torch.randn(6, 5, generator=g))
    trl_is = torch.where(mask > 0, is_ratio, 1.0)  # TRL: ratio 1 on padding
    expected = GRPOTrainer.get_gamma_weights(
        adv.unsqueeze(1), logp - old, mask, trl_is, k_pos=2.5, lambda_pos=2.0, k_neg=3.0, lambda_neg=1.5
    )
    ours = vespo_weights(
        logp - old, adv.unsqueeze(1), mask, is_ratio * mask, k_pos=2.5, lambda_pos=2.0, k_neg=3.0, lambda_neg=1.5
    )  # hf_grpo: weight 0 on padding
    torch.testing.assert_close(ours, expected)
    assert not torch.allclose(
        ours, vespo_weights(logp - old, adv.unsqueeze(1), mask, k_pos=2.5, lambda_pos=2.0, k_neg=3.0, lambda_neg=1.5)
    )


@pytest.mark.parametrize("threshold", [0.0, 0.05, 0.5])
def test_off_policy_mask_matches_trl_in_the_loss(threshold):
    logp, old, _, adv, mask = make_inputs(seed=3)
    sampling = old + 0.3 * torch.rand(6, 5, generator=torch.Generator().manual_seed(2))
    sampling[0, 1] = float("nan")
    trl_logp = logp.clone().requires_grad_(True)
    trl = trl_loss(trl_logp, "dapo", "token", 0.28, off_policy=threshold)
    expected = trl._compute_loss(None, inputs_for(mask, adv, old, sampling_per_token_logps=sampling))
    ours = policy_loss(
        LossInputs(logp, old, adv, mask, sampling_logp=sampling),
        LossSettings(epsilon_high=0.28, loss_type="dapo", off_policy_threshold=threshold),
        Normalizers(token_normalizer=mask.sum()),
    )
    assert ours.loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    theirs = GRPOTrainer.get_off_policy_mask(adv.unsqueeze(1), logp, sampling, mask, threshold)
    torch.testing.assert_close(ours.off_policy_kept, theirs.squeeze(1))
    assert torch.isfinite(ours.loss)


def test_hand_computed_values():
    # CISPO: ratio 3 capped at 2, ratio 0.5 kept; the value is -sg(w) * A * logp.
    ratio, adv = torch.tensor([[3.0, 0.5]]), torch.tensor([[2.0]])
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss = cispo_per_token(ratio, logp, adv, cap=2.0)
    torch.testing.assert_close(loss, torch.tensor([[4.0, 2.0]]))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-4.0, -1.0]]))  # -min(r, 2) * A
    # SAPO at ratio 1: sigmoid(0) * 4 / tau = 2 / tau; tau_pos=1 for A=1 (-2), tau_neg=2 for A=-1 (+1).
    sapo = sapo_per_token(torch.ones(2, 1), torch.tensor([[1.0], [-1.0]]), 1.0, 2.0)
    torch.testing.assert_close(sapo, torch.tensor([[-2.0], [1.0]]))
    # VESPO: w = 1 gives phi = 1; w = e^(0.5) with k=2, lambda=3: exp(3 + 2*0.5 - 3*e^0.5).
    phi = vespo_weights(torch.tensor([[0.0, 0.0], [0.25, 0.25]]), torch.tensor([[1.0], [1.0]]), torch.ones(2, 2))
    torch.testing.assert_close(phi, torch.tensor([[1.0], [math.exp(4 - 3 * math.exp(0.5))]]))
    # Off-policy mask: mean(sampling - logp) = 0.6 > 0.5 drops the negative-advantage row only.
    kept = off_policy_mask(
        torch.tensor([[1.0], [-1.0], [-1.0]]),
        torch.zeros(3, 2),
        torch.tensor([[0.6, 0.6], [0.6, 0.6], [0.4, 0.4]]),
        torch.ones(3, 2),
        0.5,
    )
    torch.testing.assert_close(kept, torch.tensor([[1.0], [0.0], [1.0]]))
    # LUSPO: per-sequence sums, averaged over sequences (length-weighted), not per-sequence means.
    lp = torch.zeros(2, 3)
    out = policy_loss(
        LossInputs(lp, lp, torch.tensor([1.0, 1.0]), torch.tensor([[1.0, 1, 1], [1, 0, 0]])),
        LossSettings(loss_type="luspo"),
    )
    assert out.loss.item() == pytest.approx(-(3 + 1) / 2)


def test_sapo_needs_positive_temperatures():
    with pytest.raises(ValueError, match="sapo_temperature_pos and sapo_temperature_neg must be > 0"):
        sapo_per_token(torch.ones(1, 1), torch.ones(1, 1), 0.0, 1.0)


class TRLEntropy(TRLLoss):
    """TRL's _compute_loss with its entropy bonus on, fed fixed entropies."""

    def __init__(self, logp, entropy, *, coef, adaptive):
        super().__init__(logp, loss_type="dapo", level="token", beta=0.0, eps_low=0.2, eps_high=0.28, max_len=5)
        self._entropy = entropy
        self.entropy_coef, self.use_adaptive_entropy, self._entropy_bonus_enabled = coef, adaptive, True
        self._last_world_entropy, self._entropy_window_stats = float("inf"), None
        self.args = SimpleNamespace(
            **vars(self.args), entropy_target=1.0, entropy_coef_delta=0.05, entropy_coef_min=0.0, entropy_coef_max=0.12
        )

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        return self._logp, self._entropy, None


@pytest.mark.parametrize("adaptive", [False, True])
def test_entropy_bonus_and_adaptive_coefficient_match_trl(adaptive):
    """Five optimizer steps whose entropies cross the target: TRL's loss and coefficient after every step, ours."""
    logp, old, _, adv, mask = make_inputs(seed=13)
    ours = EntropyControl(0.1, adaptive, coef_min=0.0, coef_max=0.12, delta=0.05, target=1.0)
    trl = None
    for level in (0.5, 0.8, 1.5, 0.9, 2.0):
        entropy = level * torch.rand(6, 5, generator=torch.Generator().manual_seed(int(level * 10)))
        if trl is None:
            trl = TRLEntropy(logp, entropy, coef=0.1, adaptive=adaptive)
        trl._entropy = entropy
        expected = trl._compute_loss(None, inputs_for(mask, adv, old))
        policy = policy_loss(
            LossInputs(logp, old, adv, mask),
            LossSettings(epsilon_high=0.28, loss_type="dapo"),
            Normalizers(token_normalizer=mask.sum()),
        ).loss
        loss = policy - ours.applied() * entropy_bonus(entropy, mask)
        ours.update(((entropy * mask).sum() / mask.sum()).item())
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
        assert ours.coef == pytest.approx(trl.entropy_coef)
    assert trl._metrics["train"]["entropy_coef"][-1] == pytest.approx(ours.coef)
