"""Every position kind answers every question the model asks, its answers agree with one
another, and a kind with a bias on the attention scores (a test kind here) enters
attention as a float64 reference says."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from position_kinds import DistancePenalty

from jaxtrans.models import TransformerConfig
from jaxtrans.nn import BlockConfig, MultiHeadAttention
from jaxtrans.nn.attention_kernels import attention_kernel, model_attention_kernels
from jaxtrans.nn.positions import ENCODINGS, PositionEncoding, apply_rope, default_positions

D_MODEL, HEADS, MAX_LEN = 16, 2, 12


def tiny_config(position: str, **changes) -> BlockConfig:
    return BlockConfig(
        d_model=D_MODEL, num_heads=HEADS, d_ff=32, max_len=MAX_LEN, position=position,
        dropout_rate=0.0, attention_dropout_rate=0.0, activation_dropout_rate=0.0, **changes,
    )  # fmt: skip


class Embedded(nn.Module):
    """What a kind adds to the embeddings, its table made and bound as a model does."""

    encoding: PositionEncoding

    def setup(self):
        self.table = self.encoding.make_table()

    def __call__(self, positions):
        return self.encoding.embed(positions, self.table)


def embedded(encoding: PositionEncoding, positions: jnp.ndarray):
    """(what embed adds at positions, the table's parameters or None)."""
    module = Embedded(encoding)
    variables = module.init(jax.random.key(0), positions)
    params = nn.unbox(variables).get("params", {}).get("table")
    return module.apply(variables, positions), params


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_every_registered_kind_answers_every_question_consistently(name):
    encoding = tiny_config(name).position_encoding
    assert type(encoding) is ENCODINGS[name] and encoding.name == name
    encoding.check()
    positions = jnp.array([[0, 1, 2, 3, 4], [3, 4, 5, 0, 1]])

    added, params = embedded(encoding, positions)
    if added is not None:
        assert added.shape == (2, 5, D_MODEL)
    # What an exporter writes as a table is what the model adds at positions 0 .. rows-1.
    limit = encoding.max_length()
    assert limit is None or (isinstance(limit, int) and limit >= 1)
    rows = limit or 2 * MAX_LEN
    table = encoding.encodings(params, rows)
    ids = jnp.arange(rows)[None]
    if added is None:
        assert table is None
    else:
        assert table.dtype == np.float32 and table.shape == (rows, D_MODEL)
        np.testing.assert_allclose(table, np.asarray(embedded(encoding, ids)[0][0]), atol=1e-6)

    # rotate turns queries and keys exactly where the kind says, as its Rotary describes.
    x = jax.random.normal(jax.random.key(1), (2, 5, HEADS, D_MODEL // HEADS))
    rotated = encoding.rotate(x, positions)
    assert rotated.shape == x.shape
    assert encoding.rotates == (not np.allclose(rotated, x))
    rotary = encoding.rotary()
    if rotary is not None:
        assert encoding.rotates and not rotary.interleaved
        np.testing.assert_allclose(rotated, apply_rope(x, positions, rotary.base), atol=1e-6)

    bias = encoding.attention_bias(positions, positions)
    assert encoding.biases_attention == (bias is not None)
    # The fields a kind names are the translation model's (BERT's lack sinusoidal_layout).
    assert set(encoding.fields) <= {f.name for f in dataclasses.fields(TransformerConfig)}


def test_a_kind_that_leaves_a_question_unanswered_cannot_be_made():
    class NoBiasAnswer(PositionEncoding):
        name = "incomplete"
        rotates = biases_attention = False

        def check(self):
            pass

    with pytest.raises(TypeError, match="abstract"):
        NoBiasAnswer(tiny_config("sinusoidal"))


def test_an_unknown_kind_is_refused_naming_the_kinds():
    with pytest.raises(ValueError, match=r"position='alibi' is not one of \('sinusoidal'"):
        tiny_config("alibi")


def test_a_field_of_another_kind_set_away_from_its_default_is_refused():
    with pytest.raises(ValueError, match="rope_base=500.0 needs position='rope'"):
        tiny_config("sinusoidal", rope_base=500.0)
    assert tiny_config("rope", rope_base=500.0).position_encoding.rotary().base == 500.0


def test_rope_refuses_an_odd_head_dimension():
    with pytest.raises(ValueError, match="even head dimension"):
        BlockConfig(d_model=6, num_heads=2, position="rope")


def float64_attention_weights(params, x, positions, config, bias_fn):
    """softmax(q k^T / sqrt(d) + bias) per head from the module's parameters, in float64."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), nn.unbox(params))
    xd = np.asarray(x, np.float64)
    q = np.einsum("bld,dnh->blnh", xd, p["query"]["kernel"]) + p["query"]["bias"]
    k = np.einsum("bld,dnh->blnh", xd, p["key"]["kernel"]) + p["key"]["bias"]
    scores = np.einsum("bqnh,bknh->bnqk", q, k) / np.sqrt(config.head_dim)
    scores = scores + bias_fn(np.asarray(positions))
    scores = scores - scores.max(-1, keepdims=True)
    weights = np.exp(scores)
    return weights / weights.sum(-1, keepdims=True)


def test_a_score_bias_enters_attention_as_a_float64_reference_says(monkeypatch):
    monkeypatch.setitem(ENCODINGS, DistancePenalty.name, DistancePenalty)
    config = tiny_config(DistancePenalty.name)
    x = jax.random.normal(jax.random.key(2), (2, 6, D_MODEL))
    positions = default_positions(2, 6, jnp.array([[1, 1, 1, 2, 2, 2], [1] * 6]))
    module = MultiHeadAttention(config, positions=config.position_encoding)
    variables = module.init(jax.random.key(3), x, x, None, positions, positions)
    _, state = module.apply(variables, x, x, None, positions, positions, mutable="intermediates")
    got = np.asarray(state["intermediates"]["attention_weights"][0])
    expected = float64_attention_weights(
        variables["params"], x, positions, config, DistancePenalty.reference
    )
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # The bias matters: the same module without positions gives other weights.
    _, plain = MultiHeadAttention(config).apply(variables, x, x, mutable="intermediates")
    assert not np.allclose(got, plain["intermediates"]["attention_weights"][0], atol=1e-3)


def test_an_attention_with_a_score_bias_runs_xla_and_says_why(monkeypatch):
    assert attention_kernel("splash", "tpu", jnp.bfloat16, "padding", bias=True) == (
        "xla",
        "a bias on the scores (only xla adds one)",
    )
    monkeypatch.setitem(ENCODINGS, DistancePenalty.name, DistancePenalty)
    config = tiny_config(DistancePenalty.name, attention_impl="splash")
    kernels = model_attention_kernels(config, "tpu", jnp.bfloat16)
    assert kernels["encoder self"][0] == "xla"
    assert model_attention_kernels(tiny_config("rope", attention_impl="splash"), "tpu")[
        "encoder self"
    ] == ("splash", None)
