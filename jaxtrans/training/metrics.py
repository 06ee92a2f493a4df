"""Where metrics go: the console, ``DIR/metrics.jsonl`` and TensorBoard event files.

Only the main process (index 0) writes; the others keep quiet.
"""

import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxtrans.training import mfu as flops


def _plain(value: Any) -> Any:
    """JSON-friendly numbers: floats, ints, None for NaN/None."""
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return value
    if math.isnan(value) or math.isinf(value):
        return None
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def drop_records_after(path: str, step: int) -> None:
    """Rewrite the JSON-lines file ``path`` without records of steps after ``step`` (and
    without lines cut short by a crash); atomic (temporary file, then rename)."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and int(record.get("step", 0)) <= step:
                kept.append(line if line.endswith("\n") else line + "\n")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(tmp, path)


class MetricsWriter:
    """Appends one JSON object per record to metrics.jsonl and mirrors it to TensorBoard.

    A run that resumes from the checkpoint of ``first_step`` first drops the records of later
    steps (written before a crash, and about to be written again), in metrics.jsonl and, by
    a purge marker, in TensorBoard: each step is then recorded once, as by a run that was
    never interrupted.
    """

    def __init__(self, workdir: str, enabled: bool = True, first_step: int = 0):
        self.enabled = enabled
        if not enabled:
            return
        self.path = os.path.join(workdir, "metrics.jsonl")
        drop_records_after(self.path, first_step)
        self.jsonl = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the run
        # tensorboardX imports torch where it is installed (a second apiece): only runs that
        # write metrics pay for it, not evaluate.py or the Translator.
        from tensorboardX import SummaryWriter

        self.tensorboard = SummaryWriter(
            os.path.join(workdir, "tensorboard"), purge_step=first_step + 1
        )

    def write(self, step: int, record: dict[str, Any], prefix: str = "train") -> None:
        if not self.enabled:
            return
        record = {"step": int(step), **{k: _plain(v) for k, v in record.items()}}
        self.jsonl.write(json.dumps(record) + "\n")
        self.jsonl.flush()
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)):
                self.tensorboard.add_scalar(f"{prefix}/{key}", value, step)
        self.tensorboard.flush()

    def close(self) -> None:
        if self.enabled:
            self.jsonl.close()
            self.tensorboard.close()


def duration(seconds: float) -> str:
    """``HH:MM:SS``, with the days in front from one day on (``38d 09:42:14``); ``?`` for
    an unknown (NaN) duration."""
    if not math.isfinite(seconds):
        return "?"
    days, left = divmod(round(seconds), 24 * 3600)
    hours, left = divmod(left, 3600)
    clock = f"{hours:02d}:{left // 60:02d}:{left % 60:02d}"
    return f"{days}d {clock}" if days else clock


# The console line says how much of a log window the loop spent waiting for batches
# (metrics.jsonl: input_wait seconds, input_wait_fraction) from this fraction on.
INPUT_WAIT_SHOWN = 0.05


class Progress:
    """One console line per logged step: step, epoch (where the data says), loss, lr,
    tokens/s, the share of the time spent waiting for input (from INPUT_WAIT_SHOWN on: an
    input-bound run) and the time left.

    The time left is extrapolated from the steps since the first log of this process, so
    that the compilation in the first window does not count as training time; until the
    second log it is unknown (``?``). ``clock``: seconds, for tests.
    """

    def __init__(
        self,
        last_step: int,
        headline: tuple[str, ...],
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.last_step = last_step
        self.headline = headline
        self.enabled = enabled
        self.clock = clock
        self.first_log: tuple[int, float] | None = None  # (step, time) of the first log

    def eta_seconds(self, step: int) -> float:
        if self.first_log is None or step <= self.first_log[0]:
            return float("nan")
        first_step, first_time = self.first_log
        seconds_per_step = (self.clock() - first_time) / (step - first_step)
        return seconds_per_step * (self.last_step - step)

    def line(self, step: int, metrics: dict[str, Any]) -> str:
        shown = "  ".join(f"{key} {metrics[key]:.4f}" for key in self.headline if key in metrics)
        epoch = f"epoch {metrics['epoch']:.2f}  " if metrics.get("epoch") is not None else ""
        waited = metrics.get("input_wait_fraction") or 0.0
        waits = f"input wait {waited:.0%}  " if waited >= INPUT_WAIT_SHOWN else ""
        return (
            f"step {step:>7}/{self.last_step}  {epoch}loss {metrics['loss']:.4f}  {shown}  "
            f"lr {metrics['lr']:.2e}  {metrics['tokens_per_sec']:,.0f} tok/s  {waits}"
            f"eta {duration(self.eta_seconds(step))}"
        )

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if self.enabled:
            print(self.line(step, metrics), file=sys.stdout, flush=True)
        if self.first_log is None:
            self.first_log = (step, self.clock())


def say(message: str, enabled: bool = True) -> None:
    """A console message from the main process."""
    if enabled:
        print(message, file=sys.stdout, flush=True)


# The training iterator's counters (``stats()``, since the start of training) that each
# record carries as they are: the pairs read, and those dropped, cut or skipped, so that
# a run that skips malformed lines (data.skip_malformed) says how many in metrics.jsonl.
DATA_COUNTS = ("pairs_read", "pairs_dropped_too_long", "pairs_truncated", "pairs_malformed")


def log_window(
    pending: list[dict[str, jax.Array]],
    seconds: float,
    steps: int,
    step_flops: float | None,
    peak: float | None,
    data_stats: dict[str, float],
) -> dict[str, Any]:
    """Means over the steps since the last log; throughput over the window's wall time;
    the data iterator's padding, epoch and DATA_COUNTS (``data_stats``, where it has them)."""
    fetched = [m for m in jax.device_get(pending) if not m["nonfinite"]] or jax.device_get(pending)
    record = {
        key: float(np.mean([m[key] for m in fetched]))
        for key in fetched[0]
        if key not in ("tokens", "lr", "nonfinite", "first_nonfinite_leaf")
    }
    if "nll" in record:
        record["perplexity"] = float(np.exp(min(record["nll"], 50.0)))
    record["lr"] = float(fetched[-1]["lr"])
    tokens = float(np.sum([m["tokens"] for m in fetched]))
    record["tokens_per_sec"] = tokens / max(seconds, 1e-9)
    record["steps_per_sec"] = steps / max(seconds, 1e-9)
    step_seconds = seconds / max(steps, 1)
    record["mfu"] = (
        flops.mfu(step_flops, step_seconds, jax.device_count(), peak) if step_flops else None
    )
    if data_stats.get("mean_padding_fraction") is not None:
        record["padding_fraction"] = data_stats["mean_padding_fraction"]
    if data_stats.get("epoch") is not None:
        record["epoch"] = data_stats["epoch"]
    for key in DATA_COUNTS:
        if key in data_stats:
            record[key] = data_stats[key]
    return record
