"""--find_batch's search: the largest batch that fits, from any start, each size tried
once, in at most about 2 log2(size) tries."""

import math

import pytest

from jaxtrans.compiling.compile_report import largest_fitting


@pytest.mark.parametrize("bound", [0, 1, 2, 3, 5, 8, 13, 100, 1000, 4096, 9999])
@pytest.mark.parametrize("start", [1, 2, 3, 7, 16, 50, 5000])
def test_the_search_finds_the_bound_from_any_start(bound, start):
    tries = []

    def fits(n):
        tries.append(n)
        return n <= bound

    assert largest_fitting(fits, start, limit=4096) == min(bound, 4096)
    assert len(tries) == len(set(tries))  # no size compiled twice
    # Doubling or halving to bracket the bound, then bisecting the bracket.
    assert len(tries) <= 2 * math.log2(max(bound, start, 2)) + 3


def test_a_batch_that_fits_at_the_limit_stops_there():
    assert largest_fitting(lambda n: True, 3, limit=100) == 100
