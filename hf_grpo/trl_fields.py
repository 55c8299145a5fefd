"""The fields of TRL 1.16's `GRPOConfig` that hf_grpo names differently or has no counterpart for.

`GRPOConfig` inherits them, so a TRL script's config (keyword arguments, recipe keys, command-line flags) is accepted
field for field. Each one is implemented, mapped onto an hf_grpo field, or refused with an error naming what to use
instead; `hf_grpo.trl_compat.resolve_trl_fields` does that in `GRPOConfig.__post_init__`, and
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
    model_init_kwargs: dict[str, Any] | str | None = field(default=None, metadata={
        "help": "TRL's: keyword arguments for AutoModelForCausalLM.from_pretrained when the trainer's model is a "
                "string (a dict, or a JSON string on the command line). `dtype` and `attn_implementation` in it "
                "override the config fields of those names."})
    trust_remote_code: bool = field(default=False, metadata={
        "help": "TRL's: allow models, tokenizers and reward models that ship custom code (passed to from_pretrained)."})
    router_aux_loss_coef: float | None = field(default=None, metadata={
        "help": f"TRL's MoE load-balancing loss coefficient; not implemented (the loss has no auxiliary term). "
                f"{_REFUSED}"})
    cast_lm_head_to_fp32: bool = field(default=False, metadata={
        "help": f"TRL's ScaleRL option; not implemented (the chunked log-prob path computes in the head's dtype). "
                f"{_REFUSED}"})

    # ---- data and generation ----------------------------------------------------------------------------------------
    num_generations_eval: int | None = field(default=None, metadata={
        "help": f"TRL's completions per prompt in evaluation; evaluation here is greedy pass@1 (one completion per "
                f"prompt, hf_grpo.evaluation). {_REFUSED}"})
    ds3_gather_for_generation: bool = field(default=True, metadata={
        "help": "TRL's: under ZeRO-3, gather the policy's weights for generation. Always true here (weights are "
                "gathered one tensor at a time to push them into vLLM); false is refused."})
    shuffle_dataset: bool = field(default=True, metadata={
        "help": "TRL's: shuffle the training prompts (a seeded permutation per epoch); false keeps the dataset order."})
    pad_to_multiple_of: int | str | None = field(default="auto", metadata={
        "help": "TRL's: pad each micro-batch's prompt and completion lengths (a packed row's length) up to a multiple "
                "of this integer. `auto` and None: no padding beyond the micro-batch's own longest (TRL's `auto` pads "
                "only on Neuron)."})
    generation_batch_size: int | None = field(default=None, metadata={
        "help": "TRL's: completions per generation round over all processes. Sets steps_per_generation = "
                "generation_batch_size / (per_device_train_batch_size x processes); give one of the two."})
    generation_kwargs: dict | str | None = field(default=None, metadata={
        "help": "TRL's extra sampling arguments. Keys with a config field of the same meaning (temperature, top_p, "
                "top_k, min_p, repetition_penalty, stop / stop_strings, max_tokens / max_new_tokens) override that "
                "field, as in TRL; do_sample false is greedy decoding; other arguments of the backend "
                "(vllm.SamplingParams fields, or GenerationConfig attributes with generation_backend hf) are passed "
                "to it; keys the trainer sets itself (n, logprobs, num_beams, eos_token_id, ...) and unknown keys "
                "are errors naming them."})
    chat_template_kwargs: dict | str | None = field(default=None, metadata={
        "help": "TRL's: extra keyword arguments for tokenizer.apply_chat_template when encoding conversational "
                "prompts (e.g. {enable_thinking: false})."})
    cache_implementation: str | None = field(default=None, metadata={
        "help": f"TRL's KV-cache implementation for transformers generate; not implemented. {_REFUSED}"})
    use_transformers_continuous_batching: bool = field(default=False, metadata={
        "help": f"TRL's transformers continuous-batching generation; use generation_backend. {_REFUSED}"})
    transformers_continuous_batching_config: dict | str | None = field(default=None, metadata={
        "help": f"TRL's continuous-batching configuration; not implemented. {_REFUSED}"})
    use_transformers_paged: bool = field(default=False, metadata={
        "help": f"TRL's deprecated name of use_transformers_continuous_batching. {_REFUSED}"})
    max_tool_calling_iterations: int | None = field(default=None, metadata={
        "help": "TRL's: the most tool rounds per rollout (None: unlimited, bounded by max_completion_length). A turn "
                "that calls tools after the limit ends the rollout (termination reason max_turns)."})

    # ---- vLLM -------------------------------------------------------------------------------------------------------
    use_vllm: bool | None = field(default=None, metadata={
        "help": "TRL's: true is generation_backend=vllm, false generation_backend=hf. None: generation_backend "
                "decides (its default `auto` uses vLLM when installed, unlike TRL, which defaults to false)."})
    vllm_model_impl: str = field(default="vllm", metadata={
        "help": f"TRL's vLLM model implementation; only `vllm` (vLLM's own) is used here. {_REFUSED}"})
    vllm_structured_outputs_regex: str | None = field(default=None, metadata={
        "help": f"TRL's regex-constrained generation; not implemented. {_REFUSED}"})
    vllm_server_base_url: str | None = field(default=None, metadata={
        "help": "TRL's server URL; becomes vllm_server_urls=[url]. Takes precedence over host and port."})
    vllm_server_host: str | None = field(default=None, metadata={
        "help": "TRL's server host; with vllm_server_port becomes vllm_server_urls=[http://host:port]. None: not "
                "set (TRL's 0.0.0.0 is used when only the port is given, or for vllm_mode=server with use_vllm)."})
    vllm_server_port: int | None = field(default=None, metadata={
        "help": "TRL's server port (TRL's default 8000 when only the host is given); see vllm_server_host."})
    vllm_group_port: int = field(default=51216, metadata={
        "help": "TRL's port of the weight-update group. The NCCL group here picks a free port itself, so any "
                "other value is refused; see vllm_weight_transfer."})
    vllm_max_model_length: int | None = field(default=None, metadata={
        "help": "TRL's name of vllm_max_model_len (the vLLM context length)."})
    vllm_importance_sampling_mode: str | None = field(default=None, metadata={
        "help": "TRL's: token_truncate, token_mask, sequence_truncate or sequence_mask. *_truncate clips the "
                "train/inference ratio into [clip_min, clip_max]; *_mask zeroes it outside. None: "
                "<vllm_importance_sampling_level>_truncate (TRL's default is sequence_mask with clip_max 3)."})
    vllm_importance_sampling_clip_max: float | None = field(default=None, metadata={
        "help": "TRL's upper bound C_max of the ratio; None: vllm_importance_sampling_cap (2.0)."})
    vllm_importance_sampling_clip_min: float | None = field(default=None, metadata={
        "help": "TRL's lower bound C_min of the ratio; None: no lower bound."})

    # ---- algorithm --------------------------------------------------------------------------------------------------
    delta: float | None = field(default=None, metadata={
        "help": "TRL's two-sided clipping (INTELLECT-2): the unclipped ratio is capped at delta, so a large ratio "
                "with a negative advantage cannot blow up the loss. Must be > 1 + epsilon_high. None: off."})
    scale_rewards: str | None = field(default=None, metadata={
        "help": "TRL's: `group` (or true): (r - group mean) / group std, `batch`: (r - group mean) / std of the "
                "whole step's batch on all processes, `none` (or false): r - group mean. Maps onto "
                "advantage_estimator (grpo, grpo_batch_std, dr_grpo). None: advantage_estimator decides."})
    multi_objective_aggregation: str = field(default="sum_then_normalize", metadata={
        "help": "TRL's: `sum_then_normalize` (weighted sum of the reward functions, then advantages) or "
                "`normalize_then_sum` (GDPO: each function normalised within its group, the weighted sum then "
                "whitened over the step's batch on all processes; needs advantage_estimator grpo and no reward "
                "shaping)."})
    top_entropy_quantile: float = field(default=1.0, metadata={
        "help": "TRL's rho (Beyond the 80/20 rule): only the top-rho quantile of completion tokens by entropy, over "
                "the micro-batch on all processes, carry the policy-gradient term (the KL term keeps all tokens). "
                "1.0 keeps all; 0.0 keeps only the highest-entropy tokens."})
    sapo_temperature_neg: float = field(default=1.05, metadata={
        "help": f"TRL's SAPO loss parameter; loss_type sapo is not implemented. {_REFUSED}"})
    sapo_temperature_pos: float = field(default=1.0, metadata={
        "help": f"TRL's SAPO loss parameter; loss_type sapo is not implemented. {_REFUSED}"})
    vespo_k_pos: float = field(default=2.0, metadata={
        "help": f"TRL's VESPO loss parameter; loss_type vespo is not implemented. {_REFUSED}"})
    vespo_lambda_pos: float = field(default=3.0, metadata={
        "help": f"TRL's VESPO loss parameter; loss_type vespo is not implemented. {_REFUSED}"})
    vespo_k_neg: float = field(default=3.0, metadata={
        "help": f"TRL's VESPO loss parameter; loss_type vespo is not implemented. {_REFUSED}"})
    vespo_lambda_neg: float = field(default=2.0, metadata={
        "help": f"TRL's VESPO loss parameter; loss_type vespo is not implemented. {_REFUSED}"})
    sync_ref_model: bool = field(default=False, metadata={
        "help": "TRL's TR-DPO: every ref_model_sync_steps optimizer steps the reference model becomes "
                "ref_model_mixup_alpha x policy + (1 - alpha) x reference (every backend; needs beta > 0 and no "
                "LoRA, as in TRL)."})
    ref_model_mixup_alpha: float = field(default=0.6, metadata={
        "help": "TRL's TR-DPO alpha in [0, 1]: the policy's share of the reference after a sync_ref_model sync."})
    ref_model_sync_steps: int = field(default=512, metadata={
        "help": "TRL's TR-DPO tau: optimizer steps between sync_ref_model syncs."})
    entropy_coef: float = field(default=0.0, metadata={
        "help": f"TRL's entropy bonus coefficient; not implemented. {_REFUSED}"})
    use_adaptive_entropy: bool = field(default=False, metadata={
        "help": f"TRL's adaptive entropy control (Skywork-OR1); not implemented. {_REFUSED}"})
    entropy_coef_min: float = field(default=0.0, metadata={"help": f"TRL's adaptive entropy bound. {_REFUSED}"})
    entropy_coef_max: float = field(default=1.0, metadata={"help": f"TRL's adaptive entropy bound. {_REFUSED}"})
    entropy_coef_delta: float = field(default=0.005, metadata={"help": f"TRL's adaptive entropy step. {_REFUSED}"})
    entropy_target: float = field(default=0.2, metadata={"help": f"TRL's adaptive entropy target. {_REFUSED}"})
    off_policy_mask_threshold: float | None = field(default=None, metadata={
        "help": f"TRL's DeepSeek-V3.2 off-policy sequence masking; not implemented (ratio_skip_threshold is the "
                f"nearest option). {_REFUSED}"})

    # ---- logging ----------------------------------------------------------------------------------------------------
    log_completions: bool = field(default=False, metadata={
        "help": "TRL's: every logging_steps, print a table of the step's prompts, completions, rewards and "
                "advantages on the main process (rich), write it to <output_dir>/completions/completions_<step>.parquet "
                "and, with report_to wandb, log it as a wandb.Table (key `completions`)."})
    num_completions_to_print: int | None = field(default=None, metadata={
        "help": "TRL's: rows of the log_completions table; None prints all of the step's completions."})
    log_unique_prompts: bool = field(default=False, metadata={
        "help": "TRL's: the log_completions table shows each prompt once (its first completion)."})
    log_multimodal: bool = field(default=True, metadata={
        "help": "TRL's: log images with completions. Accepted; hf_grpo trains on text only, so it has nothing to log."})
    log_completions_hub_repo: str | None = field(default=None, metadata={
        "help": "TRL's: a Hub dataset repo id; the <output_dir>/completions parquet files are pushed to it every 2 "
                "minutes and at exit (needs log_completions and a token; checked when the trainer is built)."})
