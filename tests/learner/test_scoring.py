"""`PolicyScorer`: which log-prob path a run takes, and that both paths agree under mixed precision."""

import torch

from tests.helpers.trainers import make_trainer


def test_both_log_prob_paths_agree_under_bf16_mixed_precision(tiny_llama_path, tmp_path):
    """float32 weights, bf16 autocast (accelerate's, around the model's forward): the chunked head runs in the same
    autocast region as the model's own head, so the two paths give the same log-probs and the start-up check keeps the
    chunked path. Run outside it, the chunked head gave float32 logits against the model's bf16 ones, the check failed
    on the embedded model and the run fell back to full [B, C, V] logits."""
    trainer = make_trainer(tiny_llama_path, tmp_path, bf16=True, max_steps=1)
    trainer.train()  # prepares the model (its forward now runs under autocast) and chooses the path
    scorer, model = trainer.scorer, trainer.model_wrapped
    assert scorer.chunked is True
    ids = torch.randint(3, 1000, (2, 20), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        chunked = scorer.logprobs(model, inputs, 12, temperature=0.7)[0]  # [2, 12]
        scorer.chunked = False
        own = scorer.logprobs(model, inputs, 12, temperature=0.7)[0]  # [2, 12]
    torch.testing.assert_close(chunked, own, atol=1e-5, rtol=0)
