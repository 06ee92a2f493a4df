"""Online first-fit packing of sentence pairs into fixed-length rows.

A pool of open rows is kept. Each pair goes into the first open row with room on both
sides (source and target); a row that cannot take even the shortest pair is closed. When
no open row has room and the pool is full, the fullest open row is closed and the pair
starts a new row. Closing rows one at a time (instead of flushing a whole group as soon as
one pair does not fit) keeps padding to a few percent.

The packer stores only keys (the pipeline's example indices) and lengths, so its state is a
list of small integer lists: exact to save and restore.
"""

import numpy as np

# The shortest pair: one piece plus EOS (source), one piece plus BOS/EOS (target).
MIN_PAIR_LENGTH = 2


class FirstFitPacker:
    """Assigns pairs to rows of ``max_source`` source and ``max_target`` target tokens."""

    def __init__(
        self, max_source: int, max_target: int, pool_rows: int, max_pairs_per_row: int | None = None
    ):
        self.max_source = max_source
        self.max_target = max_target
        self.pool_rows = pool_rows
        self.max_pairs_per_row = max_pairs_per_row
        self.rows: list[list[int]] = []  # open rows: keys in packing order
        self._free = np.zeros((pool_rows, 2), np.int64)  # free source/target per open row

    def add(self, key: int, source_length: int, target_length: int) -> list[list[int]]:
        """Places one pair; returns the rows closed by it (0, 1 or 2), oldest first."""
        closed = []
        n = len(self.rows)
        fits = np.flatnonzero(
            (self._free[:n, 0] >= source_length) & (self._free[:n, 1] >= target_length)
        )
        if len(fits):
            row = int(fits[0])
        else:
            if n == self.pool_rows:
                fullest = int(np.argmin(self._free[:n].sum(axis=1)))
                closed.append(self._close(fullest))
            row = len(self.rows)
            self.rows.append([])
            self._free[row] = (self.max_source, self.max_target)
        self.rows[row].append(key)
        self._free[row] -= (source_length, target_length)
        full = self.max_pairs_per_row is not None and len(self.rows[row]) >= self.max_pairs_per_row
        if full or self._free[row].min() < MIN_PAIR_LENGTH:
            closed.append(self._close(row))
        return closed

    def _close(self, row: int) -> list[int]:
        keys = self.rows.pop(row)
        n = len(self.rows)
        self._free[row:n] = self._free[row + 1 : n + 1]
        return keys

    def restore(self, rows: list[list[int]], lengths: dict[int, tuple[int, int]]) -> None:
        """Reopens ``rows`` (saved from ``self.rows``) given each key's (source, target) length."""
        self.rows = [list(r) for r in rows]
        for i, row in enumerate(self.rows):
            used = np.sum([lengths[k] for k in row], axis=0)
            self._free[i] = (self.max_source - used[0], self.max_target - used[1])
