"""Beam search's reorder of a decoding cache: only the slots written so far move, and
decoding is what gathering the whole cache gives."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_transformer_config

from jaxtrans.inference.beam_search import beam_search, gather_rows
from jaxtrans.inference.decoding import decoder
from jaxtrans.models import Transformer
from jaxtrans.nn.attention import reorder_cache

ROWS = np.array([2, 2, 0, 5, 3, 3])  # each beam's parent row: some twice, some dropped


def _cache(rng, shape, written: int) -> dict:
    return {
        "cached_key": rng.normal(size=shape).astype(np.float32),
        "cached_value": rng.normal(size=shape).astype(np.float32),
        "cache_index": np.int32(written),
    }


def _expected(cache: dict) -> dict:
    """NumPy: the written slots (second to last axis) of every row from its parent row;
    the rest as it was."""
    written = int(cache["cache_index"])
    out = {"cache_index": cache["cache_index"]}
    for name in ("cached_key", "cached_value"):
        x = cache[name].copy()
        x[..., :written, :] = cache[name][ROWS][..., :written, :]
        out[name] = x
    return out


def test_the_written_slots_of_every_layer_follow_the_rows_and_the_rest_stay():
    rng = np.random.default_rng(0)
    cache = {
        "layer_0": {"self_attention": _cache(rng, (6, 2, 8, 4), written=3)},
        "layer_1": {"self_attention": _cache(rng, (6, 2, 8, 4), written=3)},
        # A scanned stack, rows first: [rows, layers, heads, max_len, head_dim].
        "layers": {"self_attention": _cache(rng, (6, 3, 2, 8, 4), written=3)},
    }
    got = jax.jit(reorder_cache)(cache, jnp.asarray(ROWS))
    for layer, expected in [(k, _expected(v["self_attention"])) for k, v in cache.items()]:
        for name, x in expected.items():
            np.testing.assert_array_equal(np.asarray(got[layer]["self_attention"][name]), x)


def test_an_ensembles_caches_are_reordered_member_by_member():
    rng = np.random.default_rng(1)
    members = (_cache(rng, (6, 2, 8, 4), written=5), _cache(rng, (6, 1, 8, 2), written=5))
    got = reorder_cache(members, jnp.asarray(ROWS))
    for member, cache in zip(got, members, strict=True):
        for name, x in _expected(cache).items():
            np.testing.assert_array_equal(np.asarray(member[name]), x)


def test_a_cache_without_an_index_is_gathered_whole():
    rng = np.random.default_rng(2)
    cache = {"state": rng.normal(size=(6, 3)).astype(np.float32), "count": np.int32(4)}
    got = reorder_cache(cache, jnp.asarray(ROWS))
    np.testing.assert_array_equal(np.asarray(got["state"]), cache["state"][ROWS])
    assert int(got["count"]) == 4


@pytest.mark.parametrize("scan_layers", [False, True], ids=["layers", "scanned"])
def test_beam_search_with_the_written_slots_reordered_equals_the_whole_cache_gathered(
    scan_layers,
):
    config = tiny_transformer_config("rope", vocab=11, scan_layers=scan_layers)
    source = jnp.asarray(np.random.default_rng(3).integers(3, 11, size=(3, 5)), jnp.int32)
    params = nn.unbox(Transformer(config).init(jax.random.key(4), source, source))["params"]
    lengths = jnp.array([9, 6, 9])

    @jax.jit
    def search(params, use_index: bool):
        step, cache, _ = decoder(config, params, source, 9, beam_size=3)
        reorder = reorder_cache if use_index else gather_rows
        return beam_search(step, cache, lengths, 9, 3, 0.6, reorder=reorder, return_logprobs=True)

    search = jax.jit(search.__wrapped__, static_argnums=1)
    (tokens, scores, logprobs), (tokens_whole, scores_whole, logprobs_whole) = (
        search(params, True),
        search(params, False),
    )
    np.testing.assert_array_equal(np.asarray(tokens), np.asarray(tokens_whole))
    assert np.isfinite(np.asarray(scores)).all()
    # Two compiled programs: XLA may fuse and sum their float32 products in another order
    # (a few ulps; 1.5e-7 relative seen), while a slot read wrongly would move a score by
    # far more than this.
    np.testing.assert_allclose(np.asarray(scores), np.asarray(scores_whole), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(logprobs), np.asarray(logprobs_whole), rtol=1e-6)
