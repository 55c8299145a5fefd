"""TRL's sync_ref_model (TR-DPO): the reference after a sync is alpha * policy + (1 - alpha) * reference, computed by
hand and by TRL's own SyncRefModelCallback on identical models; the trainer syncs every ref_model_sync_steps steps.
The ZeRO-3 and FSDP2 paths run in tests/distributed/test_fsdp2.py (one torchrun with the FSDP2 components)."""

import copy

import pytest
import torch
from accelerate import Accelerator
from transformers import TrainerCallback

from hf_grpo import DistributedGRPOTrainer
from hf_grpo.data import load_prompt_dataset
from hf_grpo.models.ref_sync import mix_, sync_reference
from tests.helpers.models import make_tiny_llama
from tests.helpers.rewards import even_token_reward
from tests.helpers.trainers import make_config, make_trainer


def weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_mix_by_hand():
    ref, pol = torch.tensor([1.0, 2.0, -4.0]), torch.tensor([3.0, 0.0, 4.0])
    mix_(ref, pol, 0.25)
    torch.testing.assert_close(ref, torch.tensor([1.5, 1.5, -2.0]))  # 0.25 * pol + 0.75 * ref


@pytest.mark.parametrize("alpha", [0.6, 1.0, 0.0])
def test_sync_matches_the_hand_mix_and_trls_callback(alpha):
    from trl.trainer.callbacks import SyncRefModelCallback as TRLSync

    Accelerator(cpu=True)  # TRL's callback reads the accelerator state
    policy, reference = make_tiny_llama(64, seed=1), make_tiny_llama(64, seed=2)
    before, pol = weights(reference), weights(policy)
    trl_reference = copy.deepcopy(reference)
    sync_reference(policy, reference, alpha)
    TRLSync.sync_target_model(policy, trl_reference, alpha)
    for name, tensor in reference.named_parameters():
        torch.testing.assert_close(tensor, alpha * pol[name] + (1 - alpha) * before[name], msg=name)
        torch.testing.assert_close(tensor, dict(trl_reference.named_parameters())[name], rtol=0, atol=0, msg=name)
    assert weights(policy).keys() == pol.keys() and all(torch.equal(pol[n], p) for n, p in weights(policy).items())


def test_different_architectures_are_an_error():
    with pytest.raises(ValueError, match="different parameters"):
        sync_reference(make_tiny_llama(64), torch.nn.Linear(2, 2), 0.5)


class Snapshots(TrainerCallback):
    """The reference's and the policy's weights after each optimizer step (after the sync callback ran)."""

    def __init__(self, trainer):
        self.trainer, self.seen = trainer, []

    def on_step_end(self, args, state, control, **kwargs):
        self.seen.append((weights(self.trainer.ref_model), weights(self.trainer.model)))


def test_trainer_syncs_every_ref_model_sync_steps(tiny_llama_path, tmp_path):
    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        max_steps=2,
        beta=0.04,
        sync_ref_model=True,
        ref_model_sync_steps=2,
        ref_model_mixup_alpha=0.3,
        learning_rate=0.05,
    )
    initial = weights(trainer.ref_model)
    snapshots = Snapshots(trainer)
    trainer.add_callback(snapshots)
    trainer.train()
    (ref1, pol1), (ref2, pol2) = snapshots.seen
    assert any(not torch.equal(initial[n], pol1[n]) for n in initial), "the policy did not move"
    assert all(torch.equal(initial[n], ref1[n]) for n in initial), "synced before ref_model_sync_steps"
    for name in initial:
        torch.testing.assert_close(ref2[name], 0.3 * pol2[name] + 0.7 * initial[name], msg=name)


def test_refused_where_there_is_no_reference_to_mix_into(tiny_llama_path, tmp_path):
    with pytest.raises(ValueError, match="beta=0 trains without one"):
        make_config(tmp_path, sync_ref_model=True, beta=0.0)
    with pytest.raises(ValueError, match="use_peft the reference is the policy with its adapter disabled"):
        make_config(tmp_path, sync_ref_model=True, beta=0.04, use_peft=True)
    with pytest.raises(ValueError, match="ref_model_mixup_alpha must be in"):
        make_config(tmp_path, ref_model_mixup_alpha=1.5)
    from peft import LoraConfig

    with pytest.raises(ValueError, match="with LoRA .* there is none to mix into"):
        DistributedGRPOTrainer(
            tiny_llama_path,
            [even_token_reward],
            make_config(tmp_path, beta=0.04, sync_ref_model=True),
            load_prompt_dataset("arithmetic:8"),
            peft_config=LoraConfig(r=2, target_modules="all-linear"),
        )
