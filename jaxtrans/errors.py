"""The one exception type for mistakes in user input (paths, config values, workdirs).

The command-line programs turn a ``UserError`` into a one-line message and exit status 2;
any other exception is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Bad user input; the message is one line naming the problem and what to do."""


class TrainingStopped(Exception):
    """A run stopped for a reason that is not bad input (e.g. the loss became NaN); the
    message is one line saying what happened and what to do. Exit status 1."""
