"""Per-token log-probs and entropy of completions, without full-vocabulary logits in float32.

Two paths (``logprob_path``):

* ``chunked``: the model runs once with ``logits_to_keep=1`` (its own head projects a single position) and returns
  its final hidden states; we project those to the vocabulary ourselves, one chunk of positions at a time. Under
  autograd each chunk is wrapped in activation checkpointing, so the backward pass recomputes that chunk's logits
  instead of keeping them: peak extra memory is one ``[chunk, V]`` block, whatever the batch size and length. The
  chunk is sized by a budget of logits, not a count of positions (`Readout.rows`): ``LOGITS_BUDGET_BYTES`` of
  float32 logits, so a 152k vocabulary gets fewer positions per chunk than a 49k one and the block is the same size.
  It calls the head *outside* the model's forward, which needs the head's weights whole on every rank (plain, DDP,
  ZeRO-1/2), and the caller to run it in the forward's mixed-precision autocast region (`PolicyScorer.logprobs`).
* ``model``: the model's own forward computes the logits of the completion positions (``logits_to_keep = C + 1``:
  one ``[B, C, V]`` tensor in the compute dtype, as TRL does), and the float32 log-softmax runs ``chunk_size`` tokens
  at a time. Needed under ZeRO-3 and FSDP2, where the head's weights exist whole only inside the forward (a head
  called once per chunk would gather them once per chunk, a different number of times on each rank: a hang).

Sampling filters (`SamplingFilters`): vLLM returns the log-probs of the distribution it sampled from, i.e. after
temperature *and* min_p/top_k/top_p truncation, renormalised over the kept tokens. With those filters on, the trainer
applies the same truncation to its own logits (the kept set is computed from the trainer's logits, always including
the sampled token) so that the importance ratio pi_trainer / pi_vllm compares like with like; TRL applies only the
temperature, which biases that ratio by the mass of the dropped tokens. The gradient then flows through the
renormalisation over the kept set: the policy being optimised is the truncated one that generated the data.

Packed rows (`hf_grpo.learner.packing`) go through `packed_completion_logprobs`: the same two paths, evaluated only at
the positions that predict completion tokens, scattered back into the padded path's ``[B, C]`` layout.

Families that transform the head's output (Gemma-2/3 ``final_logit_softcapping``, Cohere ``logit_scale``, Granite
``logits_scaling``) get the same transform in the chunked path (`LogitTransform`). Invariant relied on: the last
entry of ``hidden_states`` is the *normed* final hidden state that the output embedding consumes. Both are checked
against the model's own logits at start-up (`chunked_path_matches`); a family that breaks either falls back to the
``model`` path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from .packing import unpack


@dataclass(frozen=True)
class LogitTransform:
    """What a model does to ``lm_head(hidden)`` before returning logits, read from its config."""

    scale: float = 1.0  # Cohere logit_scale (multiply); Granite 1 / logits_scaling
    softcap: float | None = None  # Gemma-2/3: cap * tanh(logits / cap)

    @classmethod
    def from_config(cls, config) -> LogitTransform:
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        scale = float(getattr(config, "logit_scale", None) or 1.0)
        if getattr(config, "logits_scaling", None):
            scale /= float(config.logits_scaling)
        return cls(scale=scale, softcap=getattr(config, "final_logit_softcapping", None) or None)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        if self.scale != 1.0:
            logits = logits * self.scale
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


@dataclass(frozen=True)
class SamplingFilters:
    """vLLM's sampling truncation of temperature-scaled logits, in vLLM's order: min_p, then top_k, then top_p."""

    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    min_p: float = 0.0  # 0: off

    @classmethod
    def from_config(cls, args) -> SamplingFilters | None:
        """The config's filters, or None when none is on (the log-probs are then plain temperature log-probs)."""
        filters = cls(top_k=args.top_k, top_p=args.top_p, min_p=args.min_p)
        return filters if filters.top_k > 0 or filters.top_p < 1 or filters.min_p > 0 else None

    @torch.no_grad()
    def kept(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``[c, V]`` bool: the tokens the sampler could draw at each position. ``logits`` ``[c, V]`` are already
        divided by the temperature; each ``targets`` token ``[c]`` is kept whatever its rank, so that a token vLLM
        drew at a boundary its logits placed differently keeps a finite log-prob."""
        keep = torch.ones_like(logits, dtype=torch.bool)  # [c, V]
        if self.min_p > 0:
            probs = logits.softmax(dim=-1)  # [c, V]
            keep = probs >= self.min_p * probs.amax(dim=-1, keepdim=True)
        if self.top_k > 0 or self.top_p < 1:
            vocab = logits.shape[-1]
            ascending, order = logits.masked_fill(~keep, float("-inf")).sort(dim=-1)  # [c, V] each
            drop = torch.zeros_like(keep)  # [c, V] in sorted order
            if 0 < self.top_k < vocab:
                kth = ascending[:, vocab - self.top_k].unsqueeze(-1)  # [c, 1] k-th largest (ties kept)
                drop = ascending < kth
            if self.top_p < 1:
                # Drop the smallest tokens while their cumulative mass stays <= 1 - top_p; never the largest.
                mass = ascending.masked_fill(drop, float("-inf")).softmax(dim=-1).cumsum(dim=-1)  # [c, V]
                drop = drop | (mass <= 1 - self.top_p)
                drop[:, -1] = False
            keep = keep & ~torch.empty_like(drop).scatter_(-1, order, drop)  # [c, V] back to vocab order
        return keep.scatter_(-1, targets.unsqueeze(-1), True)


def _logits_logprobs(
    filters: SamplingFilters | None,
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool | str,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = logits.float() / temperature  # [c, V]
    if filters is not None:
        logits = logits.masked_fill(~filters.kept(logits, targets), float("-inf"))  # [c, V]
    logz = torch.logsumexp(logits, dim=-1)  # [c]
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz  # [c]
    if with_entropy:
        # "grad": the entropy is a loss term (TRL's entropy_coef), so it keeps its gradient.
        with torch.set_grad_enabled(with_entropy == "grad" and torch.is_grad_enabled()):
            probs = torch.softmax(logits, dim=-1)  # [c, V]
            entropy = logz - torch.where(probs > 0, probs * logits, 0.0).sum(-1)  # [c] (0 * -inf is not 0)
    else:
        entropy = torch.zeros_like(logz)
    return logp, entropy


def _head_logprobs(
    head: torch.nn.Module,
    transform: LogitTransform,
    filters: SamplingFilters | None,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool | str,
) -> tuple[torch.Tensor, torch.Tensor]:
    # Under mixed precision accelerate hands back float32 hidden states while a bf16 model's head is bf16: cast to
    # the head's dtype, as the model's own forward would have computed it (an autocast region casts again anyway).
    logits = transform(head(hidden.to(head.weight.dtype)))  # [c, V]
    return _logits_logprobs(filters, logits, targets, temperature, with_entropy)


def _chunked(
    fn,
    *args,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    chunk_size: int,
    temperature: float,
    with_entropy: bool | str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply ``fn(*args, inputs_chunk, targets_chunk, ...)`` over ``chunk_size`` rows at a time, checkpointing each
    chunk under autograd so its ``[chunk, V]`` logits are recomputed in the backward instead of kept."""
    logps, entropies = [], []
    for start in range(0, max(inputs.shape[0], 1), chunk_size):  # once even for no rows: [0]-shaped results
        x = inputs[start : start + chunk_size]  # [c, H] or [c, V]
        t = targets[start : start + chunk_size]  # [c]
        if torch.is_grad_enabled():
            lp, ent = checkpoint(fn, *args, x, t, temperature, with_entropy, use_reentrant=False)
        else:
            lp, ent = fn(*args, x, t, temperature, with_entropy)
        logps.append(lp)
        entropies.append(ent)
    return torch.cat(logps), torch.cat(entropies)


# One chunk's float32 logits: 64 MiB (320 positions of SmolLM2's 49k vocabulary, 64 of Qwen2.5's 152k). The loss pass
# holds a few blocks of this size at once (the logits, their log-softmax, their gradient); at 2048 completion tokens
# 1024-position blocks of a 49k vocabulary cost 0.5 GiB more peak than 256-position ones (docs/benchmarks.md).
LOGITS_BUDGET_BYTES = 64 * 2**20
ROW_MULTIPLE = 64  # positions per chunk come in multiples of this: matmul-friendly shapes on accelerators


@dataclass(frozen=True)
class Readout:
    """How a forward's outputs become the sampled tokens' log-probs: the sampling temperature, the sampler's
    truncation to renormalise over (None: none; see the module docstring), the model's logit transform (the chunked
    path applies it; the model path gets it from the model) and the positions per head call (the chunk)."""

    temperature: float = 1.0
    filters: SamplingFilters | None = None
    transform: LogitTransform = LogitTransform()
    chunk_size: int | None = None  # positions per head call; None: sized by LOGITS_BUDGET_BYTES

    def rows(self, vocab_size: int) -> int:
        """Positions per chunk: ``chunk_size``, or as many as keep one chunk's float32 ``[rows, V]`` logits within
        ``LOGITS_BUDGET_BYTES``, in multiples of ``ROW_MULTIPLE`` (at least one multiple)."""
        if self.chunk_size is not None:
            return self.chunk_size
        rows = LOGITS_BUDGET_BYTES // (4 * vocab_size)
        return max(ROW_MULTIPLE, rows - rows % ROW_MULTIPLE)


def completion_logprobs(
    model: torch.nn.Module,
    head: torch.nn.Module | None,
    inputs: dict,
    completion_length: int,
    readout: Readout = Readout(),
    *,
    with_entropy: bool | str = True,
    aux_losses: list | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (and entropy) of the last ``completion_length`` tokens of each row.

    Args:
        model: the (possibly DDP/DeepSpeed/FSDP-wrapped) causal LM; it is *called*, so wrappers see the forward.
        head: the unwrapped model's output embedding for the ``chunked`` path; None for the ``model`` path.
        inputs: ``input_ids`` and ``attention_mask``, ``[B, P + C]`` each: left-padded prompt followed by
            right-padded completion; and a vision-language micro-batch's tensors (``pixel_values``, ...) under
            ``vision``, passed to the forward.
        completion_length: ``C``.
        readout: temperature, sampling filters, logit transform and chunk size (`Readout`).
        with_entropy: True for the entropy as a (detached) metric, ``"grad"`` to keep its gradient (a loss term).
        aux_losses: a list: the (MoE) model is called with ``output_router_logits=True`` and its load-balancing
            ``aux_loss`` is appended to it.
    Returns:
        ``([B, C] log-probs, [B, C] entropy)``; zeros for the entropy if not requested.
    """
    input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]  # [B, P + C] each
    extra = {**(inputs.get("vision") or {}), **({} if aux_losses is None else {"output_router_logits": True})}
    C = completion_length
    targets = input_ids[:, -C:]  # [B, C]
    batch = input_ids.shape[0]
    if head is None:
        out = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=C + 1, use_cache=False, **extra)
        logits = out.logits[:, :-1, :]  # [B, C, V] positions that predict completions
        flat = logits.reshape(-1, logits.shape[-1])  # [B*C, V]
        logp, entropy = _chunked(
            _logits_logprobs,
            readout.filters,
            inputs=flat,
            targets=targets.reshape(-1),
            chunk_size=readout.rows(flat.shape[-1]),
            temperature=readout.temperature,
            with_entropy=with_entropy,
        )
    else:
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=True,
            logits_to_keep=1,
            use_cache=False,
            **extra,
        )
        hidden = out.hidden_states[-1][:, -C - 1 : -1, :]  # [B, C, H] states that predict completions
        flat = hidden.reshape(-1, hidden.shape[-1])  # [B*C, H]
        logp, entropy = _chunked(
            _head_logprobs,
            head,
            readout.transform,
            readout.filters,
            inputs=flat,
            targets=targets.reshape(-1),
            chunk_size=readout.rows(head.out_features),
            temperature=readout.temperature,
            with_entropy=with_entropy,
        )
    if aux_losses is not None:
        aux_losses.append(out.aux_loss)
    entropy = entropy.view(batch, C)  # [B, C]
    return logp.view(batch, C), entropy if with_entropy == "grad" else entropy.detach()  # [B, C] each


def packed_completion_logprobs(
    model: torch.nn.Module,
    head: torch.nn.Module | None,
    inputs: dict[str, torch.Tensor],
    readout: Readout = Readout(),
    *,
    with_entropy: bool | str = True,
    aux_losses: list | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`completion_logprobs` for packed rows (`hf_grpo.learner.packing`): the same ``([B, C] log-probs, [B, C]
    entropy)``, 0 past each completion's end.

    ``inputs``: ``input_ids``/``position_ids`` ``[R, L]``, ``completion_index`` ``[B, C]`` and, for eager/sdpa, the
    block mask as ``attention_mask``. Only the positions that predict completion tokens reach the head: the chunked
    path selects their hidden states, the model path asks the model for the logits of those columns only.
    """
    input_ids, index = inputs["input_ids"], inputs["completion_index"]  # [R, L], [B, C]
    flat = index[index >= 0]  # [N] positions predicting completions
    targets = input_ids.reshape(-1)[flat + 1]  # [N]
    forward = {k: inputs[k] for k in ("input_ids", "position_ids", "attention_mask") if k in inputs}
    if aux_losses is not None:
        forward["output_router_logits"] = True
    if head is None:
        width = input_ids.shape[1]
        columns = torch.unique(flat % width)  # [K] sorted columns used by any row
        out = model(**forward, logits_to_keep=columns, use_cache=False)
        logits = out.logits.reshape(-1, out.logits.shape[-1])  # [R*K, V]
        rows = logits[flat // width * columns.numel() + torch.searchsorted(columns, flat % width)]  # [N, V]
        logp, entropy = _chunked(
            _logits_logprobs,
            readout.filters,
            inputs=rows,
            targets=targets,
            chunk_size=readout.rows(rows.shape[-1]),
            temperature=readout.temperature,
            with_entropy=with_entropy,
        )
    else:
        out = model(**forward, output_hidden_states=True, logits_to_keep=1, use_cache=False)
        hidden = out.hidden_states[-1]  # [R, L, H]
        rows = hidden.reshape(-1, hidden.shape[-1])[flat]  # [N, H]
        logp, entropy = _chunked(
            _head_logprobs,
            head,
            readout.transform,
            readout.filters,
            inputs=rows,
            targets=targets,
            chunk_size=readout.rows(head.out_features),
            temperature=readout.temperature,
            with_entropy=with_entropy,
        )
    if aux_losses is not None:
        aux_losses.append(out.aux_loss)
    entropy = unpack(entropy, index)  # [B, C]
    return unpack(logp, index), entropy if with_entropy == "grad" else entropy.detach()  # [B, C] each


CHECKED_POSITIONS = 128  # completion positions `chunked_path_matches` compares


@torch.no_grad()
def chunked_path_matches(
    model: torch.nn.Module,
    head: torch.nn.Module,
    transform: LogitTransform,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_length: int,
    tolerance: float,
) -> tuple[bool, float]:
    """Whether the chunked path reproduces the model's own log-probs on these inputs (max abs difference), on at
    most `CHECKED_POSITIONS` completion positions: the check is of the head and its transform, which do not depend
    on the length, and the model path's full ``[1, C, V]`` logits of a long completion would otherwise set the run's
    peak memory (0.6 GiB more at 2k tokens for a 49k vocabulary)."""
    cut = input_ids.shape[1] - completion_length + min(completion_length, CHECKED_POSITIONS)
    input_ids, attention_mask = input_ids[:, :cut], attention_mask[:, :cut]  # [1, P + min(C, CHECKED_POSITIONS)]
    completion_length = min(completion_length, CHECKED_POSITIONS)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    own, _ = completion_logprobs(model, None, inputs, completion_length, with_entropy=False)
    ours, _ = completion_logprobs(
        model, head, inputs, completion_length, Readout(transform=transform), with_entropy=False
    )
    diff = float((own - ours).abs().max()) if own.numel() else 0.0
    return diff <= tolerance, diff
