"""Our loss against TRL 1.16's `GRPOTrainer._compute_loss` on identical tensors.

TRL computes the loss inside a trainer method; we call that method on a minimal instance whose only stub is the
model forward (it returns the fixed log-probs both implementations see; tests/helpers/trl_loss.py). Everything
downstream is TRL's own code.
"""

import pytest
import torch

from hf_grpo.algorithms import LossInputs, LossSettings, Normalizers, policy_loss
from tests.helpers.trl_loss import TRLLoss, make_inputs


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("eps_high", [0.2, 0.28])
def test_token_level_matches_trl(loss_type, beta, eps_high):
    logp, old, ref, adv, mask = make_inputs()
    trl = TRLLoss(logp, loss_type=loss_type, level="token", beta=beta, eps_low=0.2, eps_high=eps_high, max_len=7)
    inputs = {
        "prompt_ids": torch.zeros(6, 2, dtype=torch.long),
        "prompt_mask": torch.ones(6, 2),
        "completion_ids": torch.zeros(6, 5, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    expected = trl._compute_loss(None, inputs)
    ours = policy_loss(
        LossInputs(logp, old, adv, mask, ref_logp=ref),
        LossSettings(
            epsilon_low=0.2,
            epsilon_high=eps_high,
            loss_type=loss_type,
            beta=beta,
            kl_estimator="k3",
            max_completion_length=7,
        ),
        Normalizers(token_normalizer=mask.sum()),
    )
    assert ours.loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    low = float(trl._metrics["train"]["clip_ratio/low_mean"][0])
    assert float((ours.low_clipped.float() * mask).sum() / mask.sum()) == pytest.approx(low, abs=1e-6)


def test_sequence_level_gspo_matches_trl():
    logp, old, ref, adv, mask = make_inputs(seed=3)
    trl = TRLLoss(logp, loss_type="grpo", level="sequence", beta=0.0, eps_low=3e-4, eps_high=4e-4, max_len=5)
    inputs = {
        "prompt_ids": torch.zeros(6, 2, dtype=torch.long),
        "prompt_mask": torch.ones(6, 2),
        "completion_ids": torch.zeros(6, 5, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
    }
    expected = trl._compute_loss(None, inputs)
    ours = policy_loss(
        LossInputs(logp, old, adv, mask),
        LossSettings(epsilon_low=3e-4, epsilon_high=4e-4, loss_type="grpo", importance_sampling_level="sequence"),
    )
    assert ours.loss.item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_bias_corrected_kl_matches_trl_value_and_gradient(level):
    """TRL's use_bias_correction_kl (its default) on identical tensors: the loss and its gradient."""
    logp, old, ref, adv, mask = make_inputs(seed=5)
    trl_logp = logp.clone().requires_grad_(True)
    trl = TRLLoss(
        trl_logp,
        loss_type="dapo",
        level=level,
        beta=0.1,
        eps_low=0.2,
        eps_high=0.28,
        max_len=5,
        bias_correction_kl=True,
    )
    inputs = {
        "prompt_ids": torch.zeros(6, 2, dtype=torch.long),
        "prompt_mask": torch.ones(6, 2),
        "completion_ids": torch.zeros(6, 5, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    expected = trl._compute_loss(None, inputs)
    expected.backward()
    ours_logp = logp.clone().requires_grad_(True)
    ours = policy_loss(
        LossInputs(ours_logp, old, adv, mask, ref_logp=ref),
        LossSettings(
            epsilon_low=0.2,
            epsilon_high=0.28,
            loss_type="dapo",
            beta=0.1,
            importance_sampling_level=level,
            use_bias_correction_kl=True,
        ),
        Normalizers(token_normalizer=mask.sum()),
    )
    ours.loss.backward()
    assert ours.loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(ours_logp.grad, trl_logp.grad, rtol=1e-5, atol=1e-7)
    plain_logp = logp.clone().requires_grad_(True)
    plain = policy_loss(
        LossInputs(plain_logp, old, adv, mask, ref_logp=ref),
        LossSettings(epsilon_low=0.2, epsilon_high=0.28, loss_type="dapo", beta=0.1, importance_sampling_level=level),
        Normalizers(token_normalizer=mask.sum()),
    )
    plain.loss.backward()
    assert (plain_logp.grad - trl_logp.grad).abs().max() > 1e-4  # the correction changes the gradient here
