"""The training clock behind max_train_minutes and save_every_minutes, on a fake clock."""

from transformers import TrainerControl, TrainerState

from hf_grpo.runtime.time_budget import TimeBudgetCallback


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def step(callback, state, control, clock, seconds):
    clock.now += seconds
    state.global_step += 1
    control.should_save = control.should_training_stop = False
    callback.on_step_end(None, state, control)


def test_saves_at_each_interval_stops_at_budget_and_does_not_count_evaluation():
    clock = FakeClock()
    callback, state, control = TimeBudgetCallback(100, 30, clock=clock), TrainerState(), TrainerControl()
    callback.on_train_begin(None, state, control)
    saves, stops = [], []
    for i in range(12):
        step(callback, state, control, clock, 12)  # a step takes 12 s
        if i == 1:  # then a 500 s evaluation, which the budget ignores
            clock.now += 500
            callback.on_evaluate(None, state, control)
        saves.append(control.should_save)
        stops.append(control.should_training_stop)
        if control.should_training_stop:
            break
    # Training seconds at step ends: 12, 24, 36, 48, 60, 72, 84, 96, 108 -> saves after crossing 30, 60, 90.
    assert [s for s, saved in zip(range(1, 13), saves) if saved] == [3, 5, 8, 9]
    assert stops.index(True) == 8 and state.global_step == 9  # 108 s >= 100 s
    assert [round(t) for _, t in callback.marks] == [12, 24, 36, 48, 60, 72, 84, 96, 108]


def test_no_budget_never_stops():
    clock = FakeClock()
    callback, state, control = TimeBudgetCallback(None, clock=clock), TrainerState(), TrainerControl()
    callback.on_train_begin(None, state, control)
    for _ in range(5):
        step(callback, state, control, clock, 1000)
        assert not control.should_training_stop and not control.should_save
