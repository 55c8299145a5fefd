"""How much host memory a colocated vLLM engine on CPU gets for its KV cache (``vllm_kv_cache_gib``).

vLLM on CPU reserves the whole KV cache up front (``kv_cache_memory_bytes``) inside the training process. A fixed
size is either too small for a large generation round (vLLM then queues sequences: slower, never wrong) or, more
often on this machine, several times what a round can use: 1 GiB for the quickstart's 32 completions of 48 tokens,
which fill 88 MiB. ``vllm_kv_cache_gib: null`` (the default) sizes it for one generation round of this process:
every sequence of the round at ``max_model_len`` tokens, rounded up to vLLM's blocks, plus 10%. Prefix sharing
between a prompt's ``n`` samples is not counted, so the estimate is an upper bound. TRL has no CPU equivalent (its
``vllm_gpu_memory_utilization`` is a fraction of GPU memory).
"""

from __future__ import annotations

import math

BLOCK_TOKENS = 128  # the CPU backend's default block size (vLLM rounds each sequence up to whole blocks)
MARGIN = 1.1
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def kv_bytes_per_token(config, dtype_bytes: int) -> int:
    """Bytes of K and V that one token occupies over all layers, from a transformers model config."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * dtype_bytes


def round_sequences(args) -> int:
    """Completions one process asks its engine for in one generation round."""
    return args.per_device_train_batch_size * args.steps_per_generation


def round_kv_bytes(args, config, max_model_len: int) -> int:
    """One generation round's KV cache: every sequence at ``max_model_len`` tokens in whole blocks, plus 10%."""
    tokens = math.ceil(max_model_len / BLOCK_TOKENS) * BLOCK_TOKENS  # per sequence
    dtype_bytes = DTYPE_BYTES.get(args.engine_dtype, 4)  # an unknown dtype counts as float32: an upper bound
    return int(round_sequences(args) * tokens * kv_bytes_per_token(config, dtype_bytes) * MARGIN)


def kv_cache_bytes(args, model_path: str, max_model_len: int) -> int:
    """``vllm_kv_cache_gib`` in bytes when set, else `round_kv_bytes` for the model at ``model_path``."""
    if args.vllm_kv_cache_gib is not None:
        return int(args.vllm_kv_cache_gib * (1 << 30))
    from transformers import AutoConfig

    return round_kv_bytes(args, AutoConfig.from_pretrained(model_path), max_model_len)
