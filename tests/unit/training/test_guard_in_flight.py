"""The non-finite guard keeps a fixed number of steps in flight and stops within a fixed
number of steps of a failure (guards.NonFiniteGuard.after_dispatch).

The steps here are stand-ins whose flag records when the host waits for it: the loop's
calls, without a device whose timing would decide the test."""

import math

import jax
import pytest

from jaxtrans.training.guards import STEPS_IN_FLIGHT, NonFiniteError, NonFiniteGuard

LEAVES = ["['encoder']['kernel']", "['decoder']['kernel']"]


class Flag:
    """A step's "not finite so far" flag: true from step ``failed_from`` on (the guarded
    step carries a failure forward); ``block_until_ready`` records that the host waited."""

    def __init__(self, step: int, failed_from: float, waits: list[int]):
        self.step, self.failed_from, self.waits = step, failed_from, waits

    def block_until_ready(self):
        self.waits.append(self.step)
        return self

    def __bool__(self):
        return self.step >= self.failed_from


def make_guard(mode: str, in_flight: int) -> NonFiniteGuard:
    return NonFiniteGuard(mode, LEAVES, jax.devices()[0], in_flight=in_flight)


def run_steps(guard: NonFiniteGuard, steps: int, failed_from: float = math.inf):
    """Dispatch ``steps`` steps as the loop does (no log); returns, for each step
    dispatched, the newest step waited for by then (0: none), the batches the diagnosis
    was asked about and the error, if one stopped the steps."""
    waits: list[int] = []
    pending: list[tuple[int, dict]] = []
    newest_waited, diagnosed = [], []

    def diagnose(batch):
        diagnosed.append(batch["step"])
        return {"first_nonfinite_leaf": 1}

    for step in range(1, steps + 1):
        pending.append((step, {"nonfinite": Flag(step, failed_from, waits)}))
        try:
            guard.after_dispatch(step, {"step": step}, pending, diagnose)
        except NonFiniteError as error:
            return newest_waited, diagnosed, (step, str(error))
        newest_waited.append(max(waits, default=0))
        assert len(guard.batches) <= guard.in_flight  # batches kept until known finite
    return newest_waited, diagnosed, None


@pytest.mark.parametrize("mode", ["stop", "skip"])
@pytest.mark.parametrize("in_flight", [1, 2, 3, 5])
def test_after_each_dispatch_the_host_waits_only_for_the_step_in_flight_minus_1_back(
    mode, in_flight
):
    newest_waited, _, stopped = run_steps(make_guard(mode, in_flight), 12)

    assert stopped is None
    # After dispatching step N the host has waited for step N - in_flight + 1 and no
    # later one: the steps after it (in_flight - 1 of them) are queued on the device.
    assert newest_waited == [max(0, n - in_flight + 1) for n in range(1, 13)]


def test_the_default_keeps_more_than_one_step_queued_and_a_bounded_number_in_flight():
    assert 3 <= STEPS_IN_FLIGHT <= 4
    newest_waited, _, _ = run_steps(make_guard("stop", STEPS_IN_FLIGHT), 8)
    assert newest_waited[-1] == 8 - STEPS_IN_FLIGHT + 1  # never the newest, nor the one before


@pytest.mark.parametrize("in_flight", [1, 2, 3])
@pytest.mark.parametrize("failed", [1, 2, 5])
def test_stop_mode_stops_in_flight_minus_1_steps_after_a_failure_naming_it(in_flight, failed):
    _, diagnosed, stopped = run_steps(make_guard("stop", in_flight), 12, failed_from=failed)

    assert stopped is not None
    stopped_at, message = stopped
    assert stopped_at == failed + in_flight - 1
    assert message.startswith(f"step {failed}: the gradient of params{LEAVES[1]} is not finite")
    assert diagnosed == [failed]  # recomputed on the failed step's own batch


def test_skip_mode_waits_as_stop_mode_does_but_never_stops():
    newest_waited, diagnosed, stopped = run_steps(make_guard("skip", 3), 10, failed_from=2)
    assert stopped is None and diagnosed == []
    assert newest_waited == [max(0, n - 2) for n in range(1, 11)]


def test_in_flight_below_one_is_refused():
    with pytest.raises(ValueError, match="in_flight=0"):
        make_guard("stop", 0)
