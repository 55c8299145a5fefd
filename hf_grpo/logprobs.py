"""Per-token log-probs and entropy of completions, computed without materialising full-vocabulary logits.

The model runs once with ``logits_to_keep=1`` (so its own head projects a single position) and returns its
final hidden states; we project those to the vocabulary ourselves, ``chunk_size`` tokens at a time. Under
autograd each chunk is wrapped in activation checkpointing, so the backward pass recomputes that chunk's logits
instead of keeping them: peak extra memory is one ``[chunk_size, V]`` block, whatever the batch size.

Invariant relied on: the last entry of ``hidden_states`` is the *normed* final hidden state that the model's
output embedding consumes (true for the Llama/Qwen/Mistral families in transformers 5; pinned by a test that
compares against the model's own logits).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _chunk_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                    with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float() / temperature                        # [C, V]
    logz = torch.logsumexp(logits, dim=-1)                             # [C]
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz  # [C]
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)                      # [C, V]
            entropy = logz - (probs * logits).sum(-1)                  # [C]
    else:
        entropy = torch.zeros_like(logz)
    return logp, entropy


def completion_logprobs(model: torch.nn.Module, head: torch.nn.Module, input_ids: torch.Tensor,
                        attention_mask: torch.Tensor, completion_length: int, *, temperature: float = 1.0,
                        chunk_size: int = 1024, with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (and entropy) of the last ``completion_length`` tokens of each row.

    Args:
        model: the (possibly DDP/DeepSpeed-wrapped) causal LM; it is *called*, so wrappers see the forward.
        head: the unwrapped model's output embedding (``get_output_embeddings()``).
        input_ids: ``[B, P + C]`` left-padded prompt followed by right-padded completion.
        attention_mask: ``[B, P + C]``.
        completion_length: ``C``.
    Returns:
        ``([B, C] log-probs, [B, C] entropy)``; entropy is detached (a metric), zeros if not requested.
    """
    out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                logits_to_keep=1, use_cache=False)
    hidden = out.hidden_states[-1][:, -completion_length - 1:-1, :]    # [B, C, H] states that predict completions
    targets = input_ids[:, -completion_length:]                        # [B, C]
    batch, length, width = hidden.shape
    flat_hidden = hidden.reshape(-1, width)                            # [B*C, H]
    flat_targets = targets.reshape(-1)                                 # [B*C]
    logps, entropies = [], []
    for start in range(0, flat_hidden.shape[0], chunk_size):
        h = flat_hidden[start:start + chunk_size]                      # [c, H]
        t = flat_targets[start:start + chunk_size]                     # [c]
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_chunk_logprobs, head, h, t, temperature, with_entropy, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(head, h, t, temperature, with_entropy)
        logps.append(lp)
        entropies.append(ent)
    logp = torch.cat(logps).view(batch, length)                        # [B, C]
    entropy = torch.cat(entropies).view(batch, length).detach()        # [B, C]
    return logp, entropy
