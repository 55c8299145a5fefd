import pytest
import torch

from hf_grpo.logprobs import completion_logprobs
from tests.conftest import make_tiny_llama


def reference(model, input_ids, attention_mask, C, temperature):
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -C - 1:-1].float() / temperature
    logp = torch.log_softmax(logits, -1)                                   # [B, C, V]
    target = logp.gather(-1, input_ids[:, -C:].unsqueeze(-1)).squeeze(-1)  # [B, C]
    entropy = -(logp.exp() * logp).sum(-1)
    return target, entropy


@pytest.mark.parametrize("chunk_size", [1, 5, 4096])
def test_chunked_logprobs_match_full_logits_and_gradients(chunk_size):
    model = make_tiny_llama(97)
    input_ids = torch.randint(3, 97, (3, 11))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :4] = 0                    # a left-padded prompt
    ref_logp, ref_ent = reference(model, input_ids, attention_mask, 6, 0.7)
    ref_logp.sum().backward()
    ref_grad = model.model.layers[0].mlp.up_proj.weight.grad.clone()
    model.zero_grad()
    logp, ent = completion_logprobs(model, model.get_output_embeddings(), input_ids, attention_mask, 6,
                                    temperature=0.7, chunk_size=chunk_size)
    assert torch.allclose(logp, ref_logp, atol=1e-5)
    assert torch.allclose(ent, ref_ent, atol=1e-4)
    logp.sum().backward()
    assert torch.allclose(model.model.layers[0].mlp.up_proj.weight.grad, ref_grad, atol=1e-5)


def test_no_full_vocab_logits_are_kept_for_backward():
    """With chunking, the autograd graph holds no [B, C, V] tensor: saved activations stay far below it."""
    V = 4000
    model = make_tiny_llama(V)
    input_ids = torch.randint(3, V, (8, 64))
    attention_mask = torch.ones_like(input_ids)
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _ = completion_logprobs(model, model.get_output_embeddings(), input_ids, attention_mask, 48,
                                      chunk_size=32)
    full = 8 * 48 * V
    assert max(saved) < full / 4, f"largest saved tensor {max(saved)} vs full logits {full}"
