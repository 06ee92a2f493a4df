"""Label-smoothed cross entropy from the decoder's states, a chunk of positions at a time.

The plain loss (loss.py) reads logits [rows, length, vocab] in float32 that the model has
already made: at base's batch (96 x 256 tokens, 32k vocabulary) 3.1 GB, written by the
projection, read by the log-softmax, kept for the backward pass and read and written again
by the gradient. Here the projection is part of the loss:

    hidden [rows, length, d_model], kernel [d_model, vocab], bias [vocab] or None
    -> the same sums as label_smoothed_cross_entropy(hidden @ kernel + bias, ...)

computed over chunks of target positions (all rows of a few positions at once), so that
only one chunk's logits [rows, positions, vocab] exist at a time. The forward pass keeps
one float32 per token (the log-sum-exp); the backward pass (its own ``jax.custom_vjp``)
makes each chunk's logits again and adds its part of d_kernel and d_bias, and writes its
d_hidden. Chunks cut the length axis, never the rows: the rows stay split over the data
axes of the mesh as the batch is, and the vocabulary may be split over ``tensor`` (the
target logit is a masked sum over the vocabulary, not a gather, so a split vocabulary is
reduced, not gathered).

Arithmetic: the products in ``compute_dtype`` with float32 results
(jaxtrans.nn.products.float32_product), the bias added and the log-softmax taken in float32. In
float32 that is the plain path's arithmetic (which projects in the compute dtype and then
casts to float32); in bfloat16 the plain path rounds its logits to bfloat16 first, so the
two agree to bfloat16's rounding, not exactly. d_kernel and d_bias are accumulated over the
chunks in float32.

BERT's masked LM keeps its plain loss: it projects only the masked positions to the
vocabulary (BertForPretraining's ``masked_positions``, data.max_predictions_per_seq of them
a row: 20 of 128 positions at the defaults), not every position.
"""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrans.nn.products import float32_product

# The logical axes of a chunk's logits (jaxtrans.training.sharding's rules: rows over the
# data axes, the vocabulary over tensor); outside a mesh and its rules, no constraint.
LOGITS_AXES = ("batch", "length", "vocab")


def chunk_positions(rows: int, length: int, tokens: int) -> tuple[int, int]:
    """(positions per chunk, chunks) for ``rows`` rows of ``length`` positions and chunks
    of at most ``tokens`` tokens (rows x positions; at least a position): a divisor of the
    length where up to a quarter more chunks give one (no padding), else the length padded
    by fewer positions than there are chunks."""
    wanted = max(1, min(length, tokens // max(rows, 1)))
    fewest = math.ceil(length / wanted)
    for chunks in range(fewest, fewest + fewest // 4 + 1):
        if length % chunks == 0:
            return length // chunks, chunks
    return math.ceil(length / fewest), fewest


def batch_shards() -> int:
    """Into how many parts the traced program splits a batch's rows: the product of the
    mesh axes that the logical axis "batch" maps to under the current mesh and rules
    (jaxtrans.training.sharding.axis_rules); 1 outside a mesh."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return 1
    spec = nn.logical_to_mesh_axes(("batch",))
    axes = spec[0] if spec else None
    if axes is None:
        return 1
    axes = (axes,) if isinstance(axes, str) else axes
    return math.prod(mesh.shape[axis] for axis in axes if axis in mesh.shape)


def chunked_label_smoothed_cross_entropy(
    hidden: jnp.ndarray,
    kernel: jnp.ndarray,
    bias: jnp.ndarray | None,
    targets: jnp.ndarray,
    weights: jnp.ndarray,
    smoothing: float,
    chunk_tokens: int,
    compute_dtype=jnp.float32,
) -> dict[str, jnp.ndarray]:
    """Sums ``loss``, ``nll``, ``correct`` and ``tokens`` as label_smoothed_cross_entropy
    gives them for logits = hidden @ kernel (+ bias), without those logits.

    hidden [rows, length, d_model]; kernel [d_model, vocab]; bias [vocab] or None;
    targets [rows, length] ints; weights [rows, length] (0 for padding); ``chunk_tokens``:
    tokens of one chunk on one device (the rows of the chunk are the rows one device holds,
    batch_shards()); ``compute_dtype``: the dtype of the products.
    """
    rows, length, _ = hidden.shape
    local_rows = max(1, rows // batch_shards())
    positions, chunks = chunk_positions(local_rows, length, int(chunk_tokens))
    padded = positions * chunks - length
    weights = weights.astype(jnp.float32)
    if padded:  # padded positions weigh nothing: no loss, no gradient
        widths = ((0, 0), (0, padded))
        hidden = jnp.pad(hidden, (*widths, (0, 0)))
        targets = jnp.pad(targets, widths)
        weights = jnp.pad(weights, widths)
    sums, _ = _chunked_sums(
        hidden,
        kernel,
        bias,
        targets,
        weights,
        float(smoothing),
        positions,
        jnp.dtype(compute_dtype),
    )
    return sums


def _chunk(x: jnp.ndarray, index, positions: int) -> jnp.ndarray:
    """Positions [index * positions, (index + 1) * positions) of every row of x [rows, L, ...]."""
    return jax.lax.dynamic_slice_in_dim(x, index * positions, positions, axis=1)


def _logits(h: jnp.ndarray, kernel: jnp.ndarray, bias: jnp.ndarray | None, dtype) -> jnp.ndarray:
    """h [rows, p, d_model] -> float32 logits [rows, p, vocab]: products in ``dtype``; the
    rows laid out as the batch and the vocabulary as the kernel's (LOGITS_AXES)."""
    logits = float32_product(h, kernel, (((2,), (0,)), ((), ())), dtype)
    if bias is not None:
        logits = logits + bias.astype(jnp.float32)
    return nn.with_logical_constraint(logits, LOGITS_AXES)


def _target_mask(logits: jnp.ndarray, targets: jnp.ndarray) -> jnp.ndarray:
    """[rows, p, vocab] True at each position's target id (a comparison, no gather)."""
    vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 2)
    return vocab == targets[..., None]


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _chunked_sums(hidden, kernel, bias, targets, weights, smoothing, positions, dtype):
    """(sums, log-sum-exp [chunks, rows, positions]) over chunks of ``positions``."""
    return _forward(hidden, kernel, bias, targets, weights, smoothing, positions, dtype)


def _forward(hidden, kernel, bias, targets, weights, smoothing, positions, dtype):
    chunks = hidden.shape[1] // positions
    kernel = kernel.astype(dtype)  # once, not once a chunk

    def body(totals, index):
        logits = _logits(_chunk(hidden, index, positions), kernel, bias, dtype)
        t, w = _chunk(targets, index, positions), _chunk(weights, index, positions)
        top = jnp.max(logits, axis=-1)
        log_z = top + jnp.log(jnp.sum(jnp.exp(logits - top[..., None]), axis=-1))
        target_logit = jnp.sum(jnp.where(_target_mask(logits, t), logits, 0.0), axis=-1)
        nll = log_z - target_logit
        uniform = log_z - jnp.mean(logits, axis=-1)
        loss = (1.0 - smoothing) * nll + smoothing * uniform
        correct = (target_logit >= top).astype(jnp.float32)  # a tie counts as correct
        parts = {"loss": loss, "nll": nll, "correct": correct, "tokens": jnp.ones_like(w)}
        totals = {k: totals[k] + jnp.sum(v * w) for k, v in parts.items()}
        return totals, log_z

    zeros = {k: jnp.zeros((), jnp.float32) for k in ("loss", "nll", "correct", "tokens")}
    return jax.lax.scan(body, zeros, jnp.arange(chunks))


def _forward_with_residuals(hidden, kernel, bias, targets, weights, smoothing, positions, dtype):
    sums, log_z = _forward(hidden, kernel, bias, targets, weights, smoothing, positions, dtype)
    return (sums, log_z), (hidden, kernel, bias, targets, weights, log_z)


def _backward(smoothing, positions, dtype, residuals, cotangents):
    """d_hidden, d_kernel, d_bias from the sums' cotangents (``correct`` and ``tokens`` are
    counts: no gradient). Per token, d loss / d logits = p - (1 - s) onehot - s / vocab and
    d nll / d logits = p - onehot, p = exp(logits - log_z)."""
    hidden, kernel, bias, targets, weights, log_z = residuals
    g_loss, g_nll = cotangents[0]["loss"], cotangents[0]["nll"]
    vocab = kernel.shape[1]
    kernel_c = kernel.astype(dtype)

    def body(carry, index):
        d_hidden, d_kernel, d_bias = carry
        h = _chunk(hidden, index, positions)
        logits = _logits(h, kernel_c, bias, dtype)
        t, w = _chunk(targets, index, positions), _chunk(weights, index, positions)
        p = jnp.exp(logits - log_z[index][..., None])
        on_target = (g_loss * (1.0 - smoothing) + g_nll) * _target_mask(logits, t)
        d_logits = (g_loss + g_nll) * p - on_target - g_loss * smoothing / vocab
        d_logits = d_logits * w[..., None]
        if d_bias is not None:
            d_bias = d_bias + jnp.sum(d_logits, axis=(0, 1))
        d_logits = d_logits.astype(dtype)
        d_h = float32_product(d_logits, kernel_c, (((2,), (1,)), ((), ())), dtype)
        d_hidden = jax.lax.dynamic_update_slice_in_dim(
            d_hidden, d_h.astype(d_hidden.dtype), index * positions, axis=1
        )
        d_kernel = d_kernel + float32_product(h, d_logits, (((0, 1), (0, 1)), ((), ())), dtype)
        return (d_hidden, d_kernel, d_bias), None

    start = (
        jnp.zeros_like(hidden),
        jnp.zeros(kernel.shape, jnp.float32),
        None if bias is None else jnp.zeros(bias.shape, jnp.float32),
    )
    (d_hidden, d_kernel, d_bias), _ = jax.lax.scan(body, start, jnp.arange(log_z.shape[0]))
    d_kernel = d_kernel.astype(kernel.dtype)
    d_bias = None if bias is None else d_bias.astype(bias.dtype)
    return d_hidden, d_kernel, d_bias, None, None


_chunked_sums.defvjp(_forward_with_residuals, _backward)
