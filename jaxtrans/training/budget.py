"""The wall-clock budget of a run (train.max_minutes), counted from the program's start.

The program's start is the process's: the imports, the tokenizer, the compilation and the
data loading all count. A resumed run is a new program: its budget counts from its own
start. With several processes, process 0's clock decides, at log steps, for all of them
(they must stop after the same step).
"""

import os
import time

import jax
import numpy as np
from jax.experimental import multihost_utils


def process_start_time() -> float:
    """When this process started (seconds since the epoch), from /proc; now if unknown."""
    try:
        with open("/proc/self/stat") as f:
            # Field 22, counted after the command name (which may hold spaces).
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


class TimeBudget:
    """``minutes`` (0: no limit) from ``started`` (seconds since the epoch)."""

    def __init__(self, minutes: float, started: float | None = None):
        self.minutes = float(minutes or 0)
        self.started = process_start_time() if started is None else started
        self.deadline = self.started + 60 * self.minutes

    def minutes_used(self) -> float:
        return (time.time() - self.started) / 60

    def spent(self, at_log_step: bool) -> bool:
        """Whether the run must stop now. With several processes it is asked only at log
        steps, and process 0's answer is everyone's."""
        if not self.minutes:
            return False
        if jax.process_count() == 1:
            return time.time() >= self.deadline
        if not at_log_step:
            return False
        mine = np.asarray(time.time() >= self.deadline)
        return bool(multihost_utils.broadcast_one_to_all(mine))

    def last_step(self, step: int, seconds_per_step: float) -> int:
        """The step at which the budget runs out, at ``seconds_per_step`` from ``step``."""
        left = max(self.deadline - time.time(), 0.0)
        return step + int(left / max(seconds_per_step, 1e-9))

    def schedule_steps(self, step: int, seconds_per_step: float, setup_seconds: float) -> int:
        """The last step of a learning-rate schedule that must end with the budget: the
        steps that fit in the time left at ``seconds_per_step`` after ``setup_seconds``
        (compiling the step again), at least one more. With several processes, process
        0's estimate is everyone's (call it at the same step on all of them)."""
        left = max(self.deadline - time.time() - setup_seconds, 0.0)
        estimate = step + max(int(left / max(seconds_per_step, 1e-9)), 1)
        if jax.process_count() > 1:
            estimate = int(multihost_utils.broadcast_one_to_all(np.asarray(estimate, np.int64)))
        return estimate
