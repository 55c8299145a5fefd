"""Several machines ("nodes"): which processes own which files, checked before the first step.

`accelerate launch --num_machines N` (torchrun underneath) numbers the processes node by node: node ``k`` holds a
contiguous block of global ranks, and each node's first process has local rank 0. Two kinds of work follow from that:

* **Once per run** (the global main process): logs, metrics, the completions table, the Hub push.
* **Once per filesystem**: checkpoints. With one ``output_dir`` shared by every node (the usual cluster setup) only
  the global main process writes the files `Trainer` writes once; with node-local disks (``save_on_each_node``, as
  `TrainingArguments` names it) each node's local main process writes its own copy, and DeepSpeed writes its node's
  shards there (transformers sets DeepSpeed's ``use_node_local_storage``).

Getting that choice wrong is silent in `Trainer`: ``save_on_each_node`` on a shared directory makes every node's local
main write the same files at the same time, and node-local disks without it leave the other nodes with no checkpoint,
so a restart resumes node 0 and starts the others from scratch. `check_output_dir_sharing` finds out which case the
run is in (each node's local main drops a marker in ``output_dir`` and counts the markers it sees) and refuses the
wrong setting, naming the directory and the fix. `check_same_resume_point` refuses a restart whose processes would
resume from different checkpoints (a node whose disk lacks the newest one, or one still being written elsewhere).

The embedded model's conversion is done once per filesystem under a file lock (`hf_grpo.models.loading`); datasets
are read into memory by every process, without a cache to race on.
"""

from __future__ import annotations

import os
import uuid

from ..errors import InputError

MARKERS = ".hf_grpo_nodes"


def node_count(accelerator) -> int:
    """Number of machines in the run: the processes with local rank 0 (one per node, whatever the launcher)."""
    if accelerator.num_processes == 1:
        return 1
    from accelerate.utils import gather_object

    return sum(gather_object([accelerator.local_process_index == 0]))


def check_output_dir_sharing(args, accelerator) -> bool | None:
    """Refuse ``save_on_each_node`` on an ``output_dir`` every node sees, and node-local ``output_dir``s without it.

    Returns whether the directory is shared (None on one node, where there is nothing to check). Collective: every
    process calls it. The markers are removed before it returns.
    """
    nodes = node_count(accelerator)
    if nodes == 1:
        return None
    from accelerate.utils import broadcast_object_list, gather_object

    token = [uuid.uuid4().hex if accelerator.is_main_process else None]
    broadcast_object_list(token)  # one token per run: a stale marker from an earlier run is not counted
    folder = os.path.join(args.output_dir, MARKERS)
    marker = os.path.join(folder, f"{token[0]}-rank{accelerator.process_index}")
    local_main = accelerator.local_process_index == 0
    if local_main:
        os.makedirs(folder, exist_ok=True)
        open(marker, "w").close()
    accelerator.wait_for_everyone()
    seen = sum(name.startswith(token[0]) for name in os.listdir(folder)) if local_main else None
    counts = [c for c in gather_object([seen]) if c is not None]  # one per node
    accelerator.wait_for_everyone()
    if local_main:
        os.remove(marker)
    shared = all(c == nodes for c in counts)
    if shared and args.save_on_each_node:
        raise InputError(
            f"save_on_each_node=True, but output_dir {args.output_dir} is one filesystem seen by all {nodes} "
            "nodes: every node's first process would write the same checkpoint files at once. Set "
            "save_on_each_node: false (the default) for a shared output_dir"
        )
    if not shared and not args.save_on_each_node:
        alone = "each node sees only its own" if all(c == 1 for c in counts) else "only some nodes share it"
        raise InputError(
            f"output_dir {args.output_dir} is not shared by the {nodes} nodes ({alone}): checkpoints would be "
            "written on node 0 only, and a restart would resume node 0 and start the others from scratch. Put "
            "output_dir on a filesystem every node mounts, or set save_on_each_node: true so that each node keeps "
            "its own copy"
        )
    return shared


def check_same_resume_point(accelerator, checkpoint, output_dir: str) -> None:
    """Every process resumes from the same step, or none does (collective). Each process resolves ``latest`` on its
    own filesystem; a node whose disk lacks the newest checkpoint would otherwise train from another step.
    ``checkpoint``: `Trainer.train`'s ``resume_from_checkpoint`` (True: the newest in ``output_dir``)."""
    if accelerator.num_processes == 1:
        return
    from accelerate.utils import gather_object

    from .checkpoints import checkpoint_step, resolve_resume

    if checkpoint is True:
        checkpoint = resolve_resume(True, output_dir)

    try:
        mine = checkpoint_step(checkpoint) if checkpoint else None
    except (OSError, ValueError):  # unreadable here: refused by check_resume on every process once they agree
        mine = "unreadable"
    steps = gather_object([(accelerator.process_index, mine, checkpoint)])
    if len({step for _, step, _ in steps}) > 1:
        listed = "; ".join(f"process {rank}: {path or 'no checkpoint'}" for rank, _, path in steps)
        raise CheckpointMismatch(
            f"the processes would resume from different checkpoints ({listed}). Each node reads output_dir on "
            "its own filesystem: with node-local disks set save_on_each_node: true from the start, or copy the "
            "newest complete checkpoint to every node (or pass the same resume_from_checkpoint everywhere)"
        )


def writes_a_node_copy(args, accelerator) -> bool:
    """This process writes its node's copy of each checkpoint, and is not the global main process (whose copy
    transformers and DeepSpeed write in full)."""
    return args.save_on_each_node and args.should_save and not accelerator.is_main_process


def write_model_files(args, accelerator, model, folder: str, state_dict: dict | None) -> None:
    """The model files of a checkpoint on a node other than the main process's (``save_on_each_node``).

    `Trainer` asks this node's first process to save (`should_save`), but transformers' ``save_pretrained`` writes
    only on global rank 0 (``should_save_on_this_rank``), so the other nodes would publish checkpoints without
    weights and fail to resume from them. Under ZeRO-3 and FSDP the weights a resume loads are the engine's own
    shards, written by every process into its node's copy, and a PEFT adapter is written on every node already;
    nothing is added for them.
    """
    from safetensors.torch import save_file

    from .distributed import is_fsdp, is_zero3

    if not writes_a_node_copy(args, accelerator):
        return
    unwrapped = accelerator.unwrap_model(model)
    # PEFT's save_pretrained has no rank-0 check: the node's adapter files are written already.
    if is_zero3(accelerator) or is_fsdp(accelerator) or hasattr(unwrapped, "peft_config"):
        return
    unwrapped.config.save_pretrained(folder)
    if unwrapped.can_generate() and unwrapped.generation_config is not None:
        unwrapped.generation_config.save_pretrained(folder)
    tensors = state_dict if state_dict is not None else unwrapped.state_dict()
    seen, unique = set(), {}
    for name, tensor in tensors.items():  # tied weights (lm_head = embeddings) are stored once, as save_pretrained does
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        unique[name] = tensor.detach().contiguous().cpu()
    save_file(unique, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


def write_deepspeed_latest(args, accelerator, folder: str) -> None:
    """The ``latest`` file of a DeepSpeed checkpoint on a node other than the main process's (``save_on_each_node``).

    DeepSpeed's node-local storage puts each process's shards on its own node, but writes ``latest`` (the tag a
    resume loads) only on global rank 0: without it the other nodes cannot resume. The tag is the one step folder
    DeepSpeed just wrote (``global_stepN``).
    """
    if not writes_a_node_copy(args, accelerator) or accelerator.state.deepspeed_plugin is None:
        return
    if os.path.isfile(os.path.join(folder, "latest")):
        return
    tags = [name for name in os.listdir(folder) if name.startswith("global_step")]
    if len(tags) == 1:
        with open(os.path.join(folder, "latest"), "w") as f:
            f.write(tags[0])


class CheckpointMismatch(InputError):
    """The processes of a restarted run found different checkpoints to resume from."""
