"""Asynchronous generation (`hf_grpo.rollout.pipeline`) on a real colocated vLLM engine (tiny Llama): the synchronous
schedule through the pipeline, bounded staleness read from the rollout log's recorded weight versions, rewards running
while the trainer trains, dynamic sampling in the stream, and a `kill -9` in the middle of a pipelined run."""

import json
import subprocess
import sys
import threading
import time

import pytest
import torch

from hf_grpo import GRPOConfig
from hf_grpo.algorithms import groups_with_spread
from hf_grpo.data import load_prompt_dataset
from hf_grpo.rollout.sampler import RepeatPromptSampler
from hf_grpo.runtime import checkpoints
from tests.helpers.launch import ROOT, WORKER, forked, launched_env
from tests.helpers.processes import kill9, wait_for
from tests.helpers.rewards import even_token_reward
from tests.helpers.trainers import make_trainer, params

VLLM = dict(
    generation_backend="vllm",
    vllm_enforce_eager=True,
    vllm_kv_cache_gib=0.25,
    max_prompt_length=256,
    per_device_train_batch_size=8,
    num_generations=4,
)


def rollout_log(out, step: int) -> list[dict]:
    path = out / "rollouts" / f"step_{step:06d}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_groups_with_spread_keep_format_variance_without_a_correct_answer():
    rewards = torch.tensor(
        [
            0.0,
            0.0,
            0.0,
            0.0,  # nothing: no gradient
            0.0,
            0.5,
            0.0,
            0.5,  # no correct answer, but format varies: gradient
            1.0,
            1.0,
            1.0,
            1.0,  # all correct: no gradient
            1.5,
            0.0,
            0.5,
            1.0,
        ]
    )
    assert groups_with_spread(rewards, 4).tolist() == [False, True, False, True]


def test_max_staleness_needs_a_backend_that_can_overlap(tmp_path):
    with pytest.raises(ValueError, match="max_staleness needs generation_backend=vllm"):
        GRPOConfig(output_dir=str(tmp_path), max_staleness=1, generation_backend="hf", use_cpu=True)
    with pytest.raises(ValueError, match="max_staleness must be None or >= 0"):
        GRPOConfig(output_dir=str(tmp_path), max_staleness=-1, generation_backend="vllm", use_cpu=True)


@pytest.mark.slow
def test_staleness_zero_through_the_pipeline_trains_the_synchronous_weights(vllm_tiny_path, tmp_path):
    """Same engine seed, same prompts, same order of generate calls and updates: bit-identical weights (SGD at lr 1,
    so any difference in a sample or a log-prob would show). Two steps: the second round is the first one generated
    after an update, which staleness 0 must wait for. Each run has an engine of its own: the two must sample from
    the same engine seed."""
    weights = {}
    for staleness in (None, 0):
        trainer = make_trainer(
            vllm_tiny_path,
            tmp_path / str(staleness),
            max_steps=2,
            optim="sgd",
            learning_rate=1.0,
            skip_zero_advantage=False,
            max_staleness=staleness,
            **VLLM,
        )
        trainer.train()
        trainer.generator.close()
        weights[staleness] = params(trainer.model)
        if staleness == 0:
            assert [r["async/staleness"] for r in trainer.state.log_history if "loss" in r] == [0.0, 0.0]
    assert all(torch.equal(weights[None][n], weights[0][n]) for n in weights[0])


class SlowReward:
    """even_token_reward, slow: each call lasts until a loss computation is in progress on the trainer's thread, or
    0.6 s at most (polled, not slept). Synchronously it runs on the trainer's thread, where no loss can run meanwhile,
    and the trainer waits the 0.6 s at every step; with the pipeline the next round's reward runs on another thread
    while the trainer computes the current step's loss. Records each call's thread and interval, and the losses'."""

    def __init__(self):
        self.calls, self.losses, self.in_loss = [], [], threading.Event()

    def __call__(self, completion_ids, **kwargs):
        start = time.perf_counter()
        self.in_loss.wait(timeout=0.6)
        self.calls.append((threading.current_thread() is threading.main_thread(), start, time.perf_counter()))
        return even_token_reward(completion_ids)

    def watch(self, trainer) -> None:
        compute_loss = trainer.compute_loss

        def timed_loss(*args, **kwargs):
            start = time.perf_counter()
            self.in_loss.set()
            try:
                return compute_loss(*args, **kwargs)
            finally:
                self.in_loss.clear()
                self.losses.append((start, time.perf_counter()))

        trainer.compute_loss = timed_loss  # test instrumentation: when the trainer's thread computes a loss


@pytest.fixture(scope="module")
def pipelined(vllm_tiny_path, tmp_path_factory):
    """``pipelined(staleness)``: a 5-step run with that max_staleness and the `SlowReward`, trained once for the
    module (the staleness bound and the overlap of rewards with training are read from the same run):
    ``(trainer, output_dir, reward)``."""
    runs = {}

    def run(staleness: int):
        if staleness not in runs:
            out = tmp_path_factory.mktemp(f"staleness{staleness}")
            reward = SlowReward()
            trainer = make_trainer(
                vllm_tiny_path,
                out,
                reward_funcs=(reward,),
                max_steps=5,
                max_staleness=staleness,
                log_completions_steps=1,
                **VLLM,
            )
            reward.watch(trainer)
            trainer.train()
            trainer.generator.close()
            runs[staleness] = trainer, out / "out", reward
        return runs[staleness]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("staleness", [1, 2])
def test_no_round_is_trained_more_than_max_staleness_updates_after_it_was_sampled(pipelined, staleness):
    trainer, out, _ = pipelined(staleness)
    behind = []
    for step in range(1, 6):
        versions = {r["weight_version"] for r in rollout_log(out, step)}
        assert len(versions) == 1, f"step {step}: one round, one weight version ({versions})"
        behind.append(step - 1 - versions.pop())  # trained after step - 1 updates
    assert max(behind) <= staleness and min(behind) >= 0, behind
    assert max(behind) >= 1, f"generation never ran ahead of training: {behind}"
    logged = [r["async/staleness"] for r in trainer.state.log_history if "loss" in r]
    assert logged == [float(b) for b in behind]
    assert all(r["async/stale_rounds_regenerated"] == 0 for r in trainer.state.log_history if "loss" in r)


@pytest.mark.slow
def test_a_slow_reward_runs_while_the_trainer_trains(pipelined):
    """The `SlowReward` lasts up to 0.6 s per round. Synchronously every step waits for it; with the pipeline the
    next round's reward runs on another thread while the trainer computes the current step's loss."""
    trainer, _, reward = pipelined(1)
    calls, losses = reward.calls, reward.losses
    assert calls and not any(on_main for on_main, _, _ in calls), "a reward function ran on the trainer's thread"
    overlapping = [(a, b) for _, a, b in calls for s, e in losses if s < b and e > a]
    assert overlapping, "no loss computation ran while a reward was being computed"
    waits = [r["async/wait_s"] for r in trainer.state.log_history if "loss" in r][1:]
    assert sum(waits) < 0.6 * len(waits), f"the trainer waited for the reward every step: {waits}"


@pytest.mark.slow
def test_partial_rollouts_sample_completions_across_updates_within_the_staleness_bound(vllm_tiny_path, tmp_path):
    """``partial_rollouts: recompute`` on the colocated engine. One prompt, two completions of 300 tokens each round:
    the tiny model decodes one token per engine step for the whole round (about 4 s here), while the trainer's step
    on 2 x 300 tokens takes about 1 s, so a round admitted at an update is still decoding at the next one, which
    lands between two engine steps. Every token carries the version that sampled it (the rollout log's
    ``version_spans``); the oldest is at most ``max_staleness`` updates behind the step that trains it; the logged
    metrics are those spans'; and the completions that span two versions are trained."""
    trainer = make_trainer(
        vllm_tiny_path,
        tmp_path,
        max_steps=5,
        max_staleness=1,
        partial_rollouts="recompute",
        log_completions_steps=1,
        **{**VLLM, "per_device_train_batch_size": 2, "num_generations": 2},
        max_completion_length=300,
        generation_kwargs={"ignore_eos": True},
    )
    trainer.train()
    trainer.generator.close()
    logged = [r for r in trainer.state.log_history if "loss" in r]
    mixed = 0
    for step, log in zip(range(1, 6), logged):
        spans = [r["version_spans"] for r in rollout_log(tmp_path / "out", step)]
        versions = [v for row in spans for v, a, b in row for _ in range(a, b)]
        assert all(row[0][1] == 0 and row[-1][2] == 300 for row in spans), spans  # every token labelled
        assert all([v for v, _, _ in row] == sorted({v for v, _, _ in row}) for row in spans), spans
        assert step - 1 - min(versions) == log["async/staleness"] <= 1, (step, spans)
        assert log["async/version_spread"] == max(versions) - min(versions) <= 1
        assert log["async/mixed_version_completions"] == sum(len(row) > 1 for row in spans) / len(spans)
        mixed += log["async/mixed_version_completions"] > 0
    assert mixed >= 1, "no update landed while a round was decoding"


@pytest.mark.slow
def test_weight_sync_steps_pushes_every_n_steps_and_rounds_stay_within_the_bound(vllm_tiny_path, tmp_path):
    """TRL's ``weight_sync_steps: 2`` with ``max_staleness: 1``: the engine gets the weights of steps 0, 2 and 4 only
    (the pushes are the steps that log a sync time), and each round is sampled by the last weights pushed when it
    started, at most one update behind the step that trains it."""
    trainer = make_trainer(
        vllm_tiny_path, tmp_path, max_steps=5, max_staleness=1, weight_sync_steps=2, log_completions_steps=1, **VLLM
    )
    trainer.train()
    trainer.generator.close()
    logged = [r for r in trainer.state.log_history if "loss" in r]
    assert ["timing/weight_sync_s" in r for r in logged] == [True, False, True, False, True]
    versions = [{r["weight_version"] for r in rollout_log(tmp_path / "out", step)} for step in range(1, 6)]
    assert versions == [{0}, {0}, {2}, {2}, {4}], versions


def half_constant_reward(prompts, completion_ids, **kwargs):
    """Constant for prompts with an even-length text (a group without spread), token parity otherwise."""
    return [
        0.5 if len(str(p)) % 2 == 0 else float(ids[0] % 2) if ids else 0.0 for p, ids in zip(prompts, completion_ids)
    ]


@pytest.mark.slow
def test_dynamic_sampling_in_the_stream_trains_only_groups_with_spread(vllm_tiny_path, tmp_path):
    trainer = make_trainer(
        vllm_tiny_path,
        tmp_path,
        reward_funcs=(half_constant_reward,),
        max_steps=3,
        max_staleness=1,
        dynamic_sampling=True,
        dynamic_sampling_criterion="reward_std",
        dynamic_sampling_max_rounds=8,
        log_completions_steps=1,
        **VLLM,
    )
    trainer.train()
    trainer.generator.close()
    for step in range(1, 4):
        rewards = [r["reward"] for r in rollout_log(tmp_path / "out", step)]  # group-major, 4 per group
        groups = [rewards[i : i + 4] for i in range(0, len(rewards), 4)]
        assert len(groups) == 2 and all(max(g) > min(g) for g in groups), groups
    ratios = [r["dynamic_sampling/real_batch_size_ratio"] for r in trainer.state.log_history if "loss" in r]
    assert all(0 < x <= 1 for x in ratios) and min(ratios) < 1, ratios


# ---- kill -9 with the pipeline running ------------------------------------------------------------------------------
STEPS = 6


def kill_spec(partial: str | None) -> dict:
    config = {**VLLM, "max_steps": STEPS, "save_strategy": "steps", "save_steps": 1, "max_staleness": 2}
    if partial:  # rounds decode across the updates: long completions, so that some are in flight at the kill
        config.update(partial_rollouts=partial, max_completion_length=96, generation_kwargs={"ignore_eos": True})
    return {"config": {**config, "use_cpu": True}, "resume": True}


def start(model_path: str, out, spec: dict) -> subprocess.Popen:
    cmd, env = forked([sys.executable, str(WORKER), model_path, str(out), json.dumps(spec)], launched_env())
    log = open(out / "train.log", "ab")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.slow
@pytest.mark.parametrize("partial", [None, "recompute"])
def test_kill_9_with_rounds_in_flight_loses_no_prompt_and_trains_none_twice(vllm_tiny_path, tmp_path, partial):
    """The run is killed in a process of its own; the restart, the same worker code with the same spec, runs in this
    one (a second interpreter would only add its start-up). With partial rollouts the kill also takes the tokens the
    engine had sampled for the rounds in flight: those rounds are generated again from their prompts (the engine's
    sampling state cannot be restored, so nothing past the checkpoint can repeat the uninterrupted run's tokens);
    what must repeat is which prompts each step trains, and every step up to the checkpoint as it was."""
    from tests.scripts.train_worker import train_one

    SPEC = kill_spec(partial)
    run = tmp_path / "run0"
    proc = start(vllm_tiny_path, tmp_path, SPEC)
    wait_for(lambda: (run / "checkpoint-2").exists(), proc, timeout=300)
    kill9(proc)
    assert not (run / f"checkpoint-{STEPS}").exists()
    latest = checkpoints.resolve_resume("latest", str(run))
    state = checkpoints.load_rank_state(latest, 0)["pipeline"]
    done = checkpoints.checkpoint_step(latest)
    assert state["next_round"] == done and state["in_flight"], f"no round in flight at the checkpoint: {state}"
    before = {step: rollout_log(run, step) for step in range(1, done + 1)}

    train_one(vllm_tiny_path, str(tmp_path), 0, SPEC)  # resumes from the newest complete checkpoint (SPEC's resume)
    assert (run / f"checkpoint-{STEPS}").is_dir()
    # Every step trained exactly the prompts of its round in the sampler's order: none lost, none repeated.
    dataset = load_prompt_dataset("arithmetic:64")
    sampler = RepeatPromptSampler(len(dataset), 2, 1, repeats=1, seed=0)
    seen = []
    for step in range(1, STEPS + 1):
        trained = sorted({json.dumps(r["prompt"]) for r in rollout_log(run, step)})
        expected = sorted(json.dumps(dataset[i]["prompt"]) for i in sampler.round_rows(step - 1, 0))
        assert trained == expected, f"step {step}"
        seen += trained
    assert len(seen) == len(set(seen)) == 2 * STEPS
    assert all(rollout_log(run, step) == records for step, records in before.items())  # not trained again
    log = (tmp_path / "train.log").read_text()
    assert log.count("Traceback") == 0, log[-3000:]
