"""The TPU slice table: public names and chip grids -> chips, hosts, grid; bad names are
one-line errors that say what to use."""

import pytest

from jaxtrans.compiling.tpu_topologies import GENERATIONS, known_names, slice_named
from jaxtrans.errors import UserError


@pytest.mark.parametrize(
    ("name", "generation", "grid", "chips", "hosts"),
    [
        ("v5e-1", "v5e", (1, 1), 1, 1),
        ("v5e-8", "v5e", (2, 4), 8, 1),  # one host of 8 chips
        ("v5e-32", "v5e", (4, 8), 32, 8),
        ("v6e-8", "v6e", (2, 4), 8, 1),
        ("v6e-256", "v6e", (16, 16), 256, 64),
        ("v4-8", "v4", (2, 2, 1), 4, 1),  # v4 names count TensorCores: two per chip
        ("v4-32", "v4", (2, 2, 4), 16, 4),
        ("v5p-8", "v5p", (2, 2, 1), 4, 1),
        ("v5p-128", "v5p", (4, 4, 4), 64, 16),
        ("v5e:4x8", "v5e", (4, 8), 32, 8),
        ("v5p:4x4x4", "v5p", (4, 4, 4), 64, 16),
        ("V4:2x2x4", "v4", (2, 2, 4), 16, 4),
    ],
)
def test_slices_by_public_name_and_by_grid(name, generation, grid, chips, hosts):
    found = slice_named(name)
    assert (found.generation, found.grid, found.chips, found.hosts) == (
        generation,
        grid,
        chips,
        hosts,
    )


def test_a_grid_and_its_public_name_are_the_same_slice():
    for name in known_names():
        found = slice_named(name)
        assert slice_named(f"{found.generation}:{found.grid_text}") == found, name
        assert found.name == name


def test_the_generations_carry_hbm_and_peak():
    assert GENERATIONS["v5e"].hbm_bytes == 16 * 2**30
    assert GENERATIONS["v5e"].peak_bf16_flops == 197e12
    assert GENERATIONS["v6e"].peak_bf16_flops > GENERATIONS["v5p"].peak_bf16_flops


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("v3-8", "unknown TPU"),
        ("gpu-8", "unknown TPU"),
        ("v5e-7", "no such v5e slice; use one of v5e-1, v5e-4, v5e-8"),
        ("v4-6", "no such v4 slice"),
        ("v5e:2x2x2", "a v5e grid has 2 dimensions"),
        ("v4:2x2", "a v4 grid has 3 dimensions"),
    ],
)
def test_bad_names_say_what_to_use(name, says):
    with pytest.raises(UserError, match=says) as error:
        slice_named(name)
    assert "\n" not in str(error.value)
