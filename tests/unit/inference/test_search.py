"""The search's own pieces, checked against jax.numpy."""

import jax.numpy as jnp
import numpy as np

from jaxtrans.inference.search import argmax


def test_argmax_picks_the_first_maximum_as_jnp_argmax():
    rng = np.random.default_rng(0)
    # Few distinct values: many rows hold their maximum more than once.
    x = rng.integers(-3, 4, size=(64, 500)).astype(np.float32)
    x[5, :] = -np.inf  # a row with nothing allowed
    np.testing.assert_array_equal(argmax(jnp.asarray(x)), np.argmax(x, axis=-1))


def test_argmax_of_a_row_with_nan_is_its_first_nan_as_jnp_argmax():
    x = np.zeros((3, 10), np.float32)
    x[0, 4] = x[0, 7] = np.nan
    x[1, 2] = np.inf
    x[2, 9] = np.nan
    x[2, 1] = np.inf
    expected = jnp.argmax(jnp.asarray(x), axis=-1)
    np.testing.assert_array_equal(argmax(jnp.asarray(x)), expected)
    np.testing.assert_array_equal(expected, [4, 2, 9])
