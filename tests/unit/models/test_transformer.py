"""Behaviour of the whole encoder-decoder model: masks, packing, tying, dtypes, params."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.models import Transformer, TransformerConfig

POSITIONS = ["sinusoidal", "learned", "rope"]
VOCAB = 31


def small_config(**changes) -> TransformerConfig:
    base = dict(
        vocab_size=VOCAB,
        d_model=32,
        num_heads=4,
        d_ff=64,
        num_encoder_layers=2,
        num_decoder_layers=2,
        max_len=64,
    )
    return TransformerConfig(**{**base, **changes})


def init(config, source, target):
    variables = jax.jit(Transformer(config).init)(jax.random.key(0), source, target)
    return nn.unbox(variables)


def jitted(config: TransformerConfig, deterministic: bool = True):
    """model.apply(variables, *inputs), compiled once per input shape."""
    model = Transformer(config)
    return jax.jit(lambda v, *a: model.apply(v, *a, deterministic=deterministic))


@pytest.mark.slow
def test_every_parameter_has_logical_axis_names():
    config = small_config(position="learned", share_embeddings=False, tie_output=False)
    src, tgt = jnp.ones((1, 4), jnp.int32), jnp.ones((1, 3), jnp.int32)
    boxed = jax.jit(Transformer(config).init)(jax.random.key(0), src, tgt)["params"]
    leaves = jax.tree.leaves(boxed, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
    assert leaves and all(isinstance(leaf, nn.LogicallyPartitioned) for leaf in leaves)
    for leaf in leaves:
        assert len(leaf.names) == leaf.value.ndim
        assert set(leaf.names) <= {"embed", "heads", "kv", "mlp", "vocab", "length"}


@pytest.mark.slow
def test_weight_matrices_start_xavier_uniform():
    config = small_config(d_model=64, d_ff=256)
    params = init(config, jnp.ones((1, 4), jnp.int32), jnp.ones((1, 3), jnp.int32))["params"]
    wi = np.asarray(params["encoder"]["layer_0"]["feed_forward"]["wi"]["kernel"])
    bound = np.sqrt(6 / (64 + 256))
    assert np.abs(wi).max() <= bound
    assert np.abs(wi).max() > 0.95 * bound  # uniform on the whole interval
    np.testing.assert_allclose(wi.var(), bound**2 / 3, rtol=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("position", POSITIONS)
def test_changing_tokens_under_padding_changes_no_real_output(position):
    config = small_config(position=position, dropout_rate=0.0)
    rng = np.random.default_rng(0)
    src = rng.integers(4, VOCAB, size=(2, 7))
    tgt = rng.integers(4, VOCAB, size=(2, 5))
    src_seg = np.array([[1] * 5 + [0] * 2, [1] * 7])
    tgt_seg = np.array([[1] * 3 + [0] * 2, [1] * 4 + [0]])
    variables = init(config, src, tgt)
    apply = jitted(config)
    base = np.asarray(apply(variables, src, tgt, src_seg, tgt_seg))
    src2, tgt2 = src.copy(), tgt.copy()
    src2[src_seg == 0] = rng.integers(4, VOCAB, size=(src_seg == 0).sum())
    tgt2[tgt_seg == 0] = rng.integers(4, VOCAB, size=(tgt_seg == 0).sum())
    changed = np.asarray(apply(variables, src2, tgt2, src_seg, tgt_seg))
    real = tgt_seg != 0
    np.testing.assert_allclose(changed[real], base[real], atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("position", POSITIONS)
def test_extra_trailing_padding_changes_no_real_output(position):
    config = small_config(position=position)
    src = jnp.array([[5, 6, 7, 8]])
    tgt = jnp.array([[2, 9, 10]])
    variables = init(config, src, tgt)
    apply = jitted(config)
    base = np.asarray(apply(variables, src, tgt))
    padded = np.asarray(
        apply(variables, jnp.pad(src, ((0, 0), (0, 5))), jnp.pad(tgt, ((0, 0), (0, 4))))
    )
    np.testing.assert_allclose(padded[:, :3], base, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("position", POSITIONS)
def test_decoder_output_before_t_does_not_depend_on_target_token_t(position):
    config = small_config(position=position)
    rng = np.random.default_rng(1)
    src = rng.integers(4, VOCAB, size=(2, 6))
    tgt = rng.integers(4, VOCAB, size=(2, 6))
    variables = init(config, src, tgt)
    apply = jitted(config)
    base = np.asarray(apply(variables, src, tgt))
    for t in range(1, 6):
        tgt2 = tgt.copy()
        tgt2[:, t] = (tgt2[:, t] + 1 - 4) % (VOCAB - 4) + 4
        changed = np.asarray(apply(variables, src, tgt2))
        np.testing.assert_allclose(changed[:, :t], base[:, :t], atol=1e-6)
        assert not np.allclose(changed[:, t:], base[:, t:])  # and later positions do see it


@pytest.mark.parametrize(
    "position, norm",
    [("sinusoidal", "post"), ("learned", "pre"), ("rope", "post"), ("rope", "pre")],
)
@pytest.mark.slow
def test_two_pairs_packed_in_one_row_equal_each_pair_alone(position, norm):
    config = small_config(position=position, norm=norm)
    src_a, tgt_a = [5, 6, 7, 8, 1], [2, 9, 10, 11]
    src_b, tgt_b = [12, 13, 1], [2, 14, 15]
    src = jnp.array([src_a + src_b + [0, 0]])
    tgt = jnp.array([tgt_a + tgt_b + [0]])
    src_seg = jnp.array([[1] * 5 + [2] * 3 + [0, 0]])
    tgt_seg = jnp.array([[1] * 4 + [2] * 3 + [0]])
    variables = init(config, src, tgt)
    apply = jitted(config)
    packed = np.asarray(apply(variables, src, tgt, src_seg, tgt_seg))
    alone_a = np.asarray(apply(variables, jnp.array([src_a]), jnp.array([tgt_a])))
    alone_b = np.asarray(apply(variables, jnp.array([src_b]), jnp.array([tgt_b])))
    np.testing.assert_allclose(packed[0, :4], alone_a[0], atol=1e-5)
    np.testing.assert_allclose(packed[0, 4:7], alone_b[0], atol=1e-5)


@pytest.mark.slow
def test_tied_output_projection_is_the_embedding_and_gets_gradient_from_both_uses():
    tied = small_config(dropout_rate=0.0)
    src = jnp.array([[5, 6, 7, 1], [8, 9, 1, 0]])
    tgt = jnp.array([[2, 10, 11], [2, 12, 0]])
    params = init(tied, src, tgt)["params"]
    assert set(params) == {"source_embedding", "encoder", "decoder"}  # one table, no output layer
    embedding = params["source_embedding"]["embedding"]

    def loss(model, p):
        return jnp.sum(jnp.tanh(model.apply({"params": p}, src, tgt)))

    grad_tied = jax.jit(jax.grad(lambda p: loss(Transformer(tied), p)))(params)
    # The same function with the output projection as a separate copy of the table
    # splits the gradient into its lookup and projection parts.
    untied = small_config(dropout_rate=0.0, tie_output=False)
    params_untied = {
        **params,
        "output": {"kernel": embedding.T, "bias": jnp.zeros(VOCAB)},
    }
    np.testing.assert_allclose(
        jax.jit(lambda p: loss(Transformer(untied), p))(params_untied),
        jax.jit(lambda p: loss(Transformer(tied), p))(params),
        rtol=1e-6,
    )
    grad_untied = jax.jit(jax.grad(lambda p: loss(Transformer(untied), p)))(params_untied)
    lookup = np.asarray(grad_untied["source_embedding"]["embedding"])
    projection = np.asarray(grad_untied["output"]["kernel"]).T
    assert np.abs(lookup).max() > 0 and np.abs(projection).max() > 0
    np.testing.assert_allclose(
        np.asarray(grad_tied["source_embedding"]["embedding"]), lookup + projection, atol=1e-5
    )


@pytest.mark.slow
def test_separate_embeddings_and_vocabularies():
    config = small_config(share_embeddings=False, tie_output=False, target_vocab_size=17)
    src, tgt = jnp.array([[30, 29, 1]]), jnp.array([[2, 16]])
    variables = init(config, src, tgt)
    params = variables["params"]
    assert params["source_embedding"]["embedding"].shape == (VOCAB, 32)
    assert params["target_embedding"]["embedding"].shape == (17, 32)
    assert jitted(config)(variables, src, tgt).shape == (1, 2, 17)


def test_shared_embeddings_need_one_vocabulary():
    with pytest.raises(ValueError, match="share_embeddings"):
        small_config(target_vocab_size=17)


@pytest.mark.slow
def test_a_zero_start_decoder_reads_a_zero_vector_for_bos_wherever_it_stands():
    """decoder_start_embedding="zero": BOS (at a sentence's start, or a packed segment's)
    embeds as zeros, so its row never matters; "learned" with that row zeroed is the same."""
    config = small_config(decoder_start_embedding="zero")
    src, tgt = jnp.array([[5, 6, 7, 1]]), jnp.array([[2, 9, 10, 2, 11]])
    variables = init(config, src, tgt)
    logits = jitted(config)(variables, src, tgt)
    table = variables["params"]["source_embedding"]["embedding"]
    moved = jax.tree.map(lambda x: x, variables)
    moved["params"]["source_embedding"]["embedding"] = table.at[2].add(1.0)
    np.testing.assert_array_equal(jitted(config)(moved, src, tgt)[..., 3:], logits[..., 3:])
    zeroed = jax.tree.map(lambda x: x, variables)
    zeroed["params"]["source_embedding"]["embedding"] = table.at[2].set(0.0)
    learned = jitted(config.replace(decoder_start_embedding="learned"))(zeroed, src, tgt)
    np.testing.assert_allclose(learned[..., 3:], logits[..., 3:], atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "change",
    [
        {"norm": "sideways"},
        {"position": "absolute"},
        {"num_heads": 5},
        {"decoder_start_embedding": "bos"},
    ],
)
def test_invalid_config_is_rejected_with_the_field_named(change):
    with pytest.raises(ValueError, match=next(iter(change)).split("_")[0]):
        small_config(**change)


@pytest.mark.slow
def test_dropout_only_in_training_mode():
    config = small_config()
    src, tgt = jnp.array([[5, 6, 7, 1]]), jnp.array([[2, 9, 10]])
    variables = init(config, src, tgt)
    model = Transformer(config)

    evaluate = jax.jit(lambda key: model.apply(variables, src, tgt, rngs={"dropout": key}))
    train_apply = jax.jit(
        lambda key: model.apply(variables, src, tgt, deterministic=False, rngs={"dropout": key})
    )
    eval_a = evaluate(jax.random.key(1))
    eval_b = evaluate(jax.random.key(2))
    train = train_apply(jax.random.key(1))
    np.testing.assert_array_equal(np.asarray(eval_a), np.asarray(eval_b))
    assert not np.allclose(np.asarray(train), np.asarray(eval_a))


@pytest.mark.slow
def test_remat_gives_the_same_gradients():
    src, tgt = jnp.array([[5, 6, 7, 1]]), jnp.array([[2, 9, 10]])
    config = small_config(dropout_rate=0.0, attention_dropout_rate=0.0, activation_dropout_rate=0.0)
    params = init(config, src, tgt)["params"]

    def grads(cfg):
        model = Transformer(cfg)
        loss = lambda p: model.apply({"params": p}, src, tgt, deterministic=False).sum()
        return jax.jit(jax.grad(loss))(params)

    for a, b in zip(
        jax.tree.leaves(grads(config)),
        jax.tree.leaves(grads(config.replace(remat=True))),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("position", POSITIONS)
def test_bfloat16_compute_stays_within_bfloat16_tolerance_of_float32(position):
    config = small_config(position=position, norm="pre")
    rng = np.random.default_rng(3)
    src = rng.integers(4, VOCAB, size=(2, 8))
    tgt = rng.integers(4, VOCAB, size=(2, 6))
    variables = init(config, src, tgt)
    full = np.asarray(jitted(config)(variables, src, tgt))
    half = jitted(config.replace(dtype="bfloat16"))(variables, src, tgt)
    assert half.dtype == jnp.float32  # logits come back in float32 for the loss
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables))
    # bfloat16 keeps 8 significant bits (relative step 2^-8 = 0.4%); through 2+2
    # layers the error stays within a few steps of the logit scale.
    scale = np.abs(full).max()
    assert np.abs(np.asarray(half) - full).max() <= 4 * 2**-8 * scale
    # ...and it really computed in bfloat16 (otherwise the outputs would be equal).
    assert np.abs(np.asarray(half) - full).max() > 1e-4
