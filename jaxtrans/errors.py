"""The one exception type for mistakes in user input (paths, config values, workdirs).

The command-line programs turn a ``UserError`` into a one-line message and exit status 2;
any other exception is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Bad user input; the message is one line naming the problem and what to do."""


class TrainingStopped(Exception):
    """A run stopped for a reason that is not bad input (e.g. the loss became NaN); the
    message is one line saying what happened and what to do. Exit status 1."""


def describe(error: BaseException, limit: int = 160) -> str:
    """``"TypeName: first line of the message"`` (cut to ``limit`` characters) of the error's
    innermost cause, for quoting a library's error inside a one-line UserError (libraries
    such as orbax wrap the specific error, e.g. a short read, in a generic one)."""
    while error.__cause__ is not None:
        error = error.__cause__
    first = (str(error).strip().splitlines() or [""])[0]
    if len(first) > limit:  # keep both ends: the reason is often last ("File too large")
        first = f"{first[: limit // 2]} ... {first[-limit // 2 :]}"
    return f"{type(error).__name__}: {first}"


def json_type(value: object) -> str:
    """The JSON name of a parsed JSON value's type ("an array", "null", ...), for errors
    about a file holding the wrong kind of value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"
