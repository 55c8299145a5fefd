"""TRL 1.16's `GRPOTrainer._compute_loss` on given tensors: a minimal trainer instance whose only stub is the model
forward (it returns the fixed log-probs both implementations see), and random loss inputs."""

from collections import defaultdict
from types import SimpleNamespace

import torch
from accelerate import Accelerator
from trl import GRPOTrainer


class TRLLoss(GRPOTrainer):
    def __init__(self, logp, *, loss_type, level, beta, eps_low, eps_high, max_len, bias_correction_kl=False):
        self._logp = logp
        self.loss_type, self.importance_sampling_level, self.beta = loss_type, level, beta
        self.epsilon_low, self.epsilon_high, self.max_completion_length = eps_low, eps_high, max_len
        self.top_entropy_quantile, self.off_policy_mask_threshold = 1.0, None
        self.use_vllm, self.vllm_importance_sampling_correction = False, False
        self.aux_loss_enabled, self._entropy_bonus_enabled = False, False
        self.current_gradient_accumulation_steps = 1
        self.args = SimpleNamespace(use_bias_correction_kl=bias_correction_kl, delta=None, steps_per_generation=1)
        self.model = torch.nn.Linear(1, 1)  # only .training is read
        self.accelerator = Accelerator(cpu=True)
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        return self._logp, torch.zeros_like(self._logp), None


def make_inputs(B=6, T=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g) * 3
    old = logp + 0.3 * torch.randn(B, T, generator=g)
    ref = logp + 0.2 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.25).float()
    mask[:, 0] = 1
    return logp, old, ref, adv, mask
