"""The answer span of an extractive question-answering model, chosen over the windows of
one example (a long context is read in overlapping windows).

In every window the candidates are the spans ``start <= end`` that lie inside the
window's context part and are at most ``max_answer_length`` pieces long; a span scores
``start_logit + end_logit``, and the best span over all windows wins (as BERT's
``run_squad.py`` and Hugging Face's ``postprocess_qa_predictions``, taking the exact
maximum rather than the best of the top-20 starts and ends). The no-answer score is the
[CLS] (position 0) start + end logit, its minimum over the windows; with no-answer
allowed (SQuAD 2.0) the answer is "none" when ``null_score > best_span_score +
null_score_diff_threshold``.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class SpanChoice:
    """The best span: window index, first and last position in that window (inclusive),
    its score; the no-answer score; and whether no-answer won (``window`` is then still
    the best span's, or -1 when no window has a context position)."""

    window: int
    start: int
    end: int
    score: float
    null_score: float
    no_answer: bool


def best_window_span(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    context: tuple[int, int],
    max_answer_length: int,
) -> tuple[int, int, float]:
    """The best span of one window: start, end (inclusive) and score.

    start_logits, end_logits: [length] float; context: the window's context positions
    ``[first, stop)``. Returns (-1, -1, -inf) when the context part is empty."""
    first, stop = context
    if stop <= first:
        return -1, -1, float("-inf")
    starts = np.asarray(start_logits[first:stop], np.float64)
    ends = np.asarray(end_logits[first:stop], np.float64)
    n = stop - first
    best = (-1, -1, float("-inf"))
    # Spans of each length ``offset + 1`` at once: starts[i] + ends[i + offset].
    for offset in range(min(max_answer_length, n)):
        scores = starts[: n - offset] + ends[offset:]
        i = int(np.argmax(scores))
        if scores[i] > best[2]:
            best = (first + i, first + i + offset, float(scores[i]))
    return best


def choose_span(
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    contexts: Sequence[tuple[int, int]],
    *,
    max_answer_length: int,
    allow_no_answer: bool,
    null_score_diff_threshold: float = 0.0,
) -> SpanChoice:
    """The answer over the windows of one example: per window its start and end logits
    ([length] each) and context positions ``[first, stop)``. Ties go to the earlier window
    and the earlier, shorter span. Without ``allow_no_answer`` a span always wins when
    there is one."""
    if max_answer_length < 1:
        raise ValueError(f"max_answer_length must be at least 1, got {max_answer_length}")
    best = (-1, -1, -1, float("-inf"))
    null_score = float("inf")
    for w, (starts, ends, context) in enumerate(
        zip(start_logits, end_logits, contexts, strict=True)
    ):
        null_score = min(null_score, float(starts[0]) + float(ends[0]))
        start, end, score = best_window_span(starts, ends, context, max_answer_length)
        if score > best[3]:
            best = (w, start, end, score)
    window, start, end, score = best
    no_answer = window < 0 or (allow_no_answer and null_score > score + null_score_diff_threshold)
    return SpanChoice(window, start, end, score, null_score, no_answer)
