"""The record every source yields, and the shape of a source of training pairs."""

from collections.abc import Sequence
from typing import NamedTuple


class TranslationPair(NamedTuple):
    """One sentence and its translation, as text."""

    source: str
    target: str


# A training source is random-access so that shuffling, sharding and resuming are exact:
# ``source[i]`` is pair i, or None for a malformed line skipped by ``skip_malformed``.
PairSource = Sequence[TranslationPair | None]


def swapped(pair: TranslationPair) -> TranslationPair:
    """The same pair read in the other direction (``data.reverse``)."""
    return TranslationPair(pair.target, pair.source)
