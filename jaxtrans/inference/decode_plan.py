"""How a decoding call is staged on the platform it is traced for: one DecodePlan per batch
shape, read by decoding.py and carried out by staged_search.py; the searches never ask.

On CPU a step attends to every slot of its self-attention cache, filled or not, and its
time grows with its rows; most sentences end long before max_len and a batch's sentences
end at different steps. So a CPU decoder starts from a cache of the source's length and
FIRST_SLOTS_MARGIN more slots (widened to max_len if a sentence gets that far), and
greedy search and sampling narrow to a quarter of their rows once at most a quarter still
run. On an accelerator a step costs about the same for fewer rows or slots, and each
stage is another program to compile: the plain plan. Source lengths also go up a finer
ladder on CPU (``length_multiple``), where a padded position costs as much as a real one.

A plan changes how the work is cut, never its result: the same tokens either way
(tests/unit/inference/test_narrowing.py, test_widening.py). The measurements behind each
number are in docs/benchmarks.md, "Decoding on CPU: the plan's choices".
"""

import dataclasses

from jaxtrans.nn.attention_kernels import current_platform

# Greedy search and sampling narrow to this share of their rows (1 / NARROWED_SHARE) ...
NARROWED_SHARE = 4
# ... if that leaves at least so many rows: below them a step's time hardly falls with its rows.
FEWEST_NARROWED_ROWS = 16
# A CPU decoder's first cache holds the source's tokens and so many more (a multiple of 8).
FIRST_SLOTS_MARGIN = 8
# Source lengths go up the ladder of this multiple (length_buckets.bucket_length).
CPU_LENGTH_MULTIPLE = 8
ACCELERATOR_LENGTH_MULTIPLE = 16


@dataclasses.dataclass(frozen=True)
class DecodePlan:
    """How one decoding call runs its search (staged_search.py); hashable, static.

    max_len: the output's length, and the cache's once widened. slots: the tokens the
    self-attention cache first holds (max_len: never widened). stages: the row counts,
    decreasing, that greedy search and sampling narrow to as rows finish (beam search
    never narrows: its beams share their sentence's rows).
    """

    max_len: int
    slots: int
    stages: tuple[int, ...] = ()

    @property
    def staged(self) -> bool:
        """Whether the search runs in more than one loop: a short cache or narrowing."""
        return self.slots < self.max_len or bool(self.stages)


def plain_plan(max_len: int) -> DecodePlan:
    """One loop over every row with a cache of max_len slots."""
    return DecodePlan(max_len, max_len)


def decode_plan(rows: int, source_len: int, max_len: int) -> DecodePlan:
    """The plan of a decoder of ``rows`` rows, sources padded to ``source_len`` tokens and
    outputs of ``max_len``: on CPU a first cache of source_len + FIRST_SLOTS_MARGIN slots
    rounded up to a multiple of 8 (if under max_len), and one narrowing to a quarter of
    the rows (if that leaves FEWEST_NARROWED_ROWS); elsewhere the plain plan."""
    if current_platform() != "cpu":
        return plain_plan(max_len)
    slots = min(-(-(source_len + FIRST_SLOTS_MARGIN) // 8) * 8, max_len)
    narrowed = -(-rows // NARROWED_SHARE)
    stages = (narrowed,) if narrowed >= FEWEST_NARROWED_ROWS else ()
    return DecodePlan(max_len, slots, stages)


def length_multiple() -> int:
    """The ladder's multiple for source lengths (length_buckets.bucket_length) where the
    caller gives none: finer on CPU. It makes the batch shapes, so it is decided before
    any plan."""
    return CPU_LENGTH_MULTIPLE if current_platform() == "cpu" else ACCELERATOR_LENGTH_MULTIPLE
