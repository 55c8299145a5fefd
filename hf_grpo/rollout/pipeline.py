"""Asynchronous generation with bounded staleness (``max_staleness``): generation and rewards overlap training.

Per process, two threads feed the trainer:

* the **generator thread** walks the prompt stream (round ``k``'s rows are those the trainer's dataloader serves for
  round ``k``: `hf_grpo.rollout.sampler.RepeatPromptSampler.round_rows`) and generates each round with the engine's
  current weights, tagging it with their version;
* the **scorer thread** decodes and scores each generated round (reward functions never run on the trainer's thread,
  and the next round is being generated while they run), applies dynamic sampling in the stream when enabled (groups
  without reward spread dropped and replaced by fresh prompts, per process, before anything is packed), and queues it.

The trainer's thread does everything collective: weight pushes (ZeRO-3/FSDP gathers), advantages, log gathering. At
each round boundary it pushes the new weights (holding the engine lock, so never during a generate call), publishes
the version, and pops the round. Bounded staleness: round ``k`` is trained at optimizer step ``k * R`` (``R`` steps
per round), so the generator thread starts it only once weights of version ``>= k * R - max_staleness`` are in the
engine. A round that nevertheless arrives older than that is not trained on: it is counted
(``async/stale_rounds_regenerated``) and generated again with the current weights. With ``max_staleness: 0`` every
round waits for the previous update, which is the synchronous schedule through this code path (same weights as
``max_staleness: None``, tested).

The off-policy correction is AReaL's decoupled PPO objective. The *proximal* policy is the trainer's policy when the
round is trained: its log-probs are recomputed by the trainer, never taken from the sampler (they are the loss pass's
own, detached, when the round feeds one optimizer step, and a separate pass at the start of the round when it is
reused by ``num_iterations`` or ``steps_per_generation``). The clipped ratio is taken against them, and the behaviour
policy's (vLLM's, ``max_staleness`` versions old at most) log-probs enter through the importance weight
``pi_prox / pi_behav`` of ``vllm_importance_sampling_correction``. Departures from AReaL: the importance weight is
truncated (TIS, ``vllm_importance_sampling_cap``) rather than left unbounded, and staleness is bounded per round, not
per token (AReaL's interruptible generation lets a sequence span weight versions; here the engine lock keeps every
generate call on one version). ``old_logprobs_from_sampler`` instead takes the behaviour policy as the old one (plain
off-policy PPO: the clip bounds the whole gap, no importance weight).

What overlaps where: with ``vllm serve`` servers the servers generate while the trainer computes (the natural case);
with colocated vLLM the engine runs on the trainer's own device, so only its host-side work and the rewards overlap
training, and the device is shared. Resume: a checkpoint records the next round to train and the rounds in flight;
rounds in flight are generated again after a restart (same prompts: the stream is a function of the round index), so
no prompt is lost or trained twice. Dynamic-sampling refill prompts are random draws and may differ after a restart.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..generation import SamplingParams
from ..reporting.metrics import MetricsBuffer
from .collector import RolloutBatch, RolloutCollector

logger = logging.getLogger(__name__)


@dataclass
class Round:
    index: int
    version: int  # the weight version that generated it (the first generate call, with refills)
    temperature: float
    rows: list[dict]
    batch: RolloutBatch | None
    error: BaseException | None = None


class RolloutPipeline:
    def __init__(
        self,
        collector: RolloutCollector,
        stream: Callable[[int], list[dict]],
        sampling: Callable[[int], SamplingParams],
        steps_per_round: int,
        max_staleness: int,
        dynamic: Callable[[RolloutBatch, list[dict]], RolloutBatch] | None = None,
        trainer_state: Callable[[], object] = lambda: None,
    ):
        self.collector = collector
        self.stream = stream  # round index -> this process's rows
        self.sampling = sampling  # round index -> its sampling parameters (scheduled temperature)
        self.steps_per_round = steps_per_round
        self.max_staleness = max_staleness
        self.dynamic = dynamic  # (scored batch, rows) -> batch with only informative groups
        self.trainer_state = trainer_state  # () -> the trainer's current TrainerState, for reward functions
        # The engine: one generate call or one weight push at a time. Re-entrant: the collector takes it too, so
        # that dynamic-sampling refills from the scorer thread are serialised with the generator thread's calls.
        self.lock = threading.RLock()
        self._published = threading.Condition()
        self._version = collector.generator.weight_version
        self._to_score: queue.Queue = queue.Queue()
        self._ready: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._generated: set[int] = set()  # rounds generated or being scored, not yet handed to the trainer
        self._generated_lock = threading.Lock()  # the trainer's thread reads the set while the generator adds to it
        self.next_round = 0
        collector.engine_lock = self.lock

    @property
    def running(self) -> bool:
        return bool(self._threads)

    def start(self, first_round: int) -> None:
        self.next_round = first_round
        self._threads = [
            threading.Thread(target=self._generate_loop, args=(first_round,), daemon=True, name="hf_grpo-generate"),
            threading.Thread(target=self._score_loop, daemon=True, name="hf_grpo-score"),
        ]
        for thread in self._threads:
            thread.start()

    def publish(self, version: int) -> None:
        """The engine now holds weights of ``version`` (called by the trainer after a push)."""
        with self._published:
            self._version = version
            self._published.notify_all()

    def pop(self, index: int) -> Round:
        """Round ``index``, waiting for it. Rounds come in order; the trainer asks for them in order."""
        item = self._ready.get()
        if item.index != index:
            raise RuntimeError(
                f"pipeline out of step: the trainer expects round {index}, the producer made round {item.index}"
            )
        with self._generated_lock:
            self._generated.discard(index)
        self.next_round = index + 1
        return item

    def in_flight(self) -> list[int]:
        """Rounds generated (or being generated and scored) but not yet trained: regenerated after a restart."""
        with self._generated_lock:
            return sorted(self._generated)

    def close(self) -> None:
        self._stop.set()
        with self._published:
            self._published.notify_all()
        self._to_score.put(None)
        for thread in self._threads:
            thread.join(timeout=600)
        self._threads = []

    def _generate_loop(self, k: int) -> None:
        while not self._stop.is_set():
            need = k * self.steps_per_round - self.max_staleness
            with self._published:
                self._published.wait_for(lambda need=need: self._stop.is_set() or self._version >= need)
            if self._stop.is_set():
                return
            rows, sampling = self.stream(k), self.sampling(k)
            with self._generated_lock:
                self._generated.add(k)
            try:
                with self.lock:
                    version = self.collector.generator.weight_version
                    generated = self.collector.generate(rows, sampling, round_key=k)
            except BaseException as error:  # reported to the trainer when it asks for round k
                self._to_score.put(Round(k, -1, sampling.temperature, rows, None, error))
                return
            self._to_score.put((Round(k, version, sampling.temperature, rows, None), generated))
            k += 1

    def _score_loop(self) -> None:
        while True:
            item = self._to_score.get()
            if item is None:
                return
            if isinstance(item, Round):  # a generation error: pass it on
                self._ready.put(item)
                return
            round_, generated = item
            try:
                batch = self.collector.score(round_.rows, *generated, trainer_state=self.trainer_state())
                round_.batch = self.dynamic(batch, round_.rows) if self.dynamic is not None else batch
            except BaseException as error:  # a reward function's crash reaches the trainer's thread
                round_.error = error
            self._ready.put(round_)
            if round_.error is not None:
                return

    def regenerate(self, round_: Round) -> Round:
        """Generate and score a round again with the engine's current weights, on the caller's thread."""
        with self.lock:
            version = self.collector.generator.weight_version
            batch = self.collector.score(
                round_.rows,
                *self.collector.generate(round_.rows, self.sampling(round_.index), round_key=round_.index),
                trainer_state=self.trainer_state(),
            )
        if self.dynamic is not None:
            batch = self.dynamic(batch, round_.rows)
        return Round(round_.index, version, round_.temperature, round_.rows, batch)


def build_pipeline(
    args,
    collector: RolloutCollector,
    stream: Callable[[int], list[dict]],
    temperature: Callable[[int], float],
    refill: Callable[[int], list[dict]],
    trainer_state: Callable[[], object],
) -> RolloutPipeline:
    """The trainer's pipeline. ``stream``: round index -> this process's rows, in the trainer's own sampler order;
    ``temperature``: optimizer step -> the scheduled sampling temperature; ``refill``: n -> extra prompts for dynamic
    sampling; ``trainer_state``: () -> the trainer's current ``TrainerState`` (reward functions receive it)."""
    steps_per_round = args.steps_per_generation * args.num_iterations // args.gradient_accumulation_steps

    def sampling(k: int) -> SamplingParams:
        return dataclasses.replace(collector.sampling, temperature=temperature(k * steps_per_round))

    dynamic = None
    if args.dynamic_sampling:
        # In the stream, per process: refills are this process's own vLLM calls, so no collective decides them.
        def dynamic(batch: RolloutBatch, rows: list[dict]) -> RolloutBatch:
            return collector.collect_dynamic(rows, refill, lambda need: need, trainer_state(), first=batch)

    return RolloutPipeline(collector, stream, sampling, steps_per_round, args.max_staleness, dynamic, trainer_state)


def pipelined_round(
    pipeline: RolloutPipeline,
    k: int,
    rows: list[dict],
    global_step: int,
    push_weights: Callable[[], None],
    metrics: MetricsBuffer,
) -> Round:
    """The trainer's side of the boundary of round ``k`` (on its own thread): push the new weights (``push_weights``
    pushes them when the engine holds an older version), pop the round, check it against the ``rows`` the dataloader
    serves, and record the ``async/*`` metrics."""
    start = time.perf_counter()
    with pipeline.lock:  # waits for a generate call in progress: the engine never mixes versions
        push_wait = time.perf_counter() - start
        push_weights()
    pipeline.publish(pipeline.collector.generator.weight_version)
    if not pipeline.running:  # first round, or first after a restart (in-flight rounds are generated again)
        pipeline.start(k)
    start = time.perf_counter()
    round_ = pipeline.pop(k)
    waited = time.perf_counter() - start
    if [r["prompt"] for r in round_.rows] != [r["prompt"] for r in rows]:
        raise RuntimeError(
            f"pipeline round {k}: its prompts differ from those the dataloader serves for this step "
            f"(the prompt stream and the sampler disagree)"
        )
    staleness = global_step - round_.version
    regenerated = 0
    if round_.error is None and staleness > pipeline.max_staleness:
        logger.warning(
            "round %d was sampled by weights %d, %d steps behind (max_staleness=%d): generated again",
            k,
            round_.version,
            staleness,
            pipeline.max_staleness,
        )
        round_, regenerated = pipeline.regenerate(round_), 1
        staleness = global_step - round_.version
    metrics.add("async/staleness", float(staleness))
    metrics.add("async/wait_s", waited)
    metrics.add("async/push_wait_s", push_wait)
    metrics.add("async/in_flight", float(len(pipeline.in_flight())))
    metrics.add("async/stale_rounds_regenerated", float(regenerated), reduce="sum")
    return round_
