"""The training clock: ``max_train_minutes`` stops training at a wall-clock budget (with a checkpoint), and
``save_every_minutes`` adds a checkpoint every so many minutes; evaluation time is not counted."""

from __future__ import annotations

import time

from transformers import TrainerCallback


class TimeBudgetCallback(TrainerCallback):
    """Stops training at a wall-clock budget and optionally saves a checkpoint every ``save_every_s`` seconds.

    The clock counts training only: the time from an optimizer step's end to the end of the evaluation that
    follows it is subtracted, so two trainers with different eval schedules get the same training time.
    ``marks`` holds ``(global_step, training seconds)`` at every step end. Works with any ``transformers.Trainer``.
    """

    @classmethod
    def from_args(cls, args) -> TimeBudgetCallback:
        """The clock of a `GRPOConfig`: ``max_train_minutes`` and ``save_every_minutes``, in seconds."""
        minutes = (args.max_train_minutes, args.save_every_minutes)
        return cls(*(None if m is None else m * 60 for m in minutes))

    def __init__(self, budget_s: float | None, save_every_s: float | None = None, clock=time.perf_counter):
        self.clock = clock
        self.budget_s = budget_s
        self.save_every_s = save_every_s
        self.start = 0.0
        self.excluded = 0.0  # seconds spent evaluating
        self.last_step_end = 0.0
        self.next_save = save_every_s
        self.marks: list[tuple[int, float]] = []

    def elapsed(self) -> float:
        return self.clock() - self.start - self.excluded

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = self.clock()

    def resume(self, seconds: float) -> None:
        """Continue a resumed run's clock from the ``seconds`` of training its checkpoint recorded."""
        self.excluded -= seconds
        self.next_save = None if self.save_every_s is None else self.save_every_s * (seconds // self.save_every_s + 1)

    def on_step_end(self, args, state, control, **kwargs):
        self.last_step_end = self.clock()
        if self.budget_s is None and self.save_every_s is None:  # only a clock: no collective on the hot path
            self.marks.append((state.global_step, self.elapsed()))
            return
        elapsed = self._main_process_value(self.elapsed())
        self.marks.append((state.global_step, elapsed))
        if self.save_every_s is not None and elapsed >= self.next_save:
            control.should_save = True
            while self.next_save <= elapsed:
                self.next_save += self.save_every_s
        if self.budget_s is not None and elapsed >= self.budget_s:
            control.should_training_stop = True
            control.should_save = True

    @staticmethod
    def _main_process_value(seconds: float) -> float:
        """Every process must stop and save at the same step, or the others hang in the next collective: they all
        act on the main process's clock."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return seconds
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([seconds], from_process=0)[0]

    def on_evaluate(self, args, state, control, **kwargs):
        if self.last_step_end:  # evaluation run from a step end; a standalone evaluate() costs nothing here
            self.excluded += self.clock() - self.last_step_end
            self.last_step_end = self.clock()
