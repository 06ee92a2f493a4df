"""jaxtrans.nn.Dropout: flax's contract, masks from 16-bit halves of random words."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.nn import Dropout

SHAPE = (64, 32, 250)  # 512,000 elements: the kept fraction is known to +-0.0025 (6 sigma)


def apply(rate: float, x: jnp.ndarray, seed: int = 0, deterministic: bool = False):
    return Dropout(rate).apply({}, x, deterministic, rngs={"dropout": jax.random.key(seed)})


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_elements_are_dropped_with_probability_rate(rate):
    out = np.asarray(apply(rate, jnp.ones(SHAPE)))
    assert abs(np.mean(out == 0) - rate) < 6 * np.sqrt(rate * (1 - rate) / out.size)


def test_kept_elements_are_scaled_by_the_inverse_keep_probability():
    x = jax.random.normal(jax.random.key(3), SHAPE)
    out = np.asarray(apply(0.1, x))
    kept = out != 0
    keep_probability = round(0.9 * 2**16) / 2**16  # the mask's exact keep probability
    np.testing.assert_allclose(out[kept], np.asarray(x)[kept] / keep_probability, rtol=1e-6)


def test_the_two_halves_of_one_random_word_decide_independently():
    # Neighbours along the last axis share a 32-bit word: both dropped must be rate^2.
    dropped = np.asarray(apply(0.5, jnp.ones(SHAPE))) == 0
    both = np.mean(dropped[..., 0::2] & dropped[..., 1::2])
    assert abs(both - 0.25) < 6 * np.sqrt(0.25 * 0.75 / (dropped.size // 2))


def test_masks_depend_on_the_key():
    a = np.asarray(apply(0.5, jnp.ones(SHAPE), seed=0)) == 0
    b = np.asarray(apply(0.5, jnp.ones(SHAPE), seed=1)) == 0
    assert abs(np.mean(a == b) - 0.5) < 0.01


def test_odd_last_axis_keeps_its_shape_and_rate():
    out = np.asarray(apply(0.2, jnp.ones((4000, 7))))
    assert out.shape == (4000, 7)
    assert abs(np.mean(out == 0) - 0.2) < 6 * np.sqrt(0.2 * 0.8 / out.size)


def test_identity_when_deterministic_or_rate_zero():
    x = jax.random.normal(jax.random.key(4), (3, 5))
    np.testing.assert_array_equal(apply(0.5, x, deterministic=True), x)
    np.testing.assert_array_equal(Dropout(0.0).apply({}, x, False), x)


def test_rate_one_drops_everything():
    assert not np.any(np.asarray(apply(1.0, jnp.ones((3, 5)))))


def test_dtype_is_kept():
    assert apply(0.1, jnp.ones((4, 6), jnp.bfloat16)).dtype == jnp.bfloat16
