"""The learner: a scored round to micro-batches, and a micro-batch to its loss.

* `global_stats`: advantages and quantiles that need every process's batch;
* `microbatch`: the micro-batch record (`MicroBatch`) the loss receives;
* `batching`, `packing`: samples to padded or packed micro-batches, with their loss normalisers;
* `logprobs`: per-token log-probs and entropy without full-vocabulary float32 logits;
* `scoring`: the log-prob passes of the policy and the reference on a micro-batch;
* `loss_step`: one micro-batch's loss (policy term, entropy bonus, MoE auxiliary loss, PTX);
* `ptx`: the pretraining (PTX) batches and their next-token loss.
"""
