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
        self._free_source = np.zeros(pool_rows, np.int64)  # free tokens per open row
        self._free_target = np.zeros(pool_rows, np.int64)

    def add(self, key: int, source_length: int, target_length: int) -> list[list[int]]:
        """Places one pair; returns the rows closed by it (0, 1 or 2), oldest first."""
        closed = []
        n = len(self.rows)
        fits = (self._free_source[:n] >= source_length) & (self._free_target[:n] >= target_length)
        row = int(fits.argmax()) if n else 0
        if not n or not fits[row]:
            if n == self.pool_rows:
                fullest = int((self._free_source[:n] + self._free_target[:n]).argmin())
                closed.append(self._close(fullest))
            row = len(self.rows)
            self.rows.append([])
            self._free_source[row] = self.max_source
            self._free_target[row] = self.max_target
        self.rows[row].append(key)
        self._free_source[row] -= source_length
        self._free_target[row] -= target_length
        full = self.max_pairs_per_row is not None and len(self.rows[row]) >= self.max_pairs_per_row
        if full or min(self._free_source[row], self._free_target[row]) < MIN_PAIR_LENGTH:
            closed.append(self._close(row))
        return closed

    def _close(self, row: int) -> list[int]:
        keys = self.rows.pop(row)
        n = len(self.rows)
        for free in (self._free_source, self._free_target):
            free[row:n] = free[row + 1 : n + 1]
        return keys

    def restore(self, rows: list[list[int]], lengths: dict[int, tuple[int, int]]) -> None:
        """Reopens ``rows`` (saved from ``self.rows``) given each key's (source, target) length."""
        self.rows = [list(r) for r in rows]
        for i, row in enumerate(self.rows):
            self._free_source[i] = self.max_source - sum(lengths[k][0] for k in row)
            self._free_target[i] = self.max_target - sum(lengths[k][1] for k in row)
