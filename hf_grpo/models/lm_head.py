"""TRL's ``cast_lm_head_to_fp32`` (the ScaleRL recipe): the output head keeps float32 weights and computes the logits
in float32 while the rest of a bf16/fp16 model stays in its dtype.

The head is replaced by an `FP32Head` (a ``Linear`` that casts its input up) through the model's own
``set_output_embeddings``. With tied embeddings the input embedding shares the float32 weight, as in TRL; a forward
hook casts its output back to the model's dtype so the layers still see their own dtype.
"""

from __future__ import annotations

import torch
from torch import nn


class FP32Head(nn.Linear):
    """``Linear`` in float32: hidden states of any dtype in, float32 logits out."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # Also inside a mixed-precision autocast region (accelerate's, around the forward), which would run the
        # matmul in bf16/fp16 and undo the setting.
        with torch.autocast(hidden.device.type, enabled=False):
            return nn.functional.linear(hidden.float(), self.weight, self.bias)


def cast_lm_head_to_fp32(model: nn.Module) -> None:
    """Make ``model``'s output head an `FP32Head` with float32 weights (in place; a no-op when it already is one)."""
    head = model.get_output_embeddings()
    if isinstance(head, FP32Head):
        return
    if not isinstance(head, nn.Linear) or hasattr(head, "base_layer"):
        raise ValueError(
            f"GRPOConfig (checked by {__name__}): cast_lm_head_to_fp32=True needs a plain linear output head; "
            f"{type(model).__name__} has {type(head).__name__} (a PEFT adapter on lm_head is not "
            f"supported: remove lm_head from the adapter's target_modules, or set "
            f"cast_lm_head_to_fp32=False)"
        )
    dtype = head.weight.dtype
    fp32 = FP32Head(
        head.in_features, head.out_features, bias=head.bias is not None, device=head.weight.device, dtype=torch.float32
    )
    tied = model.get_input_embeddings().weight is head.weight
    head.float()  # in place: a tied input embedding now holds the same float32 weight
    fp32.weight = head.weight
    if head.bias is not None:
        fp32.bias = head.bias
    model.set_output_embeddings(fp32)
    if tied and dtype != torch.float32:
        model.get_input_embeddings().register_forward_hook(lambda module, args, output: output.to(dtype))
