"""The console line's time left: days beyond 24 hours, and an estimate that leaves the
first logged window (the compilation of the step) out."""

import math

import pytest

from jaxtrans.training.metrics import Progress, duration

METRICS = {"loss": 2.5, "lr": 1e-3, "tokens_per_sec": 1000.0}
DAY = 24 * 3600


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    "seconds, shown",
    [
        (0, "00:00:00"),
        (9 * 3600 + 42 * 60 + 14, "09:42:14"),
        (DAY - 1, "23:59:59"),
        (DAY, "1d 00:00:00"),
        (38 * DAY + 9 * 3600 + 42 * 60 + 14, "38d 09:42:14"),
        (math.nan, "?"),
    ],
)
def test_a_duration_shows_days_beyond_24_hours(seconds, shown):
    assert duration(seconds) == shown


def test_a_run_with_38_days_left_says_so_rather_than_wrapping_at_a_day(capsys):
    clock = Clock()
    progress = Progress(last_step=1_000_000, headline=(), clock=clock)
    progress.log(100, METRICS)
    clock.now += 100 * 3.3  # 3.3 s a step: 999,800 steps left are 38d 04:29:00
    progress.log(200, METRICS)

    last_line = capsys.readouterr().out.splitlines()[-1]
    assert last_line.endswith("eta 38d 04:29:00")


def test_the_time_left_leaves_out_the_first_window_and_its_compilation(capsys):
    clock = Clock()
    progress = Progress(last_step=1000, headline=(), clock=clock)
    clock.now += 60.0  # the first 10 steps: 59 s compiling, then 0.1 s a step
    progress.log(10, METRICS)
    clock.now += 1.0  # 10 more steps at 0.1 s
    progress.log(20, METRICS)
    clock.now += 2.0  # 20 more
    progress.log(40, METRICS)

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("eta ?")  # nothing measured yet but the compilation
    assert lines[1].endswith("eta 00:01:38")  # 980 steps * 0.1 s, not 980 * 3.05 s
    assert lines[2].endswith("eta 00:01:36")


def test_the_line_says_the_share_of_time_waiting_for_input_when_it_matters():
    progress = Progress(last_step=1000, headline=())
    input_bound = progress.line(10, {**METRICS, "input_wait_fraction": 0.37})
    fed = progress.line(10, {**METRICS, "input_wait_fraction": 0.01})
    assert "input wait 37%" in input_bound
    assert "input wait" not in fed
    assert "input wait" not in progress.line(10, METRICS)  # a task without the measure


def test_a_step_counts_the_seconds_blocked_on_its_batch(monkeypatch):
    """take_step adds the time spent in next(train_iter), and only that, to the window."""
    import time
    from types import SimpleNamespace

    from jaxtrans.training import loop
    from jaxtrans.training.run_setup import RunState

    def slow_batches():
        while True:
            time.sleep(0.2)
            yield {"x": 0}

    def step(state, batch, frozen):
        time.sleep(0.3)  # the step's own time is not waiting for input
        return state, {"nonfinite": False}

    monkeypatch.setattr(loop, "global_batch", lambda local, sharding: local)
    guard = SimpleNamespace(frozen=False, after_dispatch=lambda *args: None)
    run = SimpleNamespace(train_iter=slow_batches(), batch_sharding=None, guard=guard)
    rs = RunState(state=None, num_steps=10, step=0, skipped_steps=0)
    rs.train_step = step
    loop.take_step(run, rs)
    loop.take_step(run, rs)
    assert 0.4 <= rs.input_wait < 0.55
