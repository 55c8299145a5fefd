"""Tiny random-init models built offline: a Llama causal LM (in memory or saved with a tokenizer, loadable by path
like a hub model) and a Llama sequence classifier to stand in for a reward model."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification


def make_tiny_llama(vocab_size: int, seed: int = 0, head_dim: int = 8) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    heads = 4 if head_dim == 8 else 2
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=heads * head_dim,
        intermediate_size=2 * heads * head_dim,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    return LlamaForCausalLM(config)


def save_tiny_llama(path, tokenizer, head_dim: int = 8) -> str:
    model = make_tiny_llama(len(tokenizer), head_dim=head_dim)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def save_tiny_classifier(path, tokenizer, num_labels=1) -> str:
    """A tiny random LlamaForSequenceClassification: a reward model (num_labels=1) for mechanics."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_labels=num_labels,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def colocated_vllm_config(output_dir, **overrides):
    """A RunConfig for a test's colocated vLLM engine on this CPU: eager (no compile), a 0.25 GiB KV cache, gloo."""
    from hf_grpo import RunConfig

    settings = dict(
        output_dir=str(output_dir),
        generation_backend="vllm",
        vllm_enforce_eager=True,
        vllm_kv_cache_gib=0.25,
        use_cpu=True,
        report_to="none",
    )
    return RunConfig(**{**settings, **overrides})
