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

**Partial rollouts** (``partial_rollouts: keep | recompute``): generation runs across weight updates, with vLLM's
own mechanisms. The generator thread becomes a *stream*: it admits round ``k`` into the engine as soon as its
staleness allows (the same rule, so with ``max_staleness >= steps per round`` several rounds decode together and a
long completion of one round no longer leaves the engine idle), submits one request per completion through the
backend's turn stream (`Generator.turns`), and hands each round to the scorer when its last completion finishes. The
trainer's weight push no longer waits for generation to drain: a colocated engine is stepped one step at a time
under the engine lock (the push lands between two steps); ``vllm serve`` is paused with vLLM's ``mode=keep`` for the
push and resumed. The engine labels every token with the version that sampled it (vLLM's ``weight_versions``, set at
each push), so a completion may span versions; its log-probs are each token's own sampler's. What happens to the KV
cache computed under the old weights: ``keep`` goes on over it (the new weights attend to old keys and values until
the sequence ends; no recompute); ``recompute`` preempts the requests in flight (vLLM's
``reset_prefix_cache(reset_running_requests=True)``), which recomputes their prefix, prompt and tokens so far, under
the new weights before they continue: the abort-and-resume-from-prefix of verl and slime, done inside the engine, so
requests keep their ids and their sampled tokens and log-probs. Either way a request is salted with the version it
was submitted under (vLLM's ``cache_salt``), so no new request reuses prefix-cache blocks of other weights. Staleness
is then counted on a round's *oldest* token; ``async/version_spread`` and ``async/mixed_version_completions`` log the
spread. Multi-turn rounds (tools, environments) run one round at a time as before, but their engine steps take the
lock one at a time too: a turn in flight survives an update, and tools run while the trainer trains.

The off-policy correction is AReaL's decoupled PPO objective. The *proximal* policy is the trainer's policy when the
round is trained: its log-probs are recomputed by the trainer, never taken from the sampler (they are the loss pass's
own, detached, when the round feeds one optimizer step, and a separate pass at the start of the round when it is
reused by ``num_iterations`` or ``steps_per_generation``). The clipped ratio is taken against them, and the behaviour
policy's (vLLM's, ``max_staleness`` versions old at most) log-probs enter through the importance weight
``pi_prox / pi_behav`` of ``vllm_importance_sampling_correction``. Departures from AReaL: the importance weight is
truncated (TIS, ``vllm_importance_sampling_cap``) rather than left unbounded, and staleness is bounded per round, not
per token unless ``partial_rollouts`` is on (then a sequence spans versions, as with AReaL's interruptible
generation, and every token's importance weight uses the log-prob of the version that sampled it).
``old_logprobs_from_sampler`` instead takes the behaviour policy as the old one (plain off-policy PPO: the clip
bounds the whole gap, no importance weight).

What overlaps where: with ``vllm serve`` servers the servers generate while the trainer computes (the natural case);
with colocated vLLM the engine runs on the trainer's own device, so only its host-side work and the rewards overlap
training, and the device is shared. Resume: a checkpoint records the next round to train and the rounds in flight;
rounds in flight are generated again after a restart (same prompts: the stream is a function of the round index), so
no prompt is lost or trained twice; with partial rollouts, the tokens a killed run had sampled for them are not kept
(the engine's sampling state cannot be restored, so they could not be continued as the uninterrupted run would have).
Dynamic-sampling refill prompts are random draws and may differ after a restart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..generation import GenerationResult, SamplingParams
from ..generation.base import Turn
from ..reporting.metrics import MetricsBuffer
from .collector import RolloutBatch, RolloutCollector

logger = logging.getLogger(__name__)

# A stream request's key: round * KEY_STRIDE + completion index (a round has far fewer completions per process).
KEY_STRIDE = 1 << 32


@dataclass
class Round:
    index: int
    version: int  # the weight version that generated it (the first generate call, with refills; partial: admitted)
    temperature: float
    rows: list[dict]
    batch: RolloutBatch | None
    error: BaseException | None = None


@dataclass
class _OpenRound:
    """A partial-rollout round in the engine: its completions as they finish."""

    index: int
    version: int  # the weights' version when it was admitted
    sampling: SamplingParams
    rows: list[dict]
    prompt_ids: list[list[int]]  # [P]
    media: list | None  # [P] a vision-language policy's
    turns: list[Turn | None]  # [P*G]
    start: float

    @property
    def done(self) -> bool:
        return all(t is not None for t in self.turns)

    def generated(self) -> tuple:
        """``collector.score``'s arguments after the rows: ``(prompt_ids, GenerationResult, seconds[, media])``."""
        turns = self.turns
        versions = [t.versions if t.versions is not None else [self.version] * len(t.token_ids) for t in turns]
        result = GenerationResult(
            completion_ids=[t.token_ids for t in turns],
            finished=[t.finished for t in turns],
            logprobs=[t.logprobs or [] for t in turns],
            versions=versions,
        )
        seconds = time.perf_counter() - self.start
        return (self.prompt_ids, result, seconds) + (() if self.media is None else (self.media,))


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
        partial: bool = False,
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
        self.partial = partial
        if partial:  # the lock is taken per engine step, never for a whole round (module docstring)
            collector.engine_lock = contextlib.nullcontext()
            collector.generator.step_lock = self.lock
        else:
            collector.engine_lock = self.lock

    @property
    def running(self) -> bool:
        return bool(self._threads)

    def start(self, first_round: int) -> None:
        self.next_round = first_round
        stream = self.partial and self.collector.multi_turn is None
        self._threads = [
            threading.Thread(
                target=self._stream_loop if stream else self._generate_loop,
                args=(first_round,),
                daemon=True,
                name="hf_grpo-generate",
            ),
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
                with contextlib.nullcontext() if self.partial else self.lock:
                    version = self.collector.generator.weight_version
                    generated = self.collector.generate(rows, sampling, round_key=k)
            except BaseException as error:  # reported to the trainer when it asks for round k
                self._to_score.put(Round(k, -1, sampling.temperature, rows, None, error))
                return
            self._to_score.put((Round(k, version, sampling.temperature, rows, None), generated))
            k += 1

    def _admissible(self, k: int) -> bool:
        return self._version >= k * self.steps_per_round - self.max_staleness

    def _stream_loop(self, k: int) -> None:
        """Partial rollouts (module docstring): admit rounds while their staleness allows, poll the engine one step
        at a time, hand finished rounds to the scorer in order."""
        G = self.collector.args.num_generations
        turns = self.collector.generator.turns()
        open_rounds: dict[int, _OpenRound] = {}
        emit = k  # the next round the scorer gets
        try:
            with turns.session():
                while not self._stop.is_set():
                    while self._admissible(k):
                        open_rounds[k] = self._admit(turns, k, G)
                        k += 1
                    if turns.busy():
                        for turn in turns.poll(0.05):
                            index, i = divmod(turn.key, KEY_STRIDE)
                            open_rounds[index].turns[i] = turn
                    else:
                        with self._published:
                            self._published.wait_for(lambda k=k: self._stop.is_set() or self._admissible(k), 1.0)
                    while emit in open_rounds and open_rounds[emit].done:
                        round_ = open_rounds.pop(emit)
                        self._to_score.put(
                            (
                                Round(emit, round_.version, round_.sampling.temperature, round_.rows, None),
                                round_.generated(),
                            )
                        )
                        emit += 1
        except BaseException as error:  # reported to the trainer when it asks for the round
            rows = open_rounds[emit].rows if emit in open_rounds else self.stream(emit)
            self._to_score.put(Round(emit, -1, 0.0, rows, None, error))
        finally:
            turns.finish()

    def _admit(self, turns, k: int, G: int) -> _OpenRound:
        rows, sampling = self.stream(k), self.sampling(k)
        prompt_ids, media = self.collector.encode(rows)
        with self._generated_lock:
            self._generated.add(k)
        round_ = _OpenRound(
            k,
            self.collector.generator.weight_version,
            sampling,
            rows,
            prompt_ids,
            media,
            [None] * (len(rows) * G),
            time.perf_counter(),
        )
        for i in range(len(rows) * G):
            turns.submit(k * KEY_STRIDE + i, prompt_ids[i // G], sampling, None if media is None else media[i // G])
        return round_

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
    if args.dynamic_sampling:  # refused with partial_rollouts (hf_grpo.config.validation)
        # In the stream, per process: refills are this process's own vLLM calls, so no collective decides them.
        def dynamic(batch: RolloutBatch, rows: list[dict]) -> RolloutBatch:
            return collector.collect_dynamic(rows, refill, lambda need: need, trainer_state(), first=batch)

    return RolloutPipeline(
        collector,
        stream,
        sampling,
        steps_per_round,
        args.max_staleness,
        dynamic,
        trainer_state,
        partial=args.partial_rollouts is not None,
    )


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
    staleness = global_step - oldest_version(round_)
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
        staleness = global_step - oldest_version(round_)
    metrics.add("async/staleness", float(staleness))
    span = round_.batch.version_span() if round_.batch is not None else None
    if pipeline.partial:  # the versions that sampled the round's tokens (module docstring)
        metrics.add("async/version_spread", float(span[1] - span[0]) if span else 0.0)
        metrics.add("async/mixed_version_completions", round_.batch.mixed_version_fraction() if span else 0.0)
    metrics.add("async/wait_s", waited)
    metrics.add("async/push_wait_s", push_wait)
    metrics.add("async/in_flight", float(len(pipeline.in_flight())))
    metrics.add("async/stale_rounds_regenerated", float(regenerated), reduce="sum")
    return round_


def oldest_version(round_: Round) -> int:
    """The oldest weight version that sampled a token of the round (its generate call's, when tokens are not
    labelled): staleness is counted on it."""
    span = round_.batch.version_span() if round_.batch is not None else None
    return span[0] if span is not None else round_.version
