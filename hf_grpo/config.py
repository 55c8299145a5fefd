"""`GRPOConfig`: every knob of a run, as a `transformers.TrainingArguments` subclass.

Fields are grouped by purpose (model, data, generation, algorithm, rewards, logging). Recipes in
`recipes/*.yaml` map onto these fields one to one (see `hf_grpo.recipes`). Names follow TRL's `GRPOConfig`
where the two overlap, so a TRL recipe mostly carries over.

Batch arithmetic (checked in `__post_init__`):
- One *generation round* produces, on each process, ``per_device_train_batch_size * steps_per_generation``
  completions = that number / ``num_generations`` prompts times ``num_generations`` samples each. Groups never
  straddle processes, so advantages need no cross-process gather.
- Those completions are consumed by ``steps_per_generation`` micro-batches, ``num_iterations`` times.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from transformers import TrainingArguments

from .algorithms import ADVANTAGE_ESTIMATORS, IMPORTANCE_SAMPLING_LEVELS, KL_ESTIMATORS, LOSS_TYPES

GENERATION_BACKENDS = ("hf",)


@dataclass
class GRPOConfig(TrainingArguments):
    # ---- model --------------------------------------------------------------------------------------
    model_name_or_path: str = field(default="smollm2-135m", metadata={
        "help": "Hub id, local path, or `smollm2-135m` for the embedded SmolLM2-135M-Instruct shipped with the "
                "install. Ignored when a model object is passed to the trainer."})
    dtype: str = field(default="float32", metadata={
        "help": "Weights dtype for the trained policy: float32, bfloat16, float16 or auto."})
    attn_implementation: str | None = field(default=None, metadata={
        "help": "Attention kernel passed to `from_pretrained` (e.g. sdpa, flash_attention_2)."})
    use_peft: bool = field(default=False, metadata={"help": "Train a LoRA adapter instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] | None = field(default=None, metadata={
        "help": "Module names to adapt; None adapts all linear layers except the output head."})

    # ---- data ---------------------------------------------------------------------------------------
    dataset_name: str = field(default="arithmetic", metadata={
        "help": "Training prompts: a JSONL file (ColossalChat math/code rows, raw GSM8K, or rows with a prompt "
                "column), a `datasets` folder or file, or `arithmetic[:N]` for the generated embedded task."})
    prompt_column: str = field(default="prompt", metadata={"help": "Column holding the prompt in generic data."})
    system_prompt: str | None = field(default=None, metadata={
        "help": "System message prepended to every chat prompt that lacks one."})
    max_prompt_length: int | None = field(default=512, metadata={
        "help": "Prompts longer than this many tokens are dropped (and counted in the log)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training rows."})
    eval_datasets: dict | str | None = field(default=None, metadata={
        "help": "Named evaluation sets, e.g. {gsm8k_dev: path/to/dev.jsonl}; accuracy is logged per set as "
                "eval_<name>_accuracy. A JSON string on the command line."})
    eval_max_samples: int | None = field(default=None, metadata={"help": "Evaluate on at most N rows per set."})
    eval_reward: str | None = field(default=None, metadata={
        "help": "Reward (built-in name or dotted path) whose value >= 1 counts as correct in evaluation; "
                "defaults to the first of reward_funcs."})

    # ---- generation ---------------------------------------------------------------------------------
    generation_backend: str = field(default="hf", metadata={
        "help": "Who samples completions: `hf` (transformers generate on the training processes)."})
    num_generations: int = field(default=8, metadata={"help": "Completions sampled per prompt (the group size G)."})
    max_completion_length: int = field(default=256, metadata={"help": "Maximum new tokens per completion."})
    temperature: float = field(default=1.0, metadata={
        "help": "Sampling temperature (also applied to training log-probs)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass."})
    top_k: int = field(default=0, metadata={"help": "Top-k sampling; 0 disables."})
    min_p: float = field(default=0.0, metadata={"help": "Min-p sampling; 0 disables."})
    repetition_penalty: float = field(default=1.0, metadata={"help": "Repetition penalty; 1 disables."})
    stop: list[str] | None = field(default=None, metadata={"help": "Extra stop strings besides the EOS token."})
    steps_per_generation: int | None = field(default=None, metadata={
        "help": "Micro-batches served by one generation round; defaults to gradient_accumulation_steps "
                "(one round per optimizer step)."})
    generation_chunk_size: int = field(default=64, metadata={
        "help": "Most sequences per `generate` call (HF backend), to bound memory."})

    # ---- algorithm ----------------------------------------------------------------------------------
    advantage_estimator: str = field(default="grpo", metadata={
        "help": "grpo (group mean/std), dr_grpo (group mean), rloo (leave-one-out), reinforce_pp (batch baseline)."})
    advantage_eps: float = field(default=1e-4, metadata={"help": "Added to the std in normalised advantages."})
    loss_type: str = field(default="dapo", metadata={
        "help": "Loss aggregation: grpo (per-sequence mean), bnpo (local token mean), dapo (global token mean), "
                "dr_grpo (sum / (batch * max_completion_length))."})
    epsilon: float = field(default=0.2, metadata={"help": "Lower clip range: ratio >= 1 - epsilon."})
    epsilon_high: float | None = field(default=None, metadata={
        "help": "Upper clip range (DAPO clip-higher, e.g. 0.28); defaults to epsilon."})
    importance_sampling_level: str = field(default="token", metadata={
        "help": "token (GRPO/PPO ratio) or sequence (GSPO: geometric-mean ratio per sequence)."})
    num_iterations: int = field(default=1, metadata={
        "help": "Passes over each generated batch (mu in the GRPO paper); > 1 uses old log-probs."})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient to the reference model; 0 loads no reference."})
    kl_estimator: str = field(default="k3", metadata={"help": "KL estimator: k1, k2 or k3."})
    mask_truncated_completions: bool = field(default=False, metadata={
        "help": "Exclude completions that hit max_completion_length without EOS from the loss (DAPO)."})
    overlong_buffer_length: int | None = field(default=None, metadata={
        "help": "DAPO soft overlong punishment: the last N tokens before max_completion_length are penalised "
                "linearly; None disables."})
    overlong_penalty_factor: float = field(default=1.0, metadata={"help": "Penalty at max_completion_length."})
    dynamic_sampling: bool = field(default=False, metadata={
        "help": "DAPO dynamic sampling: drop groups whose success rate is outside dynamic_sampling_filter_range "
                "and generate more until the batch is full."})
    dynamic_sampling_filter_range: list[float] = field(default_factory=lambda: [0.01, 0.99], metadata={
        "help": "[low, high] success rate a group must have to be kept."})
    dynamic_sampling_success_threshold: float = field(default=1.0, metadata={
        "help": "A completion counts as a success when its total reward is at least this."})
    dynamic_sampling_max_rounds: int = field(default=3, metadata={
        "help": "Extra generation rounds per step before topping up with rejected groups."})
    skip_zero_advantage: bool = field(default=True, metadata={
        "help": "Skip the forward/backward of completions whose advantage is exactly 0 (e.g. groups that all succeed "
                "or all fail): with beta == 0 their gradient is exactly 0. Loss normalisers still count them."})
    logprob_chunk_size: int = field(default=1024, metadata={
        "help": "Tokens per chunk when projecting to the vocabulary for log-probs and entropy, so full-vocabulary "
                "logits of a batch never sit in memory at once."})

    # ---- rewards ------------------------------------------------------------------------------------
    reward_funcs: list[str] | None = field(default=None, metadata={
        "help": "Reward functions: built-in names (boxed, think_answer_tags, format, boxed_format, gsm8k) or "
                "dotted import paths (my_pkg.rewards.fn)."})
    reward_weights: list[float] | None = field(default=None, metadata={
        "help": "One weight per reward function; default all 1."})

    # ---- logging ------------------------------------------------------------------------------------
    log_completions_steps: int = field(default=0, metadata={
        "help": "Every N steps write the step's rollouts (prompt, completion, rewards, advantage) to "
                "<output_dir>/rollouts/step_<N>.jsonl; 0 disables."})
    plot_metrics: bool = field(default=True, metadata={
        "help": "At the end of training write <output_dir>/training_curves.png (reward and length per step)."})
    recipe: str | None = field(default=None, metadata={
        "help": "The recipe file this config was read from (recorded in the model card)."})

    # ---- TrainingArguments defaults suited to RL ----------------------------------------------------
    output_dir: str | None = field(default="outputs/hf_grpo", metadata={"help": "Where checkpoints and logs go."})
    learning_rate: float = field(default=1e-6, metadata={"help": "Initial AdamW learning rate."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Completions per process per micro-batch."})
    logging_steps: float = field(default=1, metadata={"help": "Log every N optimizer steps."})
    remove_unused_columns: bool = field(default=False, metadata={
        "help": "Must stay False: reward functions receive every dataset column."})

    def __post_init__(self):
        if isinstance(self.eval_datasets, str):
            text = self.eval_datasets.strip()
            self.eval_datasets = json.loads(text) if text.startswith("{") else {"eval": text}
        super().__post_init__()
        self.steps_per_generation = self.steps_per_generation or self.gradient_accumulation_steps
        self.epsilon_high = self.epsilon if self.epsilon_high is None else self.epsilon_high
        self.validate()

    def validate(self) -> None:
        """Fail early, stating the rule that does not hold."""
        def check(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(f"GRPOConfig: {message}")

        def one_of(name: str, allowed: tuple[str, ...]) -> None:
            check(getattr(self, name) in allowed, f"{name}={getattr(self, name)!r} is not one of {allowed}")

        one_of("generation_backend", GENERATION_BACKENDS)
        one_of("advantage_estimator", ADVANTAGE_ESTIMATORS)
        one_of("loss_type", LOSS_TYPES)
        one_of("importance_sampling_level", IMPORTANCE_SAMPLING_LEVELS)
        one_of("kl_estimator", KL_ESTIMATORS)
        check(self.remove_unused_columns is False, "remove_unused_columns must be False (rewards read dataset columns)")
        check(self.num_generations >= 1, f"num_generations must be >= 1, got {self.num_generations}")
        check(self.num_generations >= 2 or self.advantage_estimator == "reinforce_pp",
              f"advantage_estimator={self.advantage_estimator!r} compares samples within a group, so "
              f"num_generations must be >= 2 (got {self.num_generations}); use reinforce_pp for G=1")
        per_round = self.per_device_train_batch_size * self.steps_per_generation
        check(per_round % self.num_generations == 0,
              f"each process generates whole groups: per_device_train_batch_size ({self.per_device_train_batch_size})"
              f" x steps_per_generation ({self.steps_per_generation}) = {per_round} completions must be a multiple "
              f"of num_generations ({self.num_generations})")
        check(self.steps_per_generation % self.gradient_accumulation_steps == 0,
              f"steps_per_generation ({self.steps_per_generation}) must be a multiple of gradient_accumulation_steps "
              f"({self.gradient_accumulation_steps}) so a generation round ends on an optimizer step")
        check(self.num_iterations >= 1, f"num_iterations must be >= 1, got {self.num_iterations}")
        check(self.max_completion_length >= 1, "max_completion_length must be >= 1")
        check(0 <= self.epsilon < 1, f"epsilon must be in [0, 1), got {self.epsilon}")
        check(self.epsilon_high >= 0, f"epsilon_high must be >= 0, got {self.epsilon_high}")
        check(self.beta >= 0, f"beta must be >= 0, got {self.beta}")
        check(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        check(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        check(self.logprob_chunk_size >= 1, "logprob_chunk_size must be >= 1")
        if self.overlong_buffer_length is not None:
            check(0 < self.overlong_buffer_length <= self.max_completion_length,
                  f"overlong_buffer_length ({self.overlong_buffer_length}) must be in (0, max_completion_length="
                  f"{self.max_completion_length}]")
        low, high = (list(self.dynamic_sampling_filter_range) + [None, None])[:2]
        check(len(self.dynamic_sampling_filter_range) == 2 and 0 <= low <= high <= 1,
              f"dynamic_sampling_filter_range must be [low, high] with 0 <= low <= high <= 1, "
              f"got {self.dynamic_sampling_filter_range}")
        check(self.dynamic_sampling_max_rounds >= 0, "dynamic_sampling_max_rounds must be >= 0")
        if self.reward_weights is not None and self.reward_funcs is not None:
            check(len(self.reward_weights) == len(self.reward_funcs),
                  f"reward_weights has {len(self.reward_weights)} entries but reward_funcs has "
                  f"{len(self.reward_funcs)} ({self.reward_funcs})")
        check(self.log_completions_steps >= 0, "log_completions_steps must be >= 0")

    @property
    def prompts_per_generation(self) -> int:
        """Unique prompts each process draws for one generation round."""
        return self.per_device_train_batch_size * self.steps_per_generation // self.num_generations
