"""Vision-language policies: TRL's image columns, through the model's processor, to every backend (docs/vlm.md).

The row contract (``image``/``images`` columns, ``{"type": "image"}`` parts) is checked when data loads, in
`hf_grpo.data.images`; here:

* `inputs`: a prompt's expanded ids and its own vision tensors; a micro-batch's tensors built from its rows';
* `policy`: what the trainer accepts and refuses at init for a vision-language model, and ``freeze_vision_tower``.
"""
