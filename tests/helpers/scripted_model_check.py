"""The check of a scripted model (`tests.helpers.scripted_model`) once saved: teacher forcing over the whole
vocabulary, every continuation token the argmax by at least `MARGIN` logits."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from transformers import AutoModelForCausalLM

MARGIN = 2.0  # every target's logit lead over the runner-up, checked on the saved model


class _Capture(torch.nn.Module):
    """Stands in for the last layer's MLP in `verify`: records its input, adds nothing. The MLP then runs at the
    targets only, which is exact for the last layer (its output at one position reaches no other)."""

    def forward(self, x):
        self.seen = x
        return torch.zeros_like(x)


class _Sparse(torch.nn.Module):
    """An MLP restricted to its neurons with a non-zero gate (the others add exactly silu(0) * 0 = 0)."""

    def __init__(self, mlp):
        super().__init__()
        keep = torch.nonzero(mlp.gate_proj.weight.abs().sum(1)).flatten()
        self.gate, self.up = mlp.gate_proj.weight[keep], mlp.up_proj.weight[keep]
        self.down = mlp.down_proj.weight[:, keep]

    def forward(self, x):
        return (torch.nn.functional.silu(x @ self.gate.T) * (x @ self.up.T)) @ self.down.T


def verify(path: str, sequences: Sequence[tuple[Sequence[int], Sequence[int]]]) -> float:
    """Reload the saved model and check by teacher forcing that every continuation token is the argmax after its
    context, by at least `MARGIN` over the whole vocabulary. Returns the smallest lead; raises AssertionError.

    The model's own modules, with exact shortcuts: layer 0's all-zero MLP neurons are skipped, the last MLP runs at
    continuation positions only, and tokens whose (tied) head row is all zero get their logit, 0, without a product
    (Llama's head has no bias)."""
    sequences = [([int(t) for t in p], [int(t) for t in c]) for p, c in sequences]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    head = model.get_output_embeddings().weight
    rows = torch.nonzero(head.abs().sum(1)).flatten()
    row_of = {int(t): i for i, t in enumerate(rows)}
    first, last = model.model.layers
    mlps = first.mlp, last.mlp
    ids = torch.zeros(len(sequences), max(len(p) + len(c) for p, c in sequences), dtype=torch.long)
    for r, (p, c) in enumerate(sequences):
        ids[r, : len(p) + len(c)] = torch.tensor(p + c)
    out = {}
    hook = last.register_forward_hook(lambda mod, args, o: out.setdefault("x", o[0] if isinstance(o, tuple) else o))
    try:
        first.mlp, last.mlp = _Sparse(mlps[0]), _Capture()
        with torch.no_grad():
            # Right padding needs no attention mask: causal attention never looks at the later pad positions.
            model.model(input_ids=ids, use_cache=False)
        seen, residual = last.mlp.seen, out["x"]  # the last MLP's input, and the layer's output without it
    finally:
        hook.remove()
        first.mlp, last.mlp = mlps
    smallest = math.inf
    with torch.no_grad():
        for r, (p, c) in enumerate(sequences):
            span = slice(len(p) - 1, len(p) + len(c) - 1)
            logits = model.model.norm(residual[r, span] + mlps[1](seen[r, span])) @ head[rows].T
            logits = torch.cat([logits, torch.zeros(len(c), 1)], dim=1)  # the all-zero rows' logit
            wanted = torch.tensor([row_of[t] for t in c])
            lead = logits.gather(1, wanted[:, None])[:, 0] - logits.scatter(1, wanted[:, None], -math.inf).max(1)[0]
            i = int(lead.argmin())
            if lead[i] < MARGIN:
                raise AssertionError(
                    f"scripted model at {path}: sequence {r}, continuation token {i} ({c[i]}) leads by "
                    f"{lead[i].item():.3f} < {MARGIN} (argmax {int(rows[logits[i, :-1].argmax()])})"
                )
            smallest = min(smallest, float(lead[i]))
    return smallest
