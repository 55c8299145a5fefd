"""`GRPOConfig`: every knob of a run, as a `transformers.TrainingArguments` subclass.

Fields are grouped by purpose (model, data, algorithm, rewards, agents, logging; generation and vLLM in the base class
`hf_grpo.config.generation_fields.GenerationFields`). Recipes in
`recipes/*.yaml` map onto these fields one to one through `RunConfig` (see `hf_grpo.config.recipes`), which adds the
model, dataset, reward, adapter and quantization fields as arguments: here they sit at their defaults, outside
``__init__``, because TRL's scripts parse them with `ScriptArguments` and `ModelConfig` (`hf_grpo.config.run_fields`).
Names follow TRL's `GRPOConfig` where the two overlap, so a TRL recipe mostly carries over.

Batch arithmetic (checked in `__post_init__`):
- One *generation round* produces, on each process, ``per_device_train_batch_size * steps_per_generation``
  completions = that number / ``num_generations`` prompts times ``num_generations`` samples each. Groups never
  straddle processes, so advantages need no cross-process gather.
- Those completions are consumed by ``steps_per_generation`` micro-batches, ``num_iterations`` times. As in TRL it
  need not be a multiple of ``gradient_accumulation_steps``: a round may then end inside an optimizer step
  (`hf_grpo.learner.batching.normalizer_group` says how such a step's loss is normalised).

Every field of TRL 1.16's `GRPOConfig` is accepted too: the ones hf_grpo names differently or lacks are declared in
`hf_grpo.trl_compat.fields` (inherited) and resolved by `hf_grpo.trl_compat.config` (docs/trl_compatibility.md).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from dataclasses import dataclass, field

import torch

from ..trl_compat import config as trl_compat
from . import validation
from .generation_fields import GenerationFields
from .quantization_fields import check_quantization_fields
from .run_fields import run_field

logger = logging.getLogger(__name__)


class _Unset(int):
    """A field's default marked as not set by the user: `GRPOConfig.__post_init__` records the fact and stores the
    plain int. A value the user gives, from Python, a recipe or the command line, is a plain int, even the same
    number (argparse and the recipe loader pass a default through as the object it is)."""


# Agent prompts count their tool descriptions toward max_prompt_length only when the user set it.
DEFAULT_MAX_PROMPT_LENGTH = _Unset(512)


@dataclass
class GRPOConfig(GenerationFields):
    def __new__(cls, *args, **kwargs):
        # Runs before the dataclass __init__, whose unknown-keyword TypeError names no alternative.
        trl_compat.check_init_kwargs(cls, kwargs)
        return super().__new__(cls)

    # ---- model --------------------------------------------------------------------------------------
    # run_field: arguments of RunConfig, not of this class (TRL's scripts parse them next to it; run_fields.py).
    model_name_or_path: str = run_field("smollm2-135m")
    dtype: str = run_field("auto")
    attn_implementation: str | None = run_field(None)
    use_peft: bool = run_field(False)
    lora_r: int = run_field(16)
    lora_alpha: int = run_field(32)
    lora_dropout: float = run_field(0.05)
    lora_target_modules: list[str] | None = run_field(None)
    freeze_vision_tower: bool = field(
        default=False,
        metadata={
            "help": "Vision-language models: no gradient to the vision tower's weights (the projector and the language "
            "model still train). TRL's GRPOConfig has no such field. Under LoRA the adapter's target_modules decide."
        },
    )

    # ---- data ---------------------------------------------------------------------------------------
    dataset_name: str = run_field("arithmetic")
    prompt_column: str = field(default="prompt", metadata={"help": "Column holding the prompt in generic data."})
    system_prompt: str | None = field(
        default=None, metadata={"help": "System message prepended to every chat prompt that lacks one."}
    )
    max_prompt_length: int | None = field(
        default=DEFAULT_MAX_PROMPT_LENGTH,
        metadata={
            "help": "Prompts longer than this many tokens are dropped (and counted in the log). Tool descriptions and "
            "an environment's reset() text count toward it only when it is set; otherwise the generation engine's "
            "context bounds them (TRL 1.16 has no prompt limit; docs/agents.md)."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training rows."})
    eval_datasets: dict | str | None = field(
        default=None,
        metadata={
            "help": "Named evaluation sets, e.g. {gsm8k_dev: path/to/dev.jsonl}; accuracy is logged per set as "
            "eval_<name>_accuracy. A JSON string on the command line."
        },
    )
    eval_max_samples: int | None = field(default=None, metadata={"help": "Evaluate on at most N rows per set."})
    eval_reward: str | None = field(
        default=None,
        metadata={
            "help": "Reward (built-in name or dotted path) whose value >= 1 counts as correct in evaluation; "
            "defaults to the first of reward_funcs."
        },
    )

    # ---- algorithm ----------------------------------------------------------------------------------
    advantage_estimator: str = field(
        default="grpo",
        metadata={
            "help": "grpo (group mean/std), dr_grpo (group mean), rloo (leave-one-out), reinforce_pp (batch baseline)."
        },
    )
    advantage_eps: float = field(default=1e-4, metadata={"help": "Added to the std in normalised advantages."})
    reinforce_pp_whitening: str = field(
        default="sequence",
        metadata={
            "help": "reinforce_pp: whiten rewards over the batch's completions (`sequence`, each counts once) or over "
            "its loss tokens (`token`, each completion weighted by its length, as verl and OpenRLHF do)."
        },
    )
    loss_type: str = field(
        default="dapo",
        metadata={
            "help": "Loss aggregation: grpo (per-sequence mean), bnpo (local token mean), dapo (global token mean), "
            "dr_grpo (sum / (batch * max_completion_length)); TRL's objectives: cispo (capped, detached ratio "
            "times logp; epsilon_high is the cap), sapo (soft gate), luspo (per-sequence sums), vespo (gamma "
            "weight of the sequence ratio). See hf_grpo.algorithms.losses."
        },
    )
    epsilon: float = field(default=0.2, metadata={"help": "Lower clip range: ratio >= 1 - epsilon."})
    epsilon_high: float | None = field(
        default=None, metadata={"help": "Upper clip range (DAPO clip-higher, e.g. 0.28); defaults to epsilon."}
    )
    importance_sampling_level: str = field(
        default="token",
        metadata={"help": "token (GRPO/PPO ratio) or sequence (GSPO: geometric-mean ratio per sequence)."},
    )
    num_iterations: int = field(
        default=1, metadata={"help": "Passes over each generated batch (mu in the GRPO paper); > 1 uses old log-probs."}
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient to the reference model; 0 loads no reference."})
    kl_estimator: str = field(
        default="k3",
        metadata={
            "help": "KL estimator: k1, k2, k3, or k3+ (verl: k3's value with k2's gradient, which is the KL's gradient "
            "on-policy; k3's own gradient is not)."
        },
    )
    use_bias_correction_kl: bool | None = field(
        default=None,
        metadata={
            "help": "TRL's option: multiply the KL term by the importance ratio (with its gradient), which makes the "
            "k1 and k3 KL gradients unbiased, on-policy and with num_iterations > 1. None: on for k1 and k3 (TRL's "
            "default), off for k2 and k3+, whose gradients it would bias (setting it true for those is an error)."
        },
    )
    disable_dropout: bool = field(
        default=True,
        metadata={
            "help": "Set every dropout probability of the policy to 0 (nn.Dropout modules, LoRA's lora_dropout "
            "included, and attention dropout), so that old-policy, current and reference log-probs are the same "
            "deterministic function and the ratios carry no dropout noise. TRL's option; TRL defaults to false."
        },
    )
    mask_truncated_completions: bool = field(
        default=False,
        metadata={"help": "Exclude completions that hit max_completion_length without EOS from the loss (DAPO)."},
    )
    non_stop_penalty: bool = field(
        default=False,
        metadata={
            "help": "open-instruct's non-stop penalty: a completion that hits max_completion_length without EOS or a "
            "stop string gets total reward non_stop_penalty_value instead of its rewards' sum (DAPO's overlong shaping "
            "still adds on top; see the README for how the three truncation options combine)."
        },
    )
    non_stop_penalty_value: float = field(
        default=0.0, metadata={"help": "The total reward of a truncated completion under non_stop_penalty."}
    )
    ratio_skip_threshold: float | None = field(
        default=None,
        metadata={
            "help": "Drop from the loss (numerator only; normalisers as planned) every completion whose mean per-token "
            "importance ratio pi / pi_old exceeds this (ColossalChat's skip_threshold); counted as "
            "numerics/ratio_skipped_samples. Only a reused batch (num_iterations > 1, steps_per_generation > "
            "gradient_accumulation_steps, or old_logprobs_from_sampler) has ratios other than 1. None: off."
        },
    )
    ptx_dataset: str | None = field(
        default=None,
        metadata={
            "help": "Pretraining (PTX) auxiliary loss (InstructGPT, ColossalChat): a text corpus whose next-token loss "
            "is mixed into every optimizer step to limit forgetting. A .jsonl/.json file (column ptx_text_column), a "
            ".txt file (one document per line) or a `datasets` folder."
        },
    )
    ptx_coef: float = field(
        default=0.0,
        metadata={
            "help": "Weight of the PTX loss. The PTX loss is the mean next-token NLL over all PTX tokens of the "
            "optimizer step on all processes, so the coefficient means the same at any batch shape; logged as ptx_loss."
        },
    )
    ptx_batch_size: int = field(default=4, metadata={"help": "PTX sequences per micro-batch per process."})
    ptx_max_length: int = field(default=512, metadata={"help": "PTX sequences are truncated to this many tokens."})
    ptx_text_column: str = field(default="text", metadata={"help": "Text column of a .jsonl or datasets PTX corpus."})
    overlong_buffer_length: int | None = field(
        default=None,
        metadata={
            "help": "DAPO soft overlong punishment: the last N tokens before max_completion_length are penalised "
            "linearly; None disables."
        },
    )
    overlong_penalty_factor: float = field(default=1.0, metadata={"help": "Penalty at max_completion_length."})
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO dynamic sampling: drop groups whose success rate is outside dynamic_sampling_filter_range "
            "and generate more until the batch is full."
        },
    )
    dynamic_sampling_filter_range: list[float] = field(
        default_factory=lambda: [0.01, 0.99],
        metadata={"help": "[low, high] success rate a group must have to be kept."},
    )
    dynamic_sampling_success_threshold: float = field(
        default=1.0, metadata={"help": "A completion counts as a success when its total reward is at least this."}
    )
    dynamic_sampling_max_rounds: int = field(
        default=3, metadata={"help": "Extra generation rounds per step before topping up with rejected groups."}
    )
    dynamic_sampling_criterion: str = field(
        default="success_rate",
        metadata={
            "help": "Which groups dynamic sampling keeps. `success_rate` (DAPO): success rate within "
            "dynamic_sampling_filter_range. `reward_std`: any group whose total rewards differ, so a group with "
            "format variance but no correct answer is kept (it has gradient); only groups with zero advantage "
            "everywhere are dropped."
        },
    )
    skip_zero_advantage: bool = field(
        default=True,
        metadata={
            "help": "Skip the forward/backward of completions whose advantage is exactly 0 (e.g. groups that all "
            "succeed or all fail): with beta == 0 their gradient is exactly 0. Loss normalisers still count them. Off "
            "with an entropy bonus or a MoE load-balancing loss, which such completions also carry."
        },
    )
    logprob_path: str = field(
        default="auto",
        metadata={
            "help": "How per-token log-probs are computed. `chunked`: the final hidden states are projected to the "
            "vocabulary logprob_chunk_size tokens at a time, outside the model's forward (no full [B, C, V] "
            "logits). `model`: the model's own head inside its forward (full logits of the completion "
            "positions, then a chunked log-softmax). `auto`: model under DeepSpeed ZeRO-3 and FSDP, whose head "
            "weights are only gathered inside the forward, else chunked. Chunked is checked against the model's "
            "own logits at start and falls back to model (with a warning) if they differ."
        },
    )
    logprob_chunk_size: int | None = field(
        default=None,
        metadata={
            "help": "Positions per chunk when projecting to the vocabulary for log-probs and entropy, so "
            "full-vocabulary logits of a batch never sit in memory at once. None: as many as keep one chunk's "
            "float32 logits within 64 MiB (320 positions at a 49k vocabulary, 64 at 152k), so the memory it takes "
            "does not grow with the vocabulary."
        },
    )

    # ---- rewards ------------------------------------------------------------------------------------
    reward_funcs: list[str] | None = run_field(None)
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "One weight per reward function; default all 1."}
    )
    gated_reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions (by logged name, e.g. boxed_format) that count only for completions whose "
            "reward_gate value is > 0 (open-instruct's default for its format reward): a policy cannot farm them "
            "while its answers are wrong."
        },
    )
    reward_gate: str | None = field(
        default=None,
        metadata={"help": "The reward function (by logged name) that gates gated_reward_funcs; default the first one."},
    )
    reward_error: str = field(
        default="raise",
        metadata={
            "help": "When a reward function raises: raise (stop, after saving a checkpoint), zero (that function "
            "scores 0 for the batch) or skip (it abstains for the batch, like returning None). Errors are logged and "
            "counted as rewards/<name>/errors."
        },
    )
    reward_timeout: float | None = field(
        default=300.0,
        metadata={
            "help": "Seconds one call of a reward function may take. A call that runs out of time is retried once per "
            "sample under one more such limit (a step waits at most twice this) to find the sample that hangs; a "
            "sample not scored by then scores None for that function (left out of its total, and of training "
            "when no function scored it), is counted as rewards/<name>/timeouts and named in a warning. With a "
            "limit every synchronous function runs in a worker thread. None: no limit, and the first "
            "synchronous function runs in the calling thread as in TRL (needed by signal-based timeouts such as "
            "math_verify's defaults)."
        },
    )
    code_timeout_s: float = field(
        default=5.0, metadata={"help": "code reward: wall-clock and CPU seconds per test run."}
    )
    code_memory_mb: int = field(default=512, metadata={"help": "code reward: address-space limit per process, MiB."})
    code_workers: int | None = field(
        default=None, metadata={"help": "code reward: sandboxes running tests in parallel; default the number of CPUs."}
    )
    code_executor_url: str | None = field(
        default=None,
        metadata={
            "help": "code reward: run tests on a remote sandbox service (python -m hf_grpo.rewards.code.server) at "
            "this URL instead of locally."
        },
    )

    # ---- agents (multi-turn tool and environment rollouts, docs/agents.md) -----------------------------
    tools: list[str] | None = field(
        default=None,
        metadata={
            "help": "Tools the policy may call, by name (built-in: calculator, python) or module.function path. The "
            "trainer's tools= argument (callables, as in TRL) takes precedence."
        },
    )
    tool_protocol: str = field(
        default="auto",
        metadata={
            "help": "How tool calls are written: template (the model's chat template renders tools), fallback (hf_grpo "
            "describes the tools in the system prompt; <tool_call> JSON in, <tool_response> back) or auto "
            "(template when the chat template renders tools, calls and results; fallback when it ignores tools; an "
            "error at init when it does only part of that)."
        },
    )
    tool_parser: str | None = field(
        default=None,
        metadata={
            "help": "How the model's tool calls are read under the template protocol: hermes, llama3_json, qwen3_xml, "
            "glm45, harmony, gemma4, pythonic, mistral, or transformers (the tokenizer's own response_template via "
            "parse_response). None: the tokenizer's response_template if it has one, else the parser that reads back "
            "a call rendered by the chat template (checked at init; docs/agents.md lists the families)."
        },
    )
    max_tool_output_tokens: int | None = field(
        default=256,
        metadata={"help": "A tool result longer than this many tokens is cut, with a marker saying how much was cut."},
    )
    tool_timeout: float = field(
        default=30.0,
        metadata={"help": "Seconds a tool call may take; after that the model gets a timeout error message."},
    )
    max_concurrent_tools: int = field(
        default=16, metadata={"help": "Tool calls run concurrently per process, at most this many at once."}
    )

    resume_allow_changes: list[str] | None = field(
        default=None,
        metadata={
            "help": "Settings that may differ from the checkpoint's when resuming (e.g. [num_generations]). Without "
            "it, resuming with another seed, batch size, num_generations, steps_per_generation, accumulation, "
            "num_iterations, max_staleness, process count or training data is refused: the resumed run would skip or "
            "repeat prompts."
        },
    )

    # ---- budget -------------------------------------------------------------------------------------
    max_train_minutes: float | None = field(
        default=None,
        metadata={
            "help": "Stop after the optimizer step that crosses this many minutes of training wall-clock (evaluation "
            "time not counted), saving a checkpoint there; max_steps still bounds the run. None: no limit."
        },
    )
    save_every_minutes: float | None = field(
        default=None,
        metadata={
            "help": "Also save a checkpoint after the first optimizer step past every N minutes of training wall-clock "
            "(evaluation not counted), on top of save_strategy. None: off."
        },
    )

    # ---- logging ------------------------------------------------------------------------------------
    log_completions_steps: int = field(
        default=0,
        metadata={
            "help": "Every N steps write the step's rollouts (prompt, completion, rewards, advantage) to "
            "<output_dir>/rollouts/step_<N>.jsonl; 0 disables."
        },
    )
    plot_metrics: bool = field(
        default=True,
        metadata={
            "help": "At the end of training write <output_dir>/training_curves.png (reward and length per step)."
        },
    )
    # -- demo output (issue 14): held-out accuracy before/after training, quiet vLLM logs --
    heldout_eval_samples: int = field(
        default=0,
        metadata={
            "help": "Greedy accuracy (final number right, any format) of the base and the trained policy on this many "
            "held-out prompts the training set never draws, written to <output_dir>/heldout_accuracy.json and "
            "the plot. Needs an 'arithmetic[:N]' dataset_name (its held-out fold); 0 disables."
        },
    )
    verbose: bool = field(
        default=False,
        metadata={
            "help": "Show vLLM's start-up INFO logs and its per-sync 'Failed to load weights' warnings (harmless: "
            "buffers the in-place reload does not refill). Off: only errors from vLLM."
        },
    )
    recipe: str | None = field(
        default=None, metadata={"help": "The recipe file this config was read from (recorded in the model card)."}
    )

    # ---- TrainingArguments defaults suited to RL ----------------------------------------------------
    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision. None: what `accelerate launch` was configured with (mixed_precision), else "
            "on when a CUDA device supports bf16 and off on CPU."
        },
    )
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Recompute activations in the backward pass to save memory. None: on, as in TRL (on CPU too: "
            "without it the quickstart's 32-completion micro-batch took 11 GiB per process; docs/benchmarks.md, "
            "Memory)."
        },
    )
    output_dir: str | None = field(default="outputs/hf_grpo", metadata={"help": "Where checkpoints and logs go."})
    learning_rate: float = field(default=1e-6, metadata={"help": "Initial AdamW learning rate."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Completions per process per micro-batch."})
    logging_steps: float = field(
        default=10,
        metadata={
            "help": "Log every N optimizer steps (TRL's default, 10). Metrics of the steps since the last log are "
            "averaged into the next entry; those after the last multiple reach the end-of-training summary. The "
            "recipes set 1."
        },
    )
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Must stay False: reward functions receive every dataset column."}
    )

    def __post_init__(self):
        # Stored as a plain int (YAML, JSON and wandb see 512); `max_prompt_length_is_set` keeps what it was.
        self._max_prompt_length_default = isinstance(self.max_prompt_length, _Unset)
        if self._max_prompt_length_default:
            self.max_prompt_length = int(self.max_prompt_length)
        if isinstance(self.eval_datasets, str):
            text = self.eval_datasets.strip()
            self.eval_datasets = json.loads(text) if text.startswith("{") else {"eval": text}
        # Before TrainingArguments or the batch arithmetic below compute with a value of the wrong type or size.
        validation.coerce_and_check_types(self)
        validation.check_counts(self)
        if not self.use_cpu and int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
            # `accelerate launch` of several processes on a machine without CUDA: left alone, TrainingArguments reads
            # the (GPU) launch config, finds no GPU and gives every process a world of its own, i.e. N independent
            # runs writing one output_dir. use_cpu joins them into one gloo process group.
            logger.info(
                "%s processes and no CUDA device: training on CPU processes over gloo (use_cpu=True)",
                os.environ["WORLD_SIZE"],
            )
            self.use_cpu = True
        self._resolve_precision()
        super().__post_init__()
        trl_compat.resolve_trl_fields(self)
        trl_compat.resolve_liger_kernel(self)
        check_quantization_fields(self)
        self.steps_per_generation = self.steps_per_generation or self.gradient_accumulation_steps
        self.epsilon_high = self.epsilon if self.epsilon_high is None else self.epsilon_high
        self._backend_auto = self.generation_backend == "auto"
        if self._backend_auto:
            self.generation_backend = "vllm" if importlib.util.find_spec("vllm") is not None else "hf"
        if self.use_bias_correction_kl is None:  # TRL's default where it unbiases the gradient (see its help)
            self.use_bias_correction_kl = self.kl_estimator in ("k1", "k3")
        if self.vllm_server_urls is not None:  # also one word per URL, or comma-separated ones, from the CLI
            self.vllm_server_urls = trl_compat.split_list(self.vllm_server_urls)
        self.validate()
        self._built = True

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        # TRL's scripts assign model_init_kwargs after the config is built (`training_args.model_init_kwargs = ...`):
        # the config resolves a late assignment itself, as __post_init__ does, so that no other part writes it.
        if name == "model_init_kwargs" and self.__dict__.get("_built"):
            super().__setattr__(name, trl_compat.resolve_model_init_kwargs(self))
            check_quantization_fields(self)

    def _resolve_precision(self) -> None:
        """Fill ``bf16`` and ``gradient_checkpointing`` when left at None (see their help), before TrainingArguments
        reads them. DeepSpeed's config takes bf16 from the launcher while Trainer checks it against ``bf16``: a recipe
        that says nothing must follow the launcher, and one that contradicts it fails here with both values named."""
        cuda = torch.cuda.is_available() and not self.use_cpu
        launcher = os.environ.get("ACCELERATE_MIXED_PRECISION")  # set by `accelerate launch`
        if self.bf16 is None:
            if launcher is not None:
                self.bf16 = launcher == "bf16"
            else:
                self.bf16 = cuda and torch.cuda.is_bf16_supported() and not self.fp16
        deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
        if deepspeed and launcher in ("bf16", "fp16"):
            wanted = {"bf16": self.bf16, "fp16": self.fp16}
            if not wanted[launcher]:
                raise ValueError(
                    f"GRPOConfig: {launcher}={wanted[launcher]} but the accelerate config runs DeepSpeed "
                    f"with mixed_precision={launcher!r}; drop `{launcher}` from the recipe (it follows "
                    f"the launcher by default) or set mixed_precision in the accelerate config"
                )
        if self.gradient_checkpointing is None:
            self.gradient_checkpointing = True
        if self.gradient_checkpointing and self.gradient_checkpointing_kwargs is None:
            # Non-reentrant checkpointing works with frozen inputs (LoRA) and with ZeRO-3/FSDP2 parameter hooks.
            self.gradient_checkpointing_kwargs = {"use_reentrant": False}

    def policy_dtype(self, peft: bool) -> str:
        """The policy's weights dtype, ``dtype`` with ``auto`` resolved (see its help)."""
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if peft and torch.cuda.is_available() and not self.use_cpu else "float32"

    @property
    def engine_dtype(self) -> str:
        """vLLM's weights dtype: ``vllm_dtype``, or with ``auto`` the dtype the policy computes in."""
        if self.vllm_dtype != "auto":
            return self.vllm_dtype
        if self.bf16:
            return "bfloat16"
        if self.fp16:
            return "float16"
        return self.policy_dtype(self.use_peft)

    def validate(self) -> None:
        """Fail early, stating the rule that does not hold (`hf_grpo.config.validation`)."""
        validation.validate(self)

    @property
    def generation_backend_is_auto(self) -> bool:
        """Whether the backend was left to ``auto`` (vLLM when installed and able to load the model, else HF)."""
        return self._backend_auto

    @property
    def max_prompt_length_is_set(self) -> bool:
        """Whether the user set ``max_prompt_length`` (None included) rather than leaving its default."""
        return not self._max_prompt_length_default or self.max_prompt_length != DEFAULT_MAX_PROMPT_LENGTH

    @property
    def prompts_per_generation(self) -> int:
        """Unique prompts each process draws for one generation round."""
        return self.per_device_train_batch_size * self.steps_per_generation // self.num_generations
