import pytest
import torch

from hf_grpo.learner.logprobs import Readout, completion_logprobs
from tests.helpers.models import make_tiny_llama


def reference(model, input_ids, attention_mask, C, temperature):
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -C - 1 : -1].float() / temperature
    logp = torch.log_softmax(logits, -1)  # [B, C, V]
    target = logp.gather(-1, input_ids[:, -C:].unsqueeze(-1)).squeeze(-1)  # [B, C]
    entropy = -(logp.exp() * logp).sum(-1)
    return target, entropy


@pytest.mark.parametrize("chunk_size", [1, 5, 4096, None])
def test_chunked_logprobs_match_full_logits_and_gradients(chunk_size):
    model = make_tiny_llama(97)
    input_ids = torch.randint(3, 97, (3, 11))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :4] = 0  # a left-padded prompt
    ref_logp, ref_ent = reference(model, input_ids, attention_mask, 6, 0.7)
    ref_logp.sum().backward()
    ref_grad = model.model.layers[0].mlp.up_proj.weight.grad.clone()
    model.zero_grad()
    logp, ent = completion_logprobs(
        model,
        model.get_output_embeddings(),
        {"input_ids": input_ids, "attention_mask": attention_mask},
        6,
        Readout(temperature=0.7, chunk_size=chunk_size),
    )
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
        logp, _ = completion_logprobs(
            model,
            model.get_output_embeddings(),
            {"input_ids": input_ids, "attention_mask": attention_mask},
            48,
            Readout(chunk_size=32),
        )
    full = 8 * 48 * V
    assert max(saved) < full / 4, f"largest saved tensor {max(saved)} vs full logits {full}"


def test_default_chunks_hold_a_fixed_budget_of_logits_whatever_the_vocabulary():
    """None sizes chunks by 64 MiB of float32 logits, in multiples of 64 positions; an explicit count is kept."""
    assert Readout().rows(49152) == 320  # SmolLM2: 64 MiB / (4 B * 49152) = 341.3 -> 320
    assert Readout().rows(151936) == 64  # Qwen2.5: 110.4 -> 64
    assert Readout().rows(262144) == 64  # Gemma-3: 64 -> 64
    assert Readout().rows(2_000_000) == 64  # never fewer than one multiple
    assert Readout().rows(1000) == 16768  # 16777.2 -> 16768
    assert Readout(chunk_size=1024).rows(151936) == 1024


def tiny_family_model(family: str):
    """A tiny random model of a family whose logits are not plain ``lm_head(hidden)``."""
    import transformers

    common = dict(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
    )
    config_cls, model_cls, extra = {
        "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(final_logit_softcapping=0.1)),
        "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(final_logit_softcapping=0.1)),
        "cohere": ("CohereConfig", "CohereForCausalLM", dict(logit_scale=3.0)),
        "granite": ("GraniteConfig", "GraniteForCausalLM", dict(logits_scaling=0.25)),
    }[family]
    torch.manual_seed(0)
    return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**common, **extra)).eval()


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "cohere", "granite"])
def test_logit_transforms_of_each_family_are_applied(family):
    from hf_grpo.learner.logprobs import LogitTransform, chunked_path_matches

    model = tiny_family_model(family)
    input_ids = torch.randint(3, 97, (2, 9))
    attention_mask = torch.ones_like(input_ids)
    expected, _ = reference(model, input_ids, attention_mask, 5, 1.0)
    transform = LogitTransform.from_config(model.config)
    plain, _ = completion_logprobs(
        model, model.get_output_embeddings(), {"input_ids": input_ids, "attention_mask": attention_mask}, 5
    )
    assert (plain - expected).abs().max() > 1e-3, "this family's transform should matter on these inputs"
    ours, _ = completion_logprobs(
        model,
        model.get_output_embeddings(),
        {"input_ids": input_ids, "attention_mask": attention_mask},
        5,
        Readout(transform=transform, chunk_size=3),
    )
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)
    own, _ = completion_logprobs(
        model, None, {"input_ids": input_ids, "attention_mask": attention_mask}, 5, Readout(chunk_size=3)
    )  # the model path
    torch.testing.assert_close(own, expected, atol=1e-5, rtol=0)
    assert chunked_path_matches(model, model.get_output_embeddings(), transform, input_ids, attention_mask, 5, 1e-4)[0]
    assert not chunked_path_matches(
        model, model.get_output_embeddings(), LogitTransform(), input_ids, attention_mask, 5, 1e-4
    )[0]


def test_bf16_model_under_bf16_autocast_gets_float32_hidden_states():
    """accelerate's mixed precision hands back float32 hidden states while a bf16 model's head is bf16: the chunked
    path casts them (it crashed with `expected mat1 and mat2 to have the same dtype`)."""
    model = make_tiny_llama(97).to(torch.bfloat16)
    input_ids = torch.randint(3, 97, (2, 9))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=input_ids, output_hidden_states=True)
    hidden = out.hidden_states[-1].float()[:, -6:-1]  # what accelerate returns
    from hf_grpo.learner.logprobs import LogitTransform, _head_logprobs

    logp, _ = _head_logprobs(
        model.get_output_embeddings(),
        LogitTransform(),
        None,
        hidden.reshape(-1, hidden.shape[-1]),
        input_ids[:, -5:].reshape(-1),
        1.0,
        False,
    )
    assert logp.dtype == torch.float32 and torch.isfinite(logp).all()


# ---- sampling filters: the trainer truncates as vLLM does -----------------------------------------------------------
def vllm_kept(logits, top_k, top_p, min_p):
    """The tokens vLLM 0.32 can sample: its min_p rule (MinPLogitsProcessor) then its own top-k/top-p function."""
    pytest.importorskip("vllm", reason="compares with vLLM's own sampler code (`make test-latest` has no vLLM)")
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    logits = logits.clone()
    if min_p > 0:
        probs = logits.softmax(-1)
        logits[probs < min_p * probs.amax(-1, keepdim=True)] = float("-inf")
    c = logits.shape[0]
    k = torch.full((c,), top_k, dtype=torch.long) if top_k else None
    p = torch.full((c,), top_p) if top_p < 1 else None
    return torch.isfinite(apply_top_k_top_p_pytorch(logits, k, p))


@pytest.mark.parametrize("top_k,top_p,min_p", [(5, 1.0, 0.0), (0, 0.8, 0.0), (0, 1.0, 0.1), (20, 0.9, 0.02)])
def test_sampling_filters_keep_what_vllm_keeps(top_k, top_p, min_p):
    from hf_grpo.learner.logprobs import SamplingFilters

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 300, generator=g) * 3  # [c, V]
    expected = vllm_kept(logits, top_k, top_p, min_p)  # [c, V]
    targets = logits.argmax(-1)  # always kept by both
    kept = SamplingFilters(top_k=top_k, top_p=top_p, min_p=min_p).kept(logits, targets)
    assert torch.equal(kept, expected)
    assert 0 < kept.sum() < kept.numel()


def test_filtered_logprobs_are_renormalised_over_the_kept_tokens_and_keep_the_target():
    from hf_grpo.learner.logprobs import SamplingFilters, _logits_logprobs

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top2 = SamplingFilters(top_k=2)
    logp, entropy = _logits_logprobs(top2, logits, torch.tensor([1]), 1.0, True)
    assert logp.item() == pytest.approx(torch.log(torch.tensor(0.3 / 0.8)).item(), abs=1e-6)
    assert entropy.item() == pytest.approx(
        -(0.625 * torch.log(torch.tensor(0.625)) + 0.375 * torch.log(torch.tensor(0.375))).item(), abs=1e-6
    )
    # A sampled token outside the trainer's kept set (a near-tie vLLM broke the other way) keeps a finite log-prob.
    logp, _ = _logits_logprobs(top2, logits, torch.tensor([3]), 1.0, False)
    assert logp.item() == pytest.approx(torch.log(torch.tensor(0.05 / 0.85)).item(), abs=1e-6)
    # top_p = 0.7: 0.05 + 0.15 <= 0.3 are dropped, 0.3 is kept (vLLM's rule: drop while the ascending mass <= 1 - p).
    logp, _ = _logits_logprobs(SamplingFilters(top_p=0.7), logits, torch.tensor([0]), 1.0, False)
    assert logp.item() == pytest.approx(torch.log(torch.tensor(0.5 / 0.8)).item(), abs=1e-6)


def test_filtered_logprobs_through_the_model_and_their_gradients():
    from hf_grpo.learner.logprobs import SamplingFilters

    model = make_tiny_llama(97)
    input_ids = torch.randint(3, 97, (2, 9))
    mask = torch.ones_like(input_ids)
    filters = SamplingFilters(top_k=10, top_p=0.9)
    chunked, _ = completion_logprobs(
        model,
        model.get_output_embeddings(),
        {"input_ids": input_ids, "attention_mask": mask},
        4,
        Readout(temperature=0.7, filters=filters, chunk_size=3),
    )
    own, _ = completion_logprobs(
        model, None, {"input_ids": input_ids, "attention_mask": mask}, 4, Readout(temperature=0.7, filters=filters)
    )
    plain, _ = completion_logprobs(
        model, None, {"input_ids": input_ids, "attention_mask": mask}, 4, Readout(temperature=0.7)
    )
    torch.testing.assert_close(chunked, own, atol=1e-5, rtol=0)
    assert torch.isfinite(chunked).all() and (chunked >= plain - 1e-6).all()  # renormalised: never below
    assert (chunked - plain).abs().max() > 1e-3
    chunked.sum().backward()
    assert torch.isfinite(model.model.layers[0].mlp.up_proj.weight.grad).all()
