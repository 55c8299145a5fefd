"""The fields of TRL 1.16's `GRPOConfig` that hf_grpo names differently or has no counterpart for.

`GRPOConfig` inherits them, so a TRL script's config (keyword arguments, recipe keys, command-line flags) is accepted
field for field. Each one is implemented, mapped onto an hf_grpo field, or refused with an error naming what to use
instead; `hf_grpo.trl_compat.config.resolve_trl_fields` does that in `GRPOConfig.__post_init__`, and
docs/trl_compatibility.md lists the status of every field.

Departures from TRL: fields that TRL defaults to a value with a different hf_grpo default (``use_vllm``, the server
host/port, ``vllm_importance_sampling_mode`` and its bounds, ``scale_rewards``) default to None here, meaning "not
set": the hf_grpo field they map onto then keeps its own default, and a value that is set must agree with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import TrainingArguments

_REFUSED = "Refused unless left at TRL's default; see docs/trl_compatibility.md."


@dataclass
class TRLFields(TrainingArguments):
    # ---- model ----------------------------------------------------------------------------------------------------
    model_init_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "TRL's: keyword arguments for AutoModelForCausalLM.from_pretrained when the trainer's model is a "
            "string (a dict, or a JSON string on the command line). `dtype` and `attn_implementation` in it "
            "override the config fields of those names."
        },
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={
            "help": "TRL's: allow models, tokenizers and reward models that ship custom code (passed to "
            "from_pretrained)."
        },
    )
    router_aux_loss_coef: float | None = field(
        default=None,
        metadata={
            "help": "TRL's: weight of a Mixture-of-Experts model's load-balancing loss, added to the training loss "
            "(the model is run with output_router_logits). None: the model config's own router_aux_loss_coef; 0 turns "
            "it off. An error with a model that returns no router logits."
        },
    )
    cast_lm_head_to_fp32: bool = field(
        default=False,
        metadata={
            "help": "TRL's (ScaleRL): the output head of the policy and reference models holds float32 weights and "
            "computes float32 logits while the rest of a bf16/fp16 model keeps its dtype (hf_grpo.models.lm_head)."
        },
    )

    # ---- data and generation ----------------------------------------------------------------------------------------
    num_generations_eval: int | None = field(
        default=None,
        metadata={
            "help": "TRL's completions sampled per prompt in evaluation (None: num_generations). They give "
            "eval_<name>_mean_accuracy@k, eval_<name>_pass@k and TRL's eval_loss (the GRPO loss on them); the "
            "greedy accuracy is reported as well (hf_grpo.evaluation.in_training)."
        },
    )
    ds3_gather_for_generation: bool = field(
        default=True,
        metadata={
            "help": "TRL's: under ZeRO-3, gather the whole policy once per HF generate call (true) or let ZeRO-3 "
            "gather each layer as its forward runs (false: slower, for models that do not fit on one device). "
            "false needs generation_backend hf (vLLM gets its weights one tensor at a time either way)."
        },
    )
    shuffle_dataset: bool = field(
        default=True,
        metadata={
            "help": "TRL's: shuffle the training prompts (a seeded permutation per epoch); false keeps the dataset "
            "order."
        },
    )
    pad_to_multiple_of: int | str | None = field(
        default="auto",
        metadata={
            "help": "TRL's: pad each micro-batch's prompt and completion lengths (a packed row's length) up to a "
            "multiple of this integer. `auto` and None: no padding beyond the micro-batch's own longest (TRL's `auto` "
            "pads only on Neuron)."
        },
    )
    generation_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "TRL's: completions per generation round over all processes. Sets steps_per_generation = "
            "generation_batch_size / (per_device_train_batch_size x processes); give one of the two."
        },
    )
    generation_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "TRL's extra sampling arguments. Keys with a config field of the same meaning (temperature, top_p, "
            "top_k, min_p, repetition_penalty, stop / stop_strings, max_tokens / max_new_tokens) override that "
            "field, as in TRL; do_sample false is greedy decoding; other arguments of the backend "
            "(vllm.SamplingParams fields, or GenerationConfig attributes with generation_backend hf) are passed "
            "to it; keys the trainer sets itself (n, logprobs, num_beams, eos_token_id, ...) and unknown keys "
            "are errors naming them."
        },
    )
    chat_template_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "TRL's: extra keyword arguments for tokenizer.apply_chat_template when encoding conversational "
            "prompts (e.g. {enable_thinking: false})."
        },
    )
    cache_implementation: str | None = field(
        default=None,
        metadata={
            "help": "TRL's: KV-cache implementation passed to transformers generate (e.g. `static`), with "
            "generation_backend hf only. None: generate's default."
        },
    )
    use_transformers_continuous_batching: bool = field(
        default=False,
        metadata={
            "help": "TRL's: generate with transformers' continuous batching (paged KV cache); true is "
            "generation_backend=hf_continuous."
        },
    )
    transformers_continuous_batching_config: dict | str | None = field(
        default=None,
        metadata={
            "help": "TRL's: keyword arguments for transformers.generation.ContinuousBatchingConfig (a dict, or a JSON "
            "string on the command line), with generation_backend hf_continuous only. Without a device the "
            "KV cache is sized to each call's workload unless this sets num_blocks or max_memory_percent."
        },
    )
    use_transformers_paged: bool = field(
        default=False,
        metadata={"help": "TRL's deprecated name of use_transformers_continuous_batching (true sets it)."},
    )
    max_tool_calling_iterations: int | None = field(
        default=None,
        metadata={
            "help": "TRL's: the most tool rounds per rollout (None: unlimited, bounded by max_completion_length). A "
            "turn that calls tools after the limit ends the rollout (termination reason max_turns)."
        },
    )

    # ---- vLLM -------------------------------------------------------------------------------------------------------
    use_vllm: bool | None = field(
        default=None,
        metadata={
            "help": "TRL's: true is generation_backend=vllm, false generation_backend=hf. None: generation_backend "
            "decides (its default `auto` uses vLLM when installed, unlike TRL, which defaults to false)."
        },
    )
    vllm_model_impl: str = field(
        default="vllm",
        metadata={
            "help": f"TRL's vLLM model implementation. Only `vllm` here: vLLM's `transformers` backend breaks the "
            f"colocated trainer's model (see docs/trl_compatibility.md); for a server pass `--model-impl "
            f"transformers` to `hf-grpo serve`. {_REFUSED}"
        },
    )
    vllm_structured_outputs_regex: str | None = field(
        default=None,
        metadata={
            "help": "TRL's: a regex every completion must match (vLLM structured outputs), for training and evaluation "
            "generation; generation_backend vllm only (colocated or server). None: unconstrained. The sampling "
            "log-probs are then the constrained distribution's (a forced token's is 0), so sampling/logp_difference "
            "measures the constraint and importance-sampling corrections down-weight forced tokens (TRL's engine "
            "returns raw log-probs, before the mask)."
        },
    )
    vllm_server_base_url: None | str | list[str] = field(
        default=None,
        metadata={
            "help": "TRL's server URL, or (beyond TRL) a list of them or a comma-separated string: a fleet of "
            "servers; becomes vllm_server_urls. Takes precedence over host and port."
        },
    )
    vllm_server_host: None | str | list[str] = field(
        default=None,
        metadata={
            "help": "TRL's server host, or (beyond TRL) a list of hosts or a comma-separated string, each served on "
            "vllm_server_port; becomes vllm_server_urls=[http://host:port, ...]. None: not set (TRL's 0.0.0.0 is "
            "used when only the port is given, or for vllm_mode=server with use_vllm)."
        },
    )
    vllm_server_port: int | None = field(
        default=None,
        metadata={"help": "TRL's server port (TRL's default 8000 when only the host is given); see vllm_server_host."},
    )
    vllm_group_port: int | None = field(
        default=None,
        metadata={
            "help": "TRL's: the rendezvous port of the NCCL weight-transfer group with the vLLM servers (server mode, "
            "vllm_weight_transfer nccl), opened on the trainer's main process. None: a free port is picked "
            "(TRL's default is the fixed 51216)."
        },
    )
    vllm_max_model_length: int | None = field(
        default=None, metadata={"help": "TRL's name of vllm_max_model_len (the vLLM context length)."}
    )
    vllm_importance_sampling_mode: str | None = field(
        default=None,
        metadata={
            "help": "TRL's: token_truncate, token_mask, sequence_truncate or sequence_mask. *_truncate clips the "
            "train/inference ratio into [clip_min, clip_max]; *_mask zeroes it outside. None: "
            "<vllm_importance_sampling_level>_truncate (TRL's default is sequence_mask with clip_max 3)."
        },
    )
    vllm_importance_sampling_clip_max: float | None = field(
        default=None,
        metadata={"help": "TRL's upper bound C_max of the ratio; None: vllm_importance_sampling_cap (2.0)."},
    )
    vllm_importance_sampling_clip_min: float | None = field(
        default=None, metadata={"help": "TRL's lower bound C_min of the ratio; None: no lower bound."}
    )

    # ---- algorithm --------------------------------------------------------------------------------------------------
    delta: float | None = field(
        default=None,
        metadata={
            "help": "TRL's two-sided clipping (INTELLECT-2): the unclipped ratio is capped at delta, so a large ratio "
            "with a negative advantage cannot blow up the loss. Must be > 1 + epsilon_high. None: off."
        },
    )
    scale_rewards: str | None = field(
        default=None,
        metadata={
            "help": "TRL's: `group` (or true): (r - group mean) / group std, `batch`: (r - group mean) / std of the "
            "whole step's batch on all processes, `none` (or false): r - group mean. Maps onto "
            "advantage_estimator (grpo, grpo_batch_std, dr_grpo). None: advantage_estimator decides."
        },
    )
    multi_objective_aggregation: str = field(
        default="sum_then_normalize",
        metadata={
            "help": "TRL's: `sum_then_normalize` (weighted sum of the reward functions, then advantages) or "
            "`normalize_then_sum` (GDPO: each function normalised within its group, the weighted sum then "
            "whitened over the step's batch on all processes; needs advantage_estimator grpo and no reward "
            "shaping)."
        },
    )
    top_entropy_quantile: float = field(
        default=1.0,
        metadata={
            "help": "TRL's rho (Beyond the 80/20 rule): only the top-rho quantile of completion tokens by entropy, "
            "over the micro-batch on all processes, carry the policy-gradient term (the KL term keeps all tokens). 1.0 "
            "keeps all; 0.0 keeps only the highest-entropy tokens."
        },
    )
    sapo_temperature_neg: float = field(
        default=1.05,
        metadata={"help": "TRL's: loss_type sapo's gate temperature for completions with a non-positive advantage."},
    )
    sapo_temperature_pos: float = field(
        default=1.0,
        metadata={"help": "TRL's: loss_type sapo's gate temperature for completions with a positive advantage."},
    )
    vespo_k_pos: float = field(
        default=2.0,
        metadata={
            "help": "TRL's: vespo's weight phi(w) = exp(lambda) w^k exp(-lambda w) of the sequence ratio w: "
            "the power k for advantages >= 0 (down-weights sequence ratios below 1)."
        },
    )
    vespo_lambda_pos: float = field(
        default=3.0,
        metadata={
            "help": "TRL's: vespo's weight phi(w) = exp(lambda) w^k exp(-lambda w) of the sequence ratio w: "
            "the decay lambda for advantages >= 0 (down-weights sequence ratios above 1)."
        },
    )
    vespo_k_neg: float = field(
        default=3.0,
        metadata={
            "help": "TRL's: vespo's weight phi(w) = exp(lambda) w^k exp(-lambda w) of the sequence ratio w: "
            "the power k for negative advantages."
        },
    )
    vespo_lambda_neg: float = field(
        default=2.0,
        metadata={
            "help": "TRL's: vespo's weight phi(w) = exp(lambda) w^k exp(-lambda w) of the sequence ratio w: "
            "the decay lambda for negative advantages."
        },
    )
    sync_ref_model: bool = field(
        default=False,
        metadata={
            "help": "TRL's TR-DPO: every ref_model_sync_steps optimizer steps the reference model becomes "
            "ref_model_mixup_alpha x policy + (1 - alpha) x reference (every backend; needs beta > 0 and no "
            "LoRA, as in TRL)."
        },
    )
    ref_model_mixup_alpha: float = field(
        default=0.6,
        metadata={
            "help": "TRL's TR-DPO alpha in [0, 1]: the policy's share of the reference after a sync_ref_model sync."
        },
    )
    ref_model_sync_steps: int = field(
        default=512, metadata={"help": "TRL's TR-DPO tau: optimizer steps between sync_ref_model syncs."}
    )
    entropy_coef: float = field(
        default=0.0,
        metadata={
            "help": "TRL's: the loss minus entropy_coef times the mean per-token entropy of the loss tokens (the same "
            "meaning for every loss_type). With use_adaptive_entropy, the starting coefficient. 0: off."
        },
    )
    use_adaptive_entropy: bool = field(
        default=False,
        metadata={
            "help": "TRL's adaptive entropy control (Skywork-OR1): each optimizer step moves entropy_coef by "
            "entropy_coef_delta, up when the step's entropy is at or below entropy_target, down otherwise; the "
            "bonus applies only while the entropy is at or below the target. Saved in checkpoints."
        },
    )
    entropy_coef_min: float = field(default=0.0, metadata={"help": "TRL's: lower bound of the adaptive coefficient."})
    entropy_coef_max: float = field(default=1.0, metadata={"help": "TRL's: upper bound of the adaptive coefficient."})
    entropy_coef_delta: float = field(
        default=0.005, metadata={"help": "TRL's: the adaptive coefficient's change per optimizer step."}
    )
    entropy_target: float = field(
        default=0.2, metadata={"help": "TRL's: the mean per-token entropy adaptive control steers towards."}
    )
    off_policy_mask_threshold: float | None = field(
        default=None,
        metadata={
            "help": "TRL's DeepSeek-V3.2 off-policy sequence mask: a completion with a negative advantage whose mean "
            "per-token log pi_sampler - log pi_theta exceeds this leaves the loss (sampler log-probs from vLLM, "
            "else the old policy's). None: off."
        },
    )

    # ---- logging ----------------------------------------------------------------------------------------------------
    log_completions: bool = field(
        default=False,
        metadata={
            "help": "TRL's: every logging_steps, print a table of the step's prompts, completions, rewards and "
            "advantages on the main process (rich), write it to <output_dir>/completions/completions_<step>.parquet "
            "and, with report_to wandb, log it as a wandb.Table (key `completions`)."
        },
    )
    num_completions_to_print: int | None = field(
        default=None,
        metadata={"help": "TRL's: rows of the log_completions table; None prints all of the step's completions."},
    )
    log_unique_prompts: bool = field(
        default=False,
        metadata={"help": "TRL's: the log_completions table shows each prompt once (its first completion)."},
    )
    log_multimodal: bool = field(
        default=True,
        metadata={
            "help": "TRL's: with log_completions and report_to wandb, the W&B completions table has an image "
            "column (each row's prompt images). The parquet files and the printed table are text either way."
        },
    )
    log_completions_hub_repo: str | None = field(
        default=None,
        metadata={
            "help": "TRL's: a Hub dataset repo id; the <output_dir>/completions parquet files are pushed to it every 2 "
            "minutes and at exit (needs log_completions and a token; checked when the trainer is built)."
        },
    )
