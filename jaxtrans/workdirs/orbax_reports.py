"""What a failed orbax operation abandons, kept off the console once the failure itself has
been reported (and nothing else kept off).

When one TensorStore read or write of a checkpoint fails, orbax raises that error (the
callers report it in one line) and closes its event loop, abandoning the sibling reads
and writes it had started. They finish later, and Python reports each one as it goes:
TensorStore's callbacks into the closed loop ("Event loop is closed"), orbax coroutines
that raise as they are collected ("Exception ignored in: <coroutine ...>"), tasks that
nobody awaits any more ("Task exception was never retrieved", "Task was destroyed but it
is pending!") and coroutines that never started ("coroutine ... was never awaited"):
dozens of tracebacks that say nothing the one line does not. AbandonedWork drops exactly
those, recognised by where they come from (orbax's code, or a TensorStore future), and
passes every other report on. It is installed while an operation of ours runs (an async
write runs until the next save, wait or close) and removed when the last one ends well;
after a failure it stays, because the abandoned work reports whenever it is collected,
often only at exit.

asyncio's error records (a task's exception nobody retrieved, a failed callback) are dropped
once one of our operations has failed and said so in its own error, and while a read runs
(a read's failure always reaches its caller, which reports it; orbax abandons the sibling
reads as it closes its loop, before the error gets out): otherwise an error from orbax's
code may be the only sign that a write in flight went wrong, so it is shown. (Unraisable
reports and coroutines never awaited are what an operation abandons as it fails, before
its error reaches us; they are dropped while it runs.)
"""

import contextlib
import logging
import os
import re
import sys
import traceback
import warnings
from types import TracebackType
from typing import Any

import orbax.checkpoint as ocp

ORBAX_DIR = os.path.dirname(os.path.dirname(os.path.abspath(ocp.__file__))) + os.sep


def _is_tensorstore_future(value: Any) -> bool:
    return type(value).__module__.startswith("tensorstore") and type(value).__name__ == "Future"


# TensorStore raises its errors from C++ as "CODE: ..." with no Python frames to trace.
_TENSORSTORE_STATUS = re.compile(
    r"(OUT_OF_RANGE|NOT_FOUND|DATA_LOSS|FAILED_PRECONDITION|INVALID_ARGUMENT|UNKNOWN|"
    r"INTERNAL|CANCELLED|ABORTED|UNAVAILABLE|RESOURCE_EXHAUSTED): .*(OCDBT|TensorStore|"
    r"tensorstore|zarr|local file)",
    re.S,
)


def _is_tensorstore_status(error: BaseException) -> bool:
    """An error TensorStore set on a future of an abandoned read (after a failure only)."""
    return bool(_TENSORSTORE_STATUS.match(str(error)))


def _is_from_orbax(tb: TracebackType | None) -> bool:
    """Whether a traceback runs through orbax's code or waits for a TensorStore future
    (asyncio's frames hold it: ``call_soon_threadsafe``'s arguments, ``_wrap_awaitable``'s
    awaitable)."""
    for frame, _ in traceback.walk_tb(tb):
        if frame.f_code.co_filename.startswith(ORBAX_DIR):
            return True
        for value in frame.f_locals.values():
            if any(map(_is_tensorstore_future, value if type(value) is tuple else (value,))):
                return True
    return False


class AbandonedWork(logging.Filter):
    """Drops the reports of what failed orbax operations abandoned (see above): a
    ``sys.unraisablehook``, a filter of the asyncio logger, and the report of coroutines
    never awaited (``warnings._warn_unawaited_coroutine``), each passing on what is not
    orbax's."""

    def __init__(self):
        super().__init__()
        self.running = 0  # our orbax operations running now
        self.reading = 0  # of them, reads (restores)
        self.failed = False  # one failed: what it abandoned may report at any time
        self.previous_hook = self.previous_unawaited = None

    def begin(self) -> None:
        if self.running == 0 and not self.failed:
            self.previous_hook = sys.unraisablehook
            sys.unraisablehook = self.unraisable
            logging.getLogger("asyncio").addFilter(self)
            self.previous_unawaited = getattr(warnings, "_warn_unawaited_coroutine", None)
            if self.previous_unawaited is not None:
                warnings._warn_unawaited_coroutine = self.unawaited
        self.running += 1

    def end(self, failed: bool) -> None:
        self.running -= 1
        self.failed = self.failed or failed
        if self.running == 0 and not self.failed:
            if sys.unraisablehook == self.unraisable:  # else someone replaced it since
                sys.unraisablehook = self.previous_hook
            logging.getLogger("asyncio").removeFilter(self)
            if self.previous_unawaited is not None:
                warnings._warn_unawaited_coroutine = self.previous_unawaited

    # Each report is dropped only if it is known to be orbax's; a check that fails (late in
    # the interpreter's exit, say) lets it through.

    def unraisable(self, report) -> None:
        try:
            code = getattr(report.object, "cr_code", None)  # a coroutine being collected
            orbax = (code and code.co_filename.startswith(ORBAX_DIR)) or _is_from_orbax(
                report.exc_traceback
            )
        except Exception:
            orbax = False
        if not orbax:
            self.previous_hook(report)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.failed and not self.reading:  # no failure yet: this may be the one
            return True
        try:
            error = record.exc_info[1] if record.exc_info else None
            # "Task was destroyed but it is pending!" names the coroutine and its file.
            return not (
                (error and _is_from_orbax(error.__traceback__))
                or ORBAX_DIR in record.getMessage()
                or (error is not None and _is_tensorstore_status(error))
            )
        except Exception:
            return True

    def unawaited(self, coroutine) -> None:
        try:
            orbax = coroutine.cr_code.co_filename.startswith(ORBAX_DIR)
        except Exception:
            orbax = False
        if not orbax:
            self.previous_unawaited(coroutine)


abandoned_work = AbandonedWork()


@contextlib.contextmanager
def operation(reading: bool = False):
    """An orbax read (``reading``) or write; what it abandons if it fails is not
    reported."""
    abandoned_work.begin()
    abandoned_work.reading += reading
    try:
        yield
    except BaseException:
        abandoned_work.end(failed=True)
        raise
    finally:
        abandoned_work.reading -= reading
    abandoned_work.end(failed=False)
