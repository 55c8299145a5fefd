"""Run under `accelerate launch` by tests/distributed (see tests/helpers/launch.py): trains a small model with
the settings of a JSON spec and saves, per process, what the tests compare.

usage: train_worker.py MODEL OUT SPEC_JSON

SPEC keys (every key but ``runs`` may also be given per run, where it overrides the spec's; ``config`` is merged):
  config:     GRPOConfig overrides
  runs:       a list of runs, each a partial spec, trained one after the other in this one launch (default: one run):
              a launch's ~25 s of start-up is paid once for all of a test module's configurations of one layout
  model:      the model of this run (default: MODEL)
  reward:     reward functions (names in tests.helpers.rewards, or model:<path>); default even_token_reward
  dataset:    default arithmetic:64
  fixed_completions: true to replace generation by tests.helpers.fixed_generation.FixedCompletions
  scripted_tool_calls: [calls of rank 0, calls of rank 1, ...]: multi-turn rollouts with the calculator tool, the
              policy scripted per rank (tests.helpers.scripted_agent) over the real HF generate (its forward passes
              still run, in lock-step under ZeRO-3)
  mode:       train (default) | reward-crash (the run stops on a reward error, which is saved as ``stopped``; the
              launch goes on with the next run) | budget (rank 1's clock runs 10,000x fast) | refused (the run must
              be refused: the `InputError` raised while its trainer is built or starts training, which every process
              raises at the same collective check, is saved as ``stopped`` ("<type>: <message>"), and the launch goes
              on with the next run; a run that is not refused trains and saves no ``stopped``)
  output_dir: the run's output_dir (default OUT/run<K>); a relative one is under the launch's working directory (a
              node's own disk in tests/helpers/multinode.py). Runs of several launches that name one output_dir
              continue one run: killed in one launch, resumed in the next
  resume:     true to resume from the newest complete checkpoint in the run's output_dir (if any)
  slow_save:  seconds each process sleeps after writing its part of a checkpoint, before the checkpoint is published
              (it first touches OUT/saving-<checkpoint>-<rank>), so that a test can kill the run during a save
              (spec-wide, or per run: only that run's saves are slowed and marked)

Saves OUT/rank<R>_<K>.pt for run K: the world size, the world size and process index GRPOConfig resolved
(``args``: the config sets no use_cpu, as a recipe need not), the full weights after training (gathered under
ZeRO-3/FSDP2, merged under LoRA; a reward-crash or refused run that stopped saves ``stopped``, its error, instead),
the log history, the reference model's kind and the process's peak resident memory (a run refused while its trainer
is built saves only ``world`` and ``stopped``).
"""

import gc
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from hf_grpo import DistributedGRPOTrainer, RunConfig
from hf_grpo.data import load_prompt_dataset
from hf_grpo.errors import InputError
from hf_grpo.generation.weights import iter_policy_weights
from hf_grpo.rewards import RewardFunctionError
from hf_grpo.runtime import checkpoints
from tests.helpers import rewards as test_rewards
from tests.helpers.fixed_generation import FixedCompletions
from tests.helpers.scripted_agent import ScriptedToolUse

BASE = dict(
    per_device_train_batch_size=8,
    num_generations=4,
    max_completion_length=12,
    learning_rate=1e-3,
    max_steps=2,
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    disable_tqdm=True,
    plot_metrics=False,
    seed=0,
    log_completions_steps=1,
    loss_type="dapo",
    generation_backend="hf",
)


def reward_functions(names: list[str]) -> list:
    return [n if n.startswith("model:") else getattr(test_rewards, n) for n in names]


def full_weights(trainer) -> dict[str, torch.Tensor]:
    return {
        name: t.detach().float().cpu().clone()
        for name, t in iter_policy_weights(trainer.accelerator, trainer.model_wrapped)
    }


# The current run's slow_save (seconds); set by main before each run.
SLOW_SAVE = {"seconds": 0.0}


def slow_down_saves(out: str) -> None:
    save_rank_state = checkpoints.save_rank_state

    def slow(folder, rank, state):
        save_rank_state(folder, rank, state)
        if SLOW_SAVE["seconds"]:
            Path(out, f"saving-{os.path.basename(folder)}-{rank}").touch()
            time.sleep(SLOW_SAVE["seconds"])

    checkpoints.save_rank_state = slow  # test instrumentation: widens the window in which a save is incomplete


def refusal(error: InputError) -> str:
    return f"{type(error).__name__}: {error}"


def run_spec(spec: dict, run: dict) -> dict:
    return {**spec, **run, "config": {**spec.get("config", {}), **run.get("config", {})}}


def train_one(model_path: str, out: str, k: int, spec: dict) -> None:
    mode = spec.get("mode", "train")
    args = RunConfig(output_dir=spec.get("output_dir", f"{out}/run{k}"), **{**BASE, **spec["config"]})
    if mode == "budget":
        args.max_train_minutes = 1.0
    if spec.get("scripted_tool_calls"):
        args.tools = ["calculator"]
    try:
        trainer = DistributedGRPOTrainer(
            model=spec.get("model", model_path),
            args=args,
            reward_funcs=reward_functions(spec.get("reward", ["even_token_reward"])),
            train_dataset=load_prompt_dataset(spec.get("dataset", "arithmetic:64")),
        )
    except InputError as e:  # refused while built (every process, at the same check: no peer is left waiting)
        if mode != "refused":
            raise
        torch.save({"world": dist.get_world_size(), "stopped": refusal(e)}, f"{out}/rank{dist.get_rank()}_{k}.pt")
        return
    rank = trainer.accelerator.process_index
    if spec.get("scripted_tool_calls"):
        trainer.generator = trainer.collector.generator = ScriptedToolUse(
            trainer.processing_class, calls=spec["scripted_tool_calls"][rank], inner=trainer.generator, vary=True
        )
    if spec.get("fixed_completions"):
        trainer.generator = trainer.collector.generator = FixedCompletions(
            len(trainer.processing_class), trainer.processing_class.eos_token_id
        )
    saved = {
        "world": trainer.accelerator.num_processes,
        "args": {"world_size": args.world_size, "process_index": args.process_index},
    }
    if mode == "budget" and rank == 1:
        real = trainer.clock.clock
        trainer.clock.clock = lambda real=real: 10_000 * real()
    try:
        trainer.train(
            resume_from_checkpoint=checkpoints.resolve_resume("latest", args.output_dir) if spec.get("resume") else None
        )
    except RewardFunctionError as e:
        if mode != "reward-crash":
            raise
        saved["stopped"] = str(e)
    except InputError as e:  # refused as training starts (a resume check, collective like the build's)
        if mode != "refused":
            raise
        saved["stopped"] = refusal(e)
    else:
        saved["weights"] = full_weights(trainer)
    saved.update(
        log=trainer.state.log_history,
        ref_model=type(trainer.ref_model).__name__,
        setup=trainer.run_setup,
        peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    )
    torch.save(saved, f"{out}/rank{rank}_{k}.pt")
    trainer.generator.close()


def rejoin_process_group(k: int) -> None:
    """Before run ``k``: a colocated vLLM engine, once dropped and collected, shuts down and tears torch's default
    process group down with it (vLLM's EngineCore.shutdown: cleanup_dist_env_and_memory). Initialising it again over
    the launcher's store as it is would meet the first group's keys there and hang, so the processes join a new group
    under a prefix of the run's own (which the trainer of run ``k`` then finds initialised), and DeepSpeed forgets the
    groups it cloned from the old one (what its own destroy_process_group does after a teardown)."""
    if dist.is_initialized():
        return
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    dist.init_process_group("gloo", store=dist.PrefixStore(f"train_worker-run{k}", store), rank=rank, world_size=world)
    if "deepspeed.utils.groups" in sys.modules:
        sys.modules["deepspeed.utils.groups"]._release_process_group_references()


def main() -> None:
    model_path, out, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    runs = spec.get("runs", [{}])
    os.makedirs(out, exist_ok=True)  # a run whose output_dir is elsewhere does not create it
    if any(run_spec(spec, run).get("slow_save") for run in runs):
        slow_down_saves(out)
    for k, run in enumerate(runs):
        # The previous run's engine, if any, shuts down now rather than in the middle of this run. Then everything
        # alive (the imports: ~700k objects) moves out of the collector's sight: every full collection after this
        # (accelerate's free_memory in each train(), vLLM's at each engine start) would otherwise walk all of it,
        # ~0.5 s a time, twice or more per run in each process.
        gc.collect()
        gc.freeze()
        if k:
            rejoin_process_group(k)
        SLOW_SAVE["seconds"] = run_spec(spec, run).get("slow_save", 0.0)
        wall, cpu = time.perf_counter(), time.process_time()
        train_one(model_path, out, k, run_spec(spec, run))
        # In launch.log: where a launch's time goes, run by run (docs/testing.md: the budget per folder).
        rank = os.environ.get("RANK", "0")
        print(
            f"run {k} rank {rank}: {time.perf_counter() - wall:.1f} s, {time.process_time() - cpu:.1f} CPU-s",
            flush=True,
        )
    gc.unfreeze()  # the interpreter's exit frees everything, as it would have (nanobind reports what it does not)


if __name__ == "__main__":
    main()
