"""A scripted model: a tiny real Llama whose weights make it write chosen tokens after chosen prompts.

Tests of tool calling through real generation backends (HF ``generate``, colocated vLLM) need a model that writes a
parseable tool call, then, after the observation the agent loop appends, a chosen answer. A random-init model never
does and the embedded SmolLM2 does only by luck. `scripted_model` builds a two-layer Llama that writes every given
``(prompt_ids, continuation_ids)`` pair under greedy decoding (and under sampling at temperature 1: each token leads
by ~45-80 logits), checks that on the saved model, and saves it with the tokenizer, so that both backends load it by
path like any hub model.

The weights are computed, not trained. Gradient descent was tried first: memorizing 15 sequences of ~230 tokens took
hundreds of full-batch steps at 0.1-0.6 s each on 2 CPU cores (minutes; not converged after 200 steps), and
700-token prompts cost several times more per step. The construction takes seconds. It is an ordinary fp32 Llama
checkpoint (64-dim heads for vLLM's CPU kernels, tied embeddings); only the values are chosen:

* Embedding: each used token gets a random unit code, a constant component (the MLPs' bias input), and, for tokens
  that continuations contain, a unit output vector. Every used token's embedding has the same norm.
* Layer 0 reads the recent tokens: offset head ``j`` attends to the token ``j`` back (queries and keys are constant,
  so RoPE alone makes its score ``sum_i cos(theta_i (delta - j))``, which peaks at ``delta = j`` by `HEAD_GAP`
  logits over every other distance up to ``max_position_embeddings``) and copies that token's code into its own
  slot of the residual. With `OFFSETS` that is a "window": the token and some of the 32 before it, in order.
* Layer 0's MLP flags some windows: a neuron that fires on one exact window and swaps two null slots of the residual
  for the flag's rank and code (a swap of unit vectors: the norm stays). Two kinds:
  - sequence flags: for each sequence, a window of its prompt that no other sequence contains (one that covers the
    user's text, typically), so that prompts told apart only far back, or only by word order, still differ;
  - turn flags: where two targets (context -> wanted token) still look alike, a window between them that the earlier
    context lacks: the second of two identical tool calls after identical observations, say.
* Layer 1: one head per kind attends to the highest-ranked flag in the context (keys hold the rank on RoPE's lowest
  frequency, 2e-9 rad/token, which does not turn; unflagged positions score 0) and copies its code. Its MLP is a
  key-value memory: one SwiGLU neuron per target context, whose gate tests the normalized features against its own (a
  half-space through the midpoint between its own context and the nearest one that wants another token) and which
  writes the wanted token's output vector. The up projection repeats the gate, so a neuron's output ``silu(z) * z``
  is never negative: it only ever votes for its own token, with ``z = NEURON_Z`` at its own context and
  ``z <= -NEURON_Z`` (a vote < 1e-8) where another token is wanted.
* The final norm keeps only the output subspace; tokens outside the sequences have all-zero (tied) head rows, so
  their logit is exactly 0.

Every attention pattern is one-hot to within ``exp(-HEAD_GAP)``, so every feature is an exact unit code and the
construction is computed on the side (`_Design`), not by running the model. The saved model is then checked by
teacher forcing (`tests.helpers.scripted_model_check.verify`: every target must lead by `MARGIN`; HF's incremental
decoding and vLLM's kernels move logits by far less). fp32 only: in bf16 (3 significant digits) some targets flip
(5 of 1074 with 1000-token contexts).

Limits (ValueError, with the two contexts): two sequences sharing a context must want the same next token there;
two contexts that want different tokens must differ in their last 33 tokens or by a flag, which fails for a run of
one token longer than 32 (its end looks like its middle), for a third identical turn longer than 32 tokens (call +
observation repeated exactly: its windows are the second's), and for two prompts with no window of their own.
Size: the hidden size is 384 and the intermediate size the number of target contexts (rounded up to 64): ~75 MB of
embedding plus ~9 KB per continuation token.

Results are cached: the model goes to ``out_dir/scripted-<hash of the inputs>``, reused when it is already there, so
a session-scoped ``tmp_path_factory`` directory (or any persistent one) builds each input once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import LlamaConfig

from tests.helpers.scripted_model_check import verify

VERSION = 1  # part of the cache key: bump when the construction changes
OFFSETS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32)  # how far back each layer-0 head looks
REACH = max(OFFSETS)
KINDS = ("seq", "turn")  # the two kinds of flags
CODE_DIM = 12  # a token's or flag's code; the residual holds 1 + 16 + 4 of them
OUT_DIM = 64  # the output vectors' subspace: orthonormal for up to 64 distinct continuation tokens
HEAD_DIM = 64  # vLLM's CPU attention kernels need 64
KV_GROUPS = 2  # layer 1 reads two kinds of keys (the flag ranks); layer 0's heads all share one key and value
ROPE_THETA = 1e9  # high frequencies near 1 for the offset heads, a lowest one (2e-9 rad/token) for the ranks
HEAD_GAP = 24.0  # attention logit lead of the attended position: the rest share < exp(-24) of the weight
NEURON_Z = 24.0  # an MLP neuron's gate at its own context; <= -NEURON_Z where it must stay silent
OUTPUT_SCALE = 100.0  # a memory neuron's output norm, far above the rest of the residual (~4.7)
FINAL_GAIN = 4.0  # the final norm's weight on the output subspace: leads of 4 * ~19.6 logits (less the cosines)
MIN_POSITIONS = 4096
EPS = 1e-6  # RMSNorm's


class _Layout:
    """Where things live in the residual stream: a constant, code slots, a (cos, sin) rank pair per flag kind, a
    filler coordinate (the norm that an output vector gives the tokens that have one) and the output subspace."""

    def __init__(self):
        self.const = 0
        slots = ["token", *(f"off{j}" for j in OFFSETS), *(f"{k}_flag" for k in KINDS), *(f"{k}_read" for k in KINDS)]
        self.slot = {name: slice(1 + CODE_DIM * i, 1 + CODE_DIM * (i + 1)) for i, name in enumerate(slots)}
        at = 1 + CODE_DIM * len(slots)
        self.rank = {"seq": at, "turn": at + 2}
        self.filler = at + 4
        self.out = slice(at + 5, at + 5 + OUT_DIM)
        self.hidden = -(-(at + 5 + OUT_DIM) // 64) * 64  # 384: a multiple of the 16 heads too
        # Squared norms: an embedding (const, token, 2 null flags, 2 rank pairs, output or filler), then + the offsets.
        self.norm2_embedding = 7.0
        self.norm2_layer1 = 7.0 + len(OFFSETS)  # the flag swaps keep it


def _rmsnorm(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


def _unit(shape, gen) -> torch.Tensor:
    v = torch.randn(shape, generator=gen, dtype=torch.float64)
    return v / v.norm(dim=-1, keepdim=True)


def _offset_heads(max_positions: int):
    """The offset heads' RoPE frequencies and query amplitude, and their attention weights at the first REACH
    positions (``early[h, p, q]``: head ``h`` at position ``p`` on position ``q``), where the distance a head looks
    for does not exist yet and its softmax spreads over the distances that do."""
    freqs = 1.0 / ROPE_THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    freqs = freqs[freqs * max_positions >= 1.0]  # lower ones do not turn within the context: a constant
    d = torch.arange(1, max_positions + 1, dtype=torch.float64)
    gap = float((len(freqs) - torch.cos(d[:, None] * freqs[None, :]).sum(1)).min())  # smallest lead (at d = 1)
    amp = HEAD_GAP * math.sqrt(HEAD_DIM) / gap  # SDPA divides scores by sqrt(head_dim)
    p = torch.arange(REACH, dtype=torch.float64)
    delta = p[:, None] - p[None, :]
    j = torch.tensor(OFFSETS, dtype=torch.float64)
    score = amp / math.sqrt(HEAD_DIM) * torch.cos((delta[None, :, :, None] - j[:, None, None, None]) * freqs).sum(-1)
    early = torch.softmax(score.masked_fill(delta[None] < 0, -math.inf), dim=-1)
    return freqs, amp, early


def _rank_angles(n: int) -> tuple[list[float], float]:
    """Angles of n ranks (last = highest: the smallest angle, whose cosine scores highest) in (pi/6, pi/3], and the
    query scale that puts neighbouring ranks HEAD_GAP apart (cos falls by >= sin(pi/6) * step per rank). Null
    positions sit at pi/2 (score 0), far below any rank."""
    step = (math.pi / 6) / max(1, n)
    return [math.pi / 3 - step * r for r in range(n)], HEAD_GAP * math.sqrt(HEAD_DIM) / (0.5 * step)


def _targets(sequences):
    """One entry per distinct context that ends inside a continuation: (sequence, position, wanted token).

    Sequences that share a context (a common prefix reaching into both continuations) must want the same next token
    there; that context gets one neuron."""
    seen: dict[tuple, tuple[int, int, int]] = {}
    out = []
    for s, (p, c) in enumerate(sequences):
        full = p + c
        for pos in range(len(p) - 1, len(full) - 1):
            key = tuple(full[: pos + 1])
            wanted = full[pos + 1]
            if key in seen:
                if seen[key][2] != wanted:
                    raise ValueError(
                        f"sequences {seen[key][0]} and {s} share their first {pos + 1} tokens and then want different "
                        f"tokens ({seen[key][2]} and {wanted}): no model writes both"
                    )
                continue
            seen[key] = (s, pos, wanted)
            out.append((s, pos, wanted))
    return out


class _Design:
    """The embedding, the flags, and every position's features as the model will compute them (float64)."""

    def __init__(self, sequences, eos_ids, vocab_size, seed, max_positions):
        self.layout = L = _Layout()
        self.sequences = sequences
        self.fulls = [p + c for p, c in sequences]
        self.gen = torch.Generator().manual_seed(seed)
        used = sorted({t for f in self.fulls for t in f} | set(eos_ids))
        outputs = sorted({t for _, c in sequences for t in c} | set(eos_ids))
        self.null = {k: _unit(CODE_DIM, self.gen) for k in KINDS}
        emb = torch.zeros(vocab_size, L.hidden, dtype=torch.float64)
        index, out_index = torch.tensor(used), torch.tensor(outputs)
        emb[index, L.const] = 1.0
        emb[index, L.slot["token"]] = _unit((len(used), CODE_DIM), self.gen)
        for k in KINDS:
            emb[index, L.slot[f"{k}_flag"]] = self.null[k]
            emb[index, L.rank[k] + 1] = 1.0  # angle pi/2
        vectors = torch.randn(max(OUT_DIM, len(outputs)), OUT_DIM, generator=self.gen, dtype=torch.float64)
        if len(outputs) <= OUT_DIM:
            vectors = torch.linalg.qr(vectors)[0]
        vectors = vectors[: len(outputs)]
        emb[index, L.filler] = 1.0
        emb[out_index, L.filler] = 0.0
        emb[out_index, L.out] = vectors / vectors.norm(dim=1, keepdim=True)
        self.emb = emb
        self.freqs, self.amp, self.early = _offset_heads(max_positions)
        self.windows = [self._windows(f) for f in self.fulls]
        self.first = [{} for _ in self.fulls]  # window -> its first position, per sequence
        for s, ws in enumerate(self.windows):
            for p, w in enumerate(ws):
                self.first[s].setdefault(w, p)
        self.x1 = [self._layer0(f) for f in self.fulls]  # the residual after layer 0's attention, per position
        self.flags = {k: [] for k in KINDS}  # windows, in rank order (last = highest)

    @staticmethod
    def _windows(full):
        """What layer 0 sees at each position: the token and those OFFSETS back; the whole prefix near the start,
        where the heads fall back on other distances."""
        return [
            ("prefix", *full[: p + 1]) if p < REACH else (full[p], *(full[p - j] for j in OFFSETS))
            for p in range(len(full))
        ]

    def _layer0(self, full):
        L = self.layout
        x = self.emb[torch.tensor(full)]
        codes = x[:, L.slot["token"]]
        n, m = len(full), min(len(full), REACH)
        for h, j in enumerate(OFFSETS):
            block = torch.empty(n, CODE_DIM, dtype=torch.float64)
            if n > REACH:
                block[REACH:] = codes[REACH - j : n - j]
            block[:m] = self.early[h, :m, :m] @ codes[:m]
            x[:, L.slot[f"off{j}"]] = block
        return x

    def choose_flags(self, targets):
        """Sequence flags, then turn flags until no two targets that want different tokens look alike, or until
        no window tells the remaining ones apart (`_memory` then raises)."""
        for s, (prompt, _) in enumerate(self.sequences):
            for p in range(len(prompt) - 1, REACH - 1, -1):  # the last such window: it likely covers the user's text
                w = self.windows[s][p]
                if not any(w in self.first[o] for o in range(len(self.fulls)) if o != s):
                    self.flags["seq"].append(w)
                    break
        for _ in range(64):
            added = False
            for a, b in self._clashes(targets):
                w = self._separating_window(a, b)
                if w is not None and w not in self.flags["turn"]:
                    self.flags["turn"].append(w)
                    added = True
            if not added:
                break
        self.angles, self.rank_scale, self.codes = {}, {}, {}
        for k in KINDS:
            self.angles[k], self.rank_scale[k] = _rank_angles(len(self.flags[k]))
            self.codes[k] = _unit((len(self.flags[k]), CODE_DIM), self.gen)

    def top_flags(self, kind, s):
        """Per position of sequence ``s``: the highest-ranked flag of ``kind`` in its context (-1: none)."""
        rank = {w: r for r, w in enumerate(self.flags[kind])}
        out, top = [], -1
        for w in self.windows[s]:
            top = max(top, rank.get(w, -1))
            out.append(top)
        return out

    def _clashes(self, targets):
        tops = [[self.top_flags(k, s) for k in KINDS] for s in range(len(self.fulls))]
        groups: dict[tuple, list] = {}
        for s, p, t in targets:
            groups.setdefault((self.windows[s][p], tops[s][0][p], tops[s][1][p]), []).append((s, p, t))
        return [(a, b) for m in groups.values() for a, b in zip(m, m[1:]) if a[2] != b[2]]

    def _separating_window(self, a, b):
        """A window in one context (as late as possible) that the other lacks: as the newest, highest-ranked flag it
        makes the two contexts' top turn flags differ."""
        for (sa, pa, _), (sb, pb, _) in ((a, b), (b, a)):
            for p in range(pb, REACH - 1, -1):
                w = self.windows[sb][p]
                if self.first[sa].get(w, math.inf) > pa and w not in self.flags["seq"]:
                    return w
        return None

    def flag_neurons(self, kind):
        """Gate, up and down weights of layer 0's flag neurons of ``kind`` (one per flag)."""
        L = self.layout
        flags = self.flags[kind]
        if not flags:
            empty = torch.zeros(0, L.hidden, dtype=torch.float64)
            return empty, empty, empty.T
        feats = _rmsnorm(torch.cat(self.x1))
        windows = [w for ws in self.windows for w in ws]
        where = {w: i for i, w in reversed(list(enumerate(windows)))}
        keys = feats[[where[w] for w in flags]]
        # Fire on that window only: a half-space test against every position (any sequence) with another window.
        ratio = (keys @ feats.T) / feats[:, L.const][None, :]
        same = torch.tensor([[u == w for u in windows] for w in flags])
        own = (keys * keys).sum(1) / keys[:, L.const]
        half = (own - torch.where(same, -math.inf, ratio).max(1).values) / 2
        if bool((half <= 1e-6 * own).any()):  # unit codes: two different windows always differ
            raise AssertionError("scripted_model: a flagged window looks like another window")
        gate, up = _half_space(keys, own - half, half, L.const)
        down = torch.zeros(L.hidden, len(flags), dtype=torch.float64)
        for r, angle in enumerate(self.angles[kind]):
            down[L.rank[kind], r] = math.cos(angle)  # from (0, 1), the null angle pi/2
            down[L.rank[kind] + 1, r] = math.sin(angle) - 1.0
            down[L.slot[f"{kind}_flag"], r] = self.codes[kind][r] - self.null[kind]
        return gate, up, down / _silu_z()

    def features(self, targets):
        """Layer 1's MLP input at each target: layer 0's output (with its own flag swaps), then the flag reads."""
        L = self.layout
        tops = [[self.top_flags(k, s) for k in KINDS] for s in range(len(self.fulls))]
        rank = {k: {w: r for r, w in enumerate(self.flags[k])} for k in KINDS}
        rows = []
        for s, p, _ in targets:
            x = self.x1[s][p].clone()
            for i, k in enumerate(KINDS):
                top = tops[s][i][p]
                x[L.slot[f"{k}_read"]] = self.null[k] if top < 0 else self.codes[k][top]
                r = rank[k].get(self.windows[s][p])
                if r is not None:  # flagged here: layer 0's MLP swapped this position's slots
                    angle = self.angles[k][r]
                    x[L.rank[k] : L.rank[k] + 2] = torch.tensor([math.cos(angle), math.sin(angle)])
                    x[L.slot[f"{k}_flag"]] = self.codes[k][r]
            rows.append(x)
        return _rmsnorm(torch.stack(rows))


def _silu_z() -> float:
    """A neuron's output at its own context: silu(NEURON_Z) times its up projection (1 there)."""
    return NEURON_Z * float(torch.sigmoid(torch.tensor(NEURON_Z, dtype=torch.float64)))


def _half_space(keys, tau, half, const):
    """Gate and up rows for neurons that fire on ``x . key > tau * x[const]`` (RMSNorm's scale cancels: a test on the
    raw residual), with gate NEURON_Z at the key itself and <= -NEURON_Z beyond ``half`` on the other side."""
    beta = NEURON_Z / (keys[:, const] * half)
    gate = beta[:, None] * keys
    gate[:, const] -= beta * tau
    return gate, gate / NEURON_Z  # up . x = z / NEURON_Z: output silu(z) * z / NEURON_Z, never negative


def _memory(x, wanted, vectors, const, describe):
    """Gate, up and down weights of the memory MLP, one neuron per target: normalized features ``x``, the ``wanted``
    token ids and their output ``vectors``."""
    own = (x * x).sum(1) / x[:, const]
    x32 = x.float()  # float32 is plenty to place thresholds: gaps are >= ~1e-3 of the values, rounding ~1e-7
    nearest_value = torch.empty(len(x), dtype=torch.float64)
    nearest = torch.empty(len(x), dtype=torch.long)
    for lo in range(0, len(x), 2048):  # blocks of rows: an N x N matrix for ~5000 targets is 100 MB
        ratio = (x32[lo : lo + 2048] @ x32.T) / x32[:, const][None, :]
        differ = wanted[lo : lo + 2048, None] != wanted[None, :]
        best = torch.where(differ, ratio, -math.inf).max(1)
        nearest_value[lo : lo + 2048], nearest[lo : lo + 2048] = best.values.double(), best.indices
    half = (own - nearest_value) / 2
    # A gap under 1e-4 of the values could be undone by another backend's rounding (~1e-6 relative) times beta.
    bad = torch.nonzero(half <= 1e-4 * own).flatten()
    if len(bad):
        raise ValueError(describe(int(bad[0]), int(nearest[bad[0]])))
    gate, up = _half_space(x, own - half, half, const)
    return gate, up, vectors.T * (OUTPUT_SCALE / _silu_z())


def _weights(design: _Design, targets, vocab_size, pad_id, eos_ids, max_positions, describe):
    """The checkpoint: a LlamaConfig and its state dict (float32), made without building a model."""
    L, D, half = design.layout, HEAD_DIM, HEAD_DIM // 2
    heads, H = len(OFFSETS), L.hidden
    flag = {k: design.flag_neurons(k) for k in KINDS}
    wanted = torch.tensor([t for *_, t in targets])
    gate, up, down = _memory(design.features(targets), wanted, design.emb[wanted][:, L.out], L.const, describe)
    intermediate = -(-max(len(targets), sum(len(f) for f in design.flags.values())) // 64) * 64  # spares are zero
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=H,
        intermediate_size=intermediate,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=KV_GROUPS,
        head_dim=D,
        max_position_embeddings=max_positions,
        rope_theta=ROPE_THETA,
        rms_norm_eps=EPS,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_ids,
        pad_token_id=pad_id,
    )

    def zeros(*shape):
        return torch.zeros(shape, dtype=torch.float64)

    final_norm = zeros(H)
    final_norm[L.out] = FINAL_GAIN  # the logits read the output subspace only
    w = {"model.embed_tokens.weight": design.emb, "model.norm.weight": final_norm}
    for i in range(2):
        pre = f"model.layers.{i}."
        w[pre + "input_layernorm.weight"] = torch.ones(H, dtype=torch.float64)
        w[pre + "post_attention_layernorm.weight"] = torch.ones(H, dtype=torch.float64)
        for name, shape in (("q", (heads * D, H)), ("k", (KV_GROUPS * D, H)), ("v", (KV_GROUPS * D, H))):
            w[pre + f"self_attn.{name}_proj.weight"] = zeros(*shape)
        w[pre + "self_attn.o_proj.weight"] = zeros(H, heads * D)
        for name in ("gate", "up"):
            w[pre + f"mlp.{name}_proj.weight"] = zeros(intermediate, H)
        w[pre + "mlp.down_proj.weight"] = zeros(H, intermediate)

    # Layer 0: offset heads. Every kv group holds the same key (1 on the offset frequencies) and value (the code).
    scale = 1.0 / math.sqrt(L.norm2_embedding / H + EPS)  # what the input RMSNorm multiplies an embedding by
    a, n, freqs = "model.layers.0.self_attn.", len(design.freqs), design.freqs
    for g in range(KV_GROUPS):
        w[a + "k_proj.weight"][g * D : g * D + n, L.const] = 1.0 / scale
        w[a + "v_proj.weight"][g * D : g * D + CODE_DIM, L.slot["token"]] = torch.eye(CODE_DIM) / scale
    for h, j in enumerate(OFFSETS):
        r = h * D
        # RoPE makes the score Re[q conj(k) e^{i theta delta}]: k = 1 and q = amp e^{-i theta j} peak at delta = j.
        w[a + "q_proj.weight"][r : r + n, L.const] = design.amp * torch.cos(-j * freqs) / scale
        w[a + "q_proj.weight"][r + half : r + half + n, L.const] = design.amp * torch.sin(-j * freqs) / scale
        w[a + "o_proj.weight"][L.slot[f"off{j}"], r : r + CODE_DIM] = torch.eye(CODE_DIM)
    # Layer 0's MLP: the flag neurons.
    m, at = "model.layers.0.mlp.", 0
    for k in KINDS:
        g, u, d = flag[k]
        w[m + "gate_proj.weight"][at : at + len(g)] = g
        w[m + "up_proj.weight"][at : at + len(g)] = u
        w[m + "down_proj.weight"][:, at : at + len(g)] = d
        at += len(g)
    # Layer 1: the first head of kv group g reads flags of kind g, on the lowest frequency's pair (half - 1, D - 1):
    # score = rank_scale * cos(angle) / sqrt(D). The other heads have zero queries and outputs.
    scale = 1.0 / math.sqrt(L.norm2_layer1 / H + EPS)
    a = "model.layers.1.self_attn."
    for g, k in enumerate(KINDS):
        r, c = g * (heads // KV_GROUPS) * D, g * D
        lowest = ROPE_THETA ** (-(D - 2) / D)  # rad/token: ranks move by < 1 logit over the whole context
        assert design.rank_scale[k] / math.sqrt(D) * lowest * max_positions < 1.0, "too many flags"
        w[a + "q_proj.weight"][r + half - 1, L.const] = design.rank_scale[k] / scale
        w[a + "k_proj.weight"][c + half - 1, L.rank[k]] = 1.0 / scale
        w[a + "k_proj.weight"][c + D - 1, L.rank[k] + 1] = 1.0 / scale
        w[a + "v_proj.weight"][c : c + CODE_DIM, L.slot[f"{k}_flag"]] = torch.eye(CODE_DIM) / scale
        w[a + "o_proj.weight"][L.slot[f"{k}_read"], r : r + CODE_DIM] = torch.eye(CODE_DIM)
    # Layer 1's MLP: the memory.
    m = "model.layers.1.mlp."
    w[m + "gate_proj.weight"][: len(gate)] = gate
    w[m + "up_proj.weight"][: len(gate)] = up
    w[m + "down_proj.weight"][L.out, : len(gate)] = down
    return config, {name: t.float().contiguous() for name, t in w.items()}


def _save(path, config, state, tokenizer, eos_ids, pad_id):
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    config.save_pretrained(path)
    save_file(state, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    # Both backends stop on any id of generation_config's eos_token_id list (vLLM adds them to its stop ids).
    GenerationConfig(eos_token_id=eos_ids, pad_token_id=pad_id).save_pretrained(path)
    tokenizer.save_pretrained(path)


@contextlib.contextmanager
def _one_thread():
    """The construction is thousands of small tensor operations: on a shared 2-core machine two torch threads made
    it 4-20x slower than one (they wait on each other). `verify`'s large products run with the caller's setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _key(tokenizer, sequences, eos_ids, seed) -> str:
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    payload = dict(
        version=VERSION,
        seed=seed,
        eos=eos_ids,
        sequences=sequences,
        vocab=hashlib.sha256(json.dumps(vocab).encode()).hexdigest(),
        template=tokenizer.chat_template,
        special=tokenizer.special_tokens_map,
    )
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def scripted_model(
    out_dir,
    tokenizer,
    sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
    eos_token_ids: Sequence[int],
    *,
    seed: int = 0,
) -> str:
    """Build, check and save a two-layer Llama that writes ``continuation_ids`` greedily after each ``prompt_ids``.

    ``sequences``: ``(prompt_ids, continuation_ids)`` pairs. A continuation may span several turns (sampled tokens,
    an observation the caller appends, more sampled tokens): every continuation token is reproduced, so the model
    goes on correctly after the observation too. ``eos_token_ids`` go into ``generation_config.json``: HF ``generate``
    and vLLM stop on any of them. Returns the saved directory (model + tokenizer, ``scripted.json`` with build
    facts), ``out_dir/scripted-<key>``, reused if an earlier call with the same inputs made it. Deterministic for a
    seed; the caller's torch RNG is not used. Raises ValueError for scripts no such model can follow (module doc).
    """
    start = time.perf_counter()
    sequences = [([int(t) for t in p], [int(t) for t in c]) for p, c in sequences]
    eos_ids = [int(t) for t in eos_token_ids]
    vocab_size = len(tokenizer)
    if not sequences or any(not p or not c for p, c in sequences):
        raise ValueError("scripted_model needs at least one sequence, each with a non-empty prompt and continuation")
    if not eos_ids:
        raise ValueError("scripted_model needs at least one eos token id")
    bad = sorted(t for t in {t for p, c in sequences for t in p + c} | set(eos_ids) if not 0 <= t < vocab_size)
    if bad:
        raise ValueError(f"token ids outside the tokenizer's {vocab_size} tokens: {bad[:5]}")
    final = Path(out_dir) / f"scripted-{_key(tokenizer, sequences, eos_ids, seed)}"
    if (final / "scripted.json").exists():
        return str(final)

    def describe(n, other):
        (s, p, t), (so, po, to) = targets[n], targets[other]
        full, tail = design.fulls[s], REACH + 1
        where = (
            "repeats an earlier stretch of its own sequence exactly (a run of one token longer than 32, or a third "
            "identical turn: vary the call or its result from turn to turn)"
            if s == so
            else "comes after the same tokens in another sequence, whose prompt no window tells apart (give each "
            "prompt words of its own)"
        )
        return (
            f"scripted_model cannot write sequence {s}'s continuation token {p - len(design.sequences[s][0]) + 1} "
            f"({tokenizer.decode([t])!r} after ...{tokenizer.decode(full[max(0, p - 11) : p + 1])!r}) and sequence "
            f"{so}'s token {po - len(design.sequences[so][0]) + 1} ({tokenizer.decode([to])!r}): the same last {tail} "
            f"tokens, and the context {where}"
        )

    targets = _targets(sequences)
    longest = max(len(p) + len(c) for p, c in sequences)
    max_positions = max(MIN_POSITIONS, 1 << (longest - 1).bit_length())
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    with _one_thread():
        design = _Design(sequences, eos_ids, vocab_size, seed, max_positions)
        design.choose_flags(targets)
        config, state = _weights(design, targets, vocab_size, pad_id, eos_ids, max_positions, describe)

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".scripted-", dir=out_dir)  # renamed into place when complete: no torn cache
    try:
        _save(work, config, state, tokenizer, eos_ids, pad_id)
        lead = verify(work, sequences)
        info = dict(
            version=VERSION,
            seed=seed,
            sequences=len(sequences),
            targets=len(targets),
            flags={k: len(v) for k, v in design.flags.items()},
            smallest_lead=round(lead, 2),
            seconds=round(time.perf_counter() - start, 2),
        )
        Path(work, "scripted.json").write_text(json.dumps(info) + "\n")
        os.rename(work, final)
    except OSError:
        if not (final / "scripted.json").exists():  # not a lost race with another process building the same model
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)  # gone after the rename; left over if another process won
    return str(final)
