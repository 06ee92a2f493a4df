"""train.dropout_rng_impl: each generator's dropout keys, as the train step derives them
(TrainState.dropout_key, then flax's per-module fold-in), give masks of the right
statistics, different for each step and each dropout, and the same again for the same
step; the bad name and the TPU partitioning flag."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxtrans.errors import UserError
from jaxtrans.nn import Dropout
from jaxtrans.training.dropout_rng import (
    DROPOUT_RNG_IMPLS,
    TPU_RBG_FLAG,
    dropout_key_data,
    partition_rng_on_tpu,
)
from jaxtrans.training.run_sections import TrainConfig
from jaxtrans.training.state import TrainState, train_state_init

SHAPE = (64, 32, 250)  # 512,000 elements a mask
RATE = 0.3
KEEP = round((1 - RATE) * 2**16) / 2**16  # the mask's exact keep probability


class TwoDropouts(nn.Module):
    """Two dropouts of one step, as two sublayers of a model have."""

    @nn.compact
    def __call__(self, x):
        return Dropout(RATE, name="first")(x, False), Dropout(RATE, name="second")(x, False)


def state_at(step: int, impl: str, seed: int = 0) -> TrainState:
    rng = dropout_key_data(jax.random.key(seed), impl)
    return TrainState(step=jnp.int32(step), params={}, opt_state=(), rng=rng, rng_impl=impl)


@jax.jit
def _masks(key):
    first, second = TwoDropouts().apply({}, jnp.ones(SHAPE), rngs={"dropout": key})
    return first != 0, second != 0


def kept(step: int, impl: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The keep masks of the two dropouts at ``step`` (True: kept)."""
    return tuple(np.asarray(m) for m in _masks(state_at(step, impl, seed).dropout_key()))


def within(observed: float, expected: float, count: int, sigmas: float = 6.0) -> bool:
    """A binomial share of ``count`` trials within ``sigmas`` standard deviations."""
    return abs(observed - expected) <= sigmas * np.sqrt(expected * (1 - expected) / count)


@pytest.mark.parametrize("impl", list(DROPOUT_RNG_IMPLS))
def test_masks_keep_each_element_with_the_keep_probability(impl):
    first, second = kept(7, impl)
    for mask in (first, second):
        assert within(mask.mean(), KEEP, mask.size)
        # Neighbours share a 32-bit word (one 16-bit half each): independent, KEEP^2 both.
        both = np.mean(mask[..., 0::2] & mask[..., 1::2])
        assert within(both, KEEP**2, mask.size // 2)
        # Rows and positions alike: no row keeps systematically more.
        per_row = mask.size // SHAPE[0]
        assert all(within(row, KEEP, per_row) for row in mask.reshape(SHAPE[0], -1).mean(1))


@pytest.mark.parametrize("impl", list(DROPOUT_RNG_IMPLS))
def test_each_step_and_each_dropout_draws_an_independent_mask(impl):
    first, second = kept(7, impl)
    next_first, _ = kept(8, impl)
    agree = KEEP**2 + (1 - KEEP) ** 2  # two independent masks agree this often
    assert within(np.mean(first == second), agree, first.size)
    assert within(np.mean(first == next_first), agree, first.size)
    other_seed, _ = kept(7, impl, seed=1)
    assert within(np.mean(first == other_seed), agree, first.size)


@pytest.mark.parametrize("impl", list(DROPOUT_RNG_IMPLS))
def test_the_same_step_draws_the_same_masks_again(impl):
    # What an exact resume rests on: the key data and the step decide the masks.
    for a, b in zip(kept(7, impl), kept(7, impl), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_generators_draw_different_masks_from_one_seed():
    threefry, rbg, unsafe = (kept(7, impl)[0] for impl in ("threefry", "rbg", "unsafe_rbg"))
    assert not np.array_equal(threefry, rbg) and not np.array_equal(rbg, unsafe)


def test_key_data_has_the_shape_of_its_generator_and_threefry_is_as_before():
    rng = jax.random.key(5)
    np.testing.assert_array_equal(dropout_key_data(rng, "threefry"), jax.random.key_data(rng))
    for impl in ("rbg", "unsafe_rbg"):
        data = dropout_key_data(rng, impl)
        assert data.shape == (4,) and data.dtype == jnp.uint32
        assert str(jax.random.key_impl(state_at(0, impl).dropout_key())) == impl


def test_the_initial_parameters_do_not_depend_on_the_generator():
    def init_params(rng):
        return {"w": jax.random.normal(rng, (3, 4)), "b": jax.random.uniform(rng, (4,))}

    states = {
        impl: train_state_init(init_params, optax.adam(1e-3), impl)(jax.random.key(3))
        for impl in DROPOUT_RNG_IMPLS
    }
    for impl, state in states.items():
        assert state.rng_impl == impl
        for a, b in zip(
            jax.tree.leaves(state.params), jax.tree.leaves(states["threefry"].params), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(states["rbg"].rng[:2], states["threefry"].rng)


def test_a_bad_generator_name_is_a_one_line_error():
    with pytest.raises(UserError) as raised:
        TrainConfig(dropout_rng_impl="philox")
    message = str(raised.value)
    assert (
        message == ("--config.train.dropout_rng_impl='philox': use threefry, rbg, unsafe_rbg")
        and "\n" not in message
    )


def test_rbg_asks_libtpu_to_partition_the_generator_once_and_keeps_a_given_setting():
    environ = {}
    assert not partition_rng_on_tpu("threefry", environ) and environ == {}
    assert partition_rng_on_tpu("rbg", environ)
    assert environ == {"LIBTPU_INIT_ARGS": TPU_RBG_FLAG}
    assert not partition_rng_on_tpu("unsafe_rbg", environ)  # already there
    given = {"LIBTPU_INIT_ARGS": "--xla_tpu_spmd_rng_bit_generator_unsafe=false --x=1"}
    assert not partition_rng_on_tpu("rbg", given)
    assert given["LIBTPU_INIT_ARGS"].startswith("--xla_tpu_spmd_rng_bit_generator_unsafe=false")
    other = {"LIBTPU_INIT_ARGS": "--xla_enable_async_all_gather=true"}
    assert partition_rng_on_tpu("rbg", other)
    assert other["LIBTPU_INIT_ARGS"] == f"--xla_enable_async_all_gather=true {TPU_RBG_FLAG}"
