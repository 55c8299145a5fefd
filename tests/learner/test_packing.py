"""Sequence packing (hf_grpo.learner.packing): the layout round-trips, packed log-probs equal padded ones on the tiny
Llama (block mask on sdpa and eager, and the position-ids-only single row that flash attention gets), attention never
crosses a sequence boundary, and a training step with packing gives the padded step's loss and weights, with gradient
accumulation, a reference model, reused rounds and two processes."""

import math

import pytest
import torch

from hf_grpo import GRPOConfig
from hf_grpo.learner.batching import balance_by_tokens, collate, collate_packed, split_microbatches
from hf_grpo.learner.logprobs import completion_logprobs, packed_completion_logprobs
from hf_grpo.learner.packing import block_causal_mask, first_fit_decreasing, first_sequence, model_inputs, pack, unpack
from tests.helpers.models import make_tiny_llama
from tests.helpers.trainers import make_trainer, params

VOCAB = 300


def random_samples(n: int, seed: int = 1, max_prompt: int = 9, max_completion: int = 7) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    samples = []
    for i in range(n):
        p = int(torch.randint(1, max_prompt, (1,), generator=g))
        c = int(torch.randint(0, max_completion, (1,), generator=g))
        samples.append(
            {
                "prompt_ids": torch.randint(3, VOCAB, (p,), generator=g).tolist(),
                "completion_ids": torch.randint(3, VOCAB, (c,), generator=g).tolist(),
                "completion_mask": torch.ones(c),
                "advantage": 1.0,
                "index": i,
            }
        )
    return samples


@pytest.fixture(scope="module")
def tiny():
    model = make_tiny_llama(VOCAB)
    model.eval()
    return model


# ---- pure layout -------------------------------------------------------------------------------------------------
def test_first_fit_decreasing_fills_rows_within_capacity_and_refuses_a_too_long_sequence():
    lengths = [5, 9, 3, 7, 1, 4, 10]
    rows = first_fit_decreasing(lengths, 10)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 10 for row in rows)
    assert len(rows) == math.ceil(sum(lengths) / 10)  # 39 tokens: 4 rows is optimal and FFD finds it
    with pytest.raises(ValueError, match="sequence 1 has 11 .* max_tokens_per_microbatch=10"):
        first_fit_decreasing([3, 11], 10)


@pytest.mark.parametrize("one_row", [False, True])
def test_pack_round_trip(one_row):
    samples = random_samples(9)
    prompts = [s["prompt_ids"] for s in samples]
    completions = [s["completion_ids"] for s in samples]
    packed = pack(prompts, completions, capacity=16, pad_id=0, one_row=one_row)
    ids, pos, index = packed["input_ids"], packed["position_ids"], packed["completion_index"]
    assert ids.shape[0] == (1 if one_row else int(packed["packed_rows"])) and (one_row or ids.shape[1] <= 16)
    flat_ids, flat_pos = ids.reshape(-1), pos.reshape(-1)
    for b, (p, c) in enumerate(zip(prompts, completions)):
        n = int((index[b] >= 0).sum())
        assert n == len(c)
        if c:
            # The predicting positions are consecutive; the targets one further on are the completion.
            assert flat_ids[index[b, :n] + 1].tolist() == c
            end = int(index[b, n - 1]) + 2
            start = end - len(p) - len(c)
            assert flat_ids[start:end].tolist() == p + c
            assert flat_pos[start:end].tolist() == list(range(len(p) + len(c)))  # restart at 0 per sequence
    values = torch.arange(int((index >= 0).sum()), dtype=torch.float32)
    back = unpack(values, index)  # [B, C]
    assert back[index >= 0].tolist() == values.tolist() and (back[index < 0] == 0).all()
    real = sum(len(p) + len(c) for p, c in zip(prompts, completions))
    assert real <= ids.numel() and (not one_row or ids.numel() == real)


def test_an_empty_prompt_is_refused():
    with pytest.raises(ValueError, match="sample 1 has an empty prompt"):
        pack([[5], []], [[6], [7]], capacity=8, pad_id=0)


def test_balance_by_tokens_and_the_packed_split_keeps_each_steps_samples():
    samples = random_samples(16, seed=3)
    groups = balance_by_tokens(samples, 4)
    loads = [sum(len(s["prompt_ids"]) + len(s["completion_ids"]) for s in g) for g in groups]
    longest = max(len(s["prompt_ids"]) + len(s["completion_ids"]) for s in samples)
    assert sorted(s["index"] for g in groups for s in g) == list(range(16))
    assert max(loads) - min(loads) <= longest  # greedy LPT bound
    by_count, tokens_a, _ = split_microbatches(samples, 4, 2)
    by_tokens, tokens_b, _ = split_microbatches(samples, 4, 2, balance_tokens=True)
    assert tokens_a == tokens_b  # the normalisers do not depend on the split
    for step in range(2):
        assert {s["index"] for m in by_count[2 * step : 2 * step + 2] for s in m} == {
            s["index"] for m in by_tokens[2 * step : 2 * step + 2] for s in m
        }


def test_config_refuses_a_budget_below_the_longest_sequence(tmp_path):
    with pytest.raises(ValueError, match=r"max_tokens_per_microbatch \(100\) must be >= .* \(524\)"):
        GRPOConfig(
            output_dir=str(tmp_path),
            max_tokens_per_microbatch=100,
            max_prompt_length=512,
            max_completion_length=12,
            use_cpu=True,
        ).validate()


# ---- on the tiny Llama ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("attn", ["sdpa", "eager", "flash_attention_2"])
@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "model-head"])
@pytest.mark.parametrize("capacity", [16, 200])
def test_packed_logprobs_equal_padded_logprobs(tiny, attn, chunked, capacity):
    """``flash_attention_2`` here means its input form (one row, position ids only, no mask) run by sdpa, whose mask
    transformers then derives from the position-id restarts as flash attention derives cu_seqlens."""
    samples = random_samples(10)
    tiny.config._attn_implementation = "eager" if attn == "eager" else "sdpa"
    head = tiny.get_output_embeddings() if chunked else None
    padded = collate(samples, pad_id=0)
    packed = collate_packed(samples, 0, capacity, one_row=attn == "flash_attention_2")
    inputs = model_inputs(packed, torch.device("cpu"), attn, torch.float32)
    assert ("attention_mask" in inputs) == (attn != "flash_attention_2")
    with torch.no_grad():
        want, want_entropy = completion_logprobs(
            tiny,
            head,
            {"input_ids": padded.input_ids, "attention_mask": padded.attention_mask},
            padded.completion_mask.shape[1],
        )
        got, got_entropy = packed_completion_logprobs(tiny, head, inputs)
    mask = padded.completion_mask.bool()  # [B, C]
    assert got.shape == want.shape and mask.sum() > 20
    torch.testing.assert_close(got[mask], want[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(got_entropy[mask], want_entropy[mask], atol=1e-5, rtol=0)
    tiny.config._attn_implementation = "sdpa"


def test_packed_gradients_equal_padded_gradients(tiny):
    samples = random_samples(8, seed=5)
    padded = collate(samples, pad_id=0)
    packed = collate_packed(samples, 0, 16, one_row=False)
    mask = padded.completion_mask  # [B, C]
    grads = []
    for logp_fn in (
        lambda: completion_logprobs(
            tiny, None, {"input_ids": padded.input_ids, "attention_mask": padded.attention_mask}, mask.shape[1]
        )[0],
        lambda: packed_completion_logprobs(tiny, None, model_inputs(packed, "cpu", "sdpa", torch.float32))[0],
    ):
        tiny.zero_grad()
        ((logp_fn() * mask).sum() / mask.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in tiny.named_parameters()})
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("attn", ["sdpa", "eager", "flash_attention_2"])
def test_attention_never_crosses_a_sequence_boundary(tiny, attn):
    """Changing sequence A's tokens leaves sequence B's log-probs (same row, after A) unchanged; without the block
    mask (plain causal attention over the row) they change, so the check can fail."""
    tiny.config._attn_implementation = "eager" if attn == "eager" else "sdpa"
    a, b = [5, 6, 7, 8, 9], [10, 11, 12, 13]
    results = []
    for tokens in (a, [t + 100 for t in a]):
        samples = [
            {"prompt_ids": ids[:2], "completion_ids": ids[2:], "completion_mask": torch.ones(len(ids) - 2)}
            | {"advantage": 1.0, "index": i}
            for i, ids in enumerate((tokens, b))
        ]
        packed = collate_packed(samples, 0, 32, one_row=attn == "flash_attention_2")
        assert packed.input_ids.shape[0] == 1  # both in one row
        inputs = model_inputs(packed, "cpu", attn, torch.float32)
        with torch.no_grad():
            logp, _ = packed_completion_logprobs(tiny, None, inputs)  # [2, C]
            causal = {k: v for k, v in inputs.items() if k != "attention_mask"}
            causal["position_ids"] = torch.arange(inputs["input_ids"].shape[1]).unsqueeze(0)
            leaky, _ = packed_completion_logprobs(tiny, None, causal)
        results.append((logp, leaky))
    (first, first_leaky), (second, second_leaky) = results
    row_b = 0 if packed.completion_index[0, 0] > packed.completion_index[1, 0] else 1
    assert not torch.allclose(first[1 - row_b], second[1 - row_b])  # A itself did change
    assert torch.equal(first[row_b], second[row_b])
    assert not torch.allclose(first_leaky[row_b], second_leaky[row_b])
    tiny.config._attn_implementation = "sdpa"


def test_block_mask_forms():
    pos = torch.tensor([[0, 1, 2, 0, 1, 0]])  # [1, 6]
    allowed = block_causal_mask(pos, "sdpa", torch.float32)  # [1, 1, 6, 6]
    assert allowed.dtype == torch.bool and allowed.shape == (1, 1, 6, 6)
    assert allowed[0, 0, 4].tolist() == [False, False, False, True, True, False]
    additive = block_causal_mask(pos, "eager", torch.float32)
    assert additive[0, 0, 4, 3] == 0 and additive[0, 0, 4, 2] == torch.finfo(torch.float32).min
    packed = pack([[5, 6], [7]], [[8], [9, 10]], capacity=8, pad_id=0)
    ids, completion = first_sequence(packed)
    assert completion in (1, 2) and ids["input_ids"].shape[1] == 3


# ---- training ---------------------------------------------------------------------------------------------------
def train_once(tiny_llama_path, tmp_path, **overrides):
    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        max_steps=overrides.pop("max_steps", 1),
        optim="sgd",
        learning_rate=1.0,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_generations=4,
        max_prompt_length=64,
        **overrides,
    )
    buffers = []
    generate = trainer._generate_and_score
    trainer._generate_and_score = lambda rows: buffers.append(generate(rows)) or buffers[-1]  # observe rounds
    trainer.train()
    return trainer, buffers


@pytest.mark.parametrize(
    "overrides",
    [
        # dapo on a round that feeds two optimizer steps: its packed run also shows each step's own token count
        dict(loss_type="dapo", steps_per_generation=4, max_steps=2, skip_zero_advantage=False),
        dict(loss_type="grpo", beta=0.04, skip_zero_advantage=False),
        dict(loss_type="bnpo", steps_per_generation=4, max_steps=2),
        dict(loss_type="dr_grpo", steps_per_generation=4, num_iterations=2, max_steps=2),
    ],
    ids=["dapo", "grpo+ref", "bnpo-reused-round", "dr_grpo-2-iterations"],
)
def test_a_packed_training_step_equals_the_padded_one(tiny_llama_path, tmp_path, overrides):
    """Same samples, same seed: padded micro-batches of 4 vs two token-balanced packed micro-batches per optimizer
    step (rows of at most 160 tokens, ~65 per sequence): the same loss and, with SGD at lr 1 (which passes any
    normalisation error straight into the weights), the same weights. With dapo, each packed micro-batch's normaliser
    x accumulation steps = all active tokens of its optimizer step, although packed micro-batches hold different
    numbers of samples."""
    runs = {}
    for budget in (None, 160):
        trainer, buffers = train_once(
            tiny_llama_path, tmp_path / str(budget), max_tokens_per_microbatch=budget, **overrides
        )
        runs[budget] = params(trainer.model), [r for r in trainer.state.log_history if "loss" in r], buffers
    (padded_w, padded_logs, padded_buffers), (packed_w, packed_logs, buffers) = runs[None], runs[160]
    micro = [m for round_ in buffers for m in round_]
    assert all(m.packed for m in micro)
    assert any(m.input_ids.shape[0] > 1 for m in micro)  # several rows
    assert any(
        m.input_ids.shape[1] < 160 and m.completion_mask.shape[0] > m.input_ids.shape[0] for m in micro
    )  # several per row
    for a, b in zip(padded_logs, packed_logs):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    # Round metrics: both paths' padding fractions describe the same real tokens in their own input slots.
    slots = [sum(m.input_ids.numel() for m in run[0]) for run in (padded_buffers, buffers)]
    fractions = [padded_logs[0]["packing/padding_fraction"], packed_logs[0]["packing/padding_fraction"]]
    assert (1 - fractions[0]) * slots[0] == pytest.approx((1 - fractions[1]) * slots[1])
    assert 0.5 < packed_logs[0]["packing/packed_ratio"] <= 1 and "packing/packed_ratio" not in padded_logs[0]
    moved = max(float((packed_w[n] - p).abs().max()) for n, p in params(make_tiny_reference(tiny_llama_path)).items())
    assert moved > 1e-3
    for name, w in padded_w.items():
        torch.testing.assert_close(packed_w[name], w, atol=2e-5, rtol=1e-4, msg=name)
    if overrides["loss_type"] == "dapo":  # the normaliser: the step's global token count, whatever the packing
        micro = buffers[0]
        for step in range(2):
            pair = micro[2 * step : 2 * step + 2]
            tokens = sum(float(m.completion_mask.sum()) for m in pair)
            assert all(m.normalizers.token_normalizer * 2 == pytest.approx(tokens) for m in pair)
        assert len(micro) == 4


def make_tiny_reference(path):
    from hf_grpo.models import load_model

    return load_model(path)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_with_accumulation_packed_equals_padded(tiny_llama_path, tmp_path):
    """2 DDP processes x 2 accumulation steps: the packed update equals the padded one for the global-token (dapo)
    and per-sequence (grpo) normalisers."""
    from tests.helpers.launch import launch, results

    runs = [
        {"config": {"loss_type": loss, "max_tokens_per_microbatch": budget}}
        for loss in ("dapo", "grpo")
        for budget in (None, 160)
    ]
    spec = {
        "fixed_completions": True,
        "runs": runs,
        "config": {
            "optim": "sgd",
            "learning_rate": 0.5,
            "lr_scheduler_type": "constant",
            "max_grad_norm": 0.0,
            "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 2,
            "max_prompt_length": 64,
            "max_completion_length": 10,
            "log_completions_steps": 0,
        },
    }
    launch("ddp", tiny_llama_path, tmp_path, spec, num_processes=2, mixed_precision="no")
    initial = params(make_tiny_reference(tiny_llama_path))
    for k in (0, 2):
        padded, packed = results(tmp_path, run=k)[0]["weights"], results(tmp_path, run=k + 1)[0]["weights"]
        assert max(float((padded[n] - initial[n]).abs().max()) for n in initial) > 1e-3
        for name, w in padded.items():
            torch.testing.assert_close(
                packed[name], w, atol=2e-5, rtol=1e-4, msg=f"{runs[k]['config']['loss_type']} {name}"
            )
        logs = [r for r in results(tmp_path, run=k + 1)[0]["log"] if "loss" in r]
        assert logs and all(0 < r["packing/packed_ratio"] <= 1 for r in logs)


def test_a_micro_batch_without_completion_tokens_still_has_a_graph(tiny):
    """DDP and gradient accumulation expect every micro-batch to run a forward and a backward."""
    empty = [{"prompt_ids": p, "completion_ids": [], "completion_mask": torch.ones(0)} for p in ([5, 6], [7])]
    packed = collate_packed([s | {"advantage": 0.0, "index": i} for i, s in enumerate(empty)], 0, 8, one_row=False)
    for head in (None, tiny.get_output_embeddings()):
        logp, _ = packed_completion_logprobs(tiny, head, model_inputs(packed, "cpu", "sdpa", torch.float32))
        assert logp.shape == (2, 1) and (logp == 0).all() and logp.requires_grad
        logp.sum().backward()
