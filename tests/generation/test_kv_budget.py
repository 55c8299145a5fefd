"""The colocated engine's KV cache on CPU: sized for one generation round unless vllm_kv_cache_gib is set."""

from types import SimpleNamespace

from transformers import LlamaConfig

from hf_grpo.generation.kv_budget import kv_bytes_per_token, kv_cache_bytes, round_kv_bytes

SMOL = LlamaConfig(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576)


def args(**kw):
    base = dict(per_device_train_batch_size=32, steps_per_generation=1, engine_dtype="bfloat16", vllm_kv_cache_gib=None)
    return SimpleNamespace(**{**base, **kw})


def test_bytes_per_token_counts_k_and_v_of_every_layer_and_kv_head():
    # 2 (K, V) x 30 layers x 3 kv heads x 64 dims x 2 bytes
    assert kv_bytes_per_token(SMOL, 2) == 2 * 30 * 3 * 64 * 2 == 23040


def test_round_budget_for_the_quickstart_shape_is_a_tenth_of_the_old_fixed_gib():
    # 32 sequences x 640 tokens (560 rounded up to 128-token blocks) x 23040 bytes x 1.1
    assert round_kv_bytes(args(), SMOL, max_model_len=560) == int(32 * 640 * 23040 * 1.1)
    assert round_kv_bytes(args(), SMOL, max_model_len=560) < 0.5 * 2**30
    # steps_per_generation micro-batches share one round; float32 engines take twice the bytes
    assert round_kv_bytes(args(steps_per_generation=4, engine_dtype="float32"), SMOL, 560) == int(
        4 * 32 * 640 * 23040 * 2 * 1.1
    )


def test_an_explicit_size_wins(tiny_llama_path):
    assert kv_cache_bytes(args(vllm_kv_cache_gib=0.25), tiny_llama_path, 512) == 2**28
    assert kv_cache_bytes(args(), tiny_llama_path, 512) > 0
