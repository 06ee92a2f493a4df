"""The chunked loss (jaxtrans.training.chunked_loss) against the plain one on the whole
logits (jaxtrans.training.loss), which stays the reference: values and the gradients with
respect to the states, the kernel and the bias.

Tolerances are relative to the reference's size: |chunked - plain| <= 1e-5 * |plain| for
each sum, and max |chunked - plain| <= 1e-5 * max |plain| over each gradient's elements.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.training.chunked_loss import chunk_positions, chunked_label_smoothed_cross_entropy
from jaxtrans.training.loss import label_smoothed_cross_entropy

RTOL = 1e-5


def problem(rows, length, d_model, vocab, seed=0, scale=1.0, bias=True, padding=0.3):
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(rows, length, d_model)).astype(np.float32)
    kernel = (rng.normal(size=(d_model, vocab)) * scale / np.sqrt(d_model)).astype(np.float32)
    b = rng.normal(size=(vocab,)).astype(np.float32) if bias else None
    targets = rng.integers(0, vocab, (rows, length)).astype(np.int32)
    weights = rng.random((rows, length)) >= padding
    return hidden, kernel, b, targets, weights


def plain(hidden, kernel, bias, targets, weights, smoothing):
    logits = jnp.einsum("rld,dv->rlv", hidden, kernel)
    if bias is not None:
        logits = logits + bias
    return label_smoothed_cross_entropy(logits, targets, weights, smoothing)


def chunked(chunk_tokens):
    def loss(hidden, kernel, bias, targets, weights, smoothing):
        return chunked_label_smoothed_cross_entropy(
            hidden, kernel, bias, targets, weights, smoothing, chunk_tokens
        )

    return loss


def objective(loss_fn, targets, weights, smoothing):
    """A scalar that weighs loss and nll differently, so both cotangents are checked."""

    def value(hidden, kernel, bias):
        sums = loss_fn(hidden, kernel, bias, targets, weights, smoothing)
        return sums["loss"] / sums["tokens"] + 0.37 * sums["nll"]

    return value


def assert_close_to_plain(hidden, kernel, bias, targets, weights, smoothing, chunk_tokens):
    want = plain(hidden, kernel, bias, targets, weights, smoothing)
    got = jax.jit(chunked(chunk_tokens), static_argnums=5)(
        hidden, kernel, bias, targets, weights, smoothing
    )
    for key in ("loss", "nll", "correct", "tokens"):
        np.testing.assert_allclose(got[key], want[key], rtol=RTOL, err_msg=key)
    argnums = (0, 1) if bias is None else (0, 1, 2)
    grads_want = jax.grad(objective(plain, targets, weights, smoothing), argnums)(
        hidden, kernel, bias
    )
    chunked_objective = objective(chunked(chunk_tokens), targets, weights, smoothing)
    grads_got = jax.jit(jax.grad(chunked_objective, argnums))(hidden, kernel, bias)
    for name, g, w in zip(("hidden", "kernel", "bias"), grads_got, grads_want, strict=False):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        scale = float(jnp.max(jnp.abs(w)))
        assert scale > 0, name
        assert float(jnp.max(jnp.abs(g - w))) <= RTOL * scale, name


@pytest.mark.parametrize(
    "rows, length, d_model, vocab, chunk_tokens, smoothing, bias",
    [
        (3, 11, 8, 37, 7, 0.1, True),  # 11 positions: chunks of 2, one position padded
        (4, 16, 8, 50, 16, 0.1, False),  # four chunks of four positions
        (2, 9, 16, 23, 1000, 0.0, True),  # one chunk
        (5, 7, 4, 19, 1, 0.0, False),  # a position a chunk
    ],
)
def test_chunked_loss_and_gradients_equal_the_plain_loss(
    rows, length, d_model, vocab, chunk_tokens, smoothing, bias
):
    hidden, kernel, b, targets, weights = problem(rows, length, d_model, vocab, bias=bias)
    assert_close_to_plain(hidden, kernel, b, targets, weights, smoothing, chunk_tokens)


@pytest.mark.slow
def test_chunked_loss_equals_the_plain_loss_at_a_translation_shape():
    """Base's model width and vocabulary (4 rows of 64 positions in 4 chunks), and logits
    as peaked as a trained model's (a scaled kernel: the reference token's probability near
    1 for most tokens, where the gradient is small differences of nearly equal numbers)."""
    hidden, kernel, b, targets, weights = problem(4, 64, 512, 32000, seed=1, scale=8.0)
    logits = np.einsum("rld,dv->rlv", hidden, kernel) + b
    targets = np.where(np.random.default_rng(2).random(targets.shape) < 0.7,
                       logits.argmax(-1), targets).astype(np.int32)  # fmt: skip
    assert_close_to_plain(hidden, kernel, b, targets, weights, 0.1, 64)


def test_a_tie_for_the_highest_logit_counts_as_correct():
    # kernel columns 1 and 2 are equal: the two tokens' logits tie, as in the plain loss.
    hidden = np.ones((1, 2, 2), np.float32)
    kernel = np.array([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]], np.float32)
    targets = np.array([[2, 0]], np.int32)
    weights = np.ones((1, 2), bool)
    sums = chunked(1)(hidden, kernel, None, targets, weights, 0.1)
    assert float(sums["correct"]) == 1.0


def test_padding_positions_change_neither_loss_nor_gradient():
    hidden, kernel, b, targets, weights = problem(3, 10, 8, 29, seed=3)
    changed = hidden.copy()
    changed[~weights] = 1e3 * np.random.default_rng(4).normal(size=changed[~weights].shape)
    loss = objective(chunked(8), targets, weights, 0.1)
    np.testing.assert_allclose(loss(changed, kernel, b), loss(hidden, kernel, b), rtol=RTOL)
    grads = jax.grad(loss, (0, 1, 2))
    for got, want in zip(grads(changed, kernel, b)[1:], grads(hidden, kernel, b)[1:], strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * float(np.abs(want).max()))
    assert not np.any(grads(changed, kernel, b)[0][~weights])


def test_bfloat16_products_stay_within_bfloat16_rounding_of_float32():
    hidden, kernel, b, targets, weights = problem(2, 12, 16, 40, seed=5)
    want = plain(hidden, kernel, b, targets, weights, 0.1)
    got = chunked_label_smoothed_cross_entropy(
        jnp.asarray(hidden, jnp.bfloat16), kernel, b, targets, weights, 0.1, 8, jnp.bfloat16
    )
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=2e-2)
    grad = jax.grad(
        lambda h, k: chunked_label_smoothed_cross_entropy(
            h, k, b, targets, weights, 0.1, 8, jnp.bfloat16
        )["loss"],
        (0, 1),
    )(jnp.asarray(hidden, jnp.bfloat16), kernel)
    assert grad[0].dtype == jnp.bfloat16 and grad[1].dtype == jnp.float32
    want_grad = jax.grad(lambda h, k: plain(h, k, b, targets, weights, 0.1)["loss"], (0, 1))(
        hidden, kernel
    )
    for g, w in zip(grad, want_grad, strict=True):
        error = float(jnp.max(jnp.abs(g.astype(jnp.float32) - w)))
        assert error <= 2e-2 * float(jnp.max(jnp.abs(w)))


@pytest.mark.parametrize(
    "rows, length, tokens, want",
    [
        (96, 256, 2048, (16, 16)),  # 21 positions wanted: 16 chunks of 16, no padding
        (12, 256, 2048, (128, 2)),
        (96, 256, 10**6, (256, 1)),
        (3, 11, 7, (2, 6)),  # 11 is prime: 6 chunks of 2, one position padded
        (500, 8, 10, (1, 8)),  # fewer tokens than rows: a position a chunk
    ],
)
def test_chunk_positions_cover_the_length_with_little_padding(rows, length, tokens, want):
    positions, chunks = chunk_positions(rows, length, tokens)
    assert (positions, chunks) == want
    assert 0 <= positions * chunks - length < chunks


def test_the_chunked_program_never_holds_the_whole_logits():
    """The compiled loss and gradient: all temporaries of the chunked program together are
    less than half a float32 copy of the batch's logits (8 chunks: a quarter on XLA:CPU);
    the plain program's hold more than a copy (two on XLA:CPU)."""
    hidden, kernel, _, targets, weights = problem(16, 64, 32, 4000, bias=False)
    logits_bytes = 16 * 64 * 4000 * 4

    def temporaries(loss_fn):
        value = objective(loss_fn, targets, weights, 0.1)
        compiled = jax.jit(jax.grad(value, (0, 1))).lower(hidden, kernel, None).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    assert temporaries(plain) > logits_bytes
    assert temporaries(chunked(128)) < logits_bytes / 2
