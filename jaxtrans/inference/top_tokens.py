"""Each row's n most probable tokens and their log-probabilities, without writing the
log-probabilities of the whole vocabulary.

    logits [rows, vocab] -> (log_softmax values [rows, n], tokens [rows, n]), best first

Beam search needs, at every step, the few best tokens of each hypothesis. The plain way,
log_softmax over [rows, vocab] then a top-k, reads the vocabulary several times and
writes it twice (8-10 ms a step at 64 rows of 32k tokens on one core; about 4 here). Here
the vocabulary is read in blocks of BLOCK tokens: the logits' block maxima (one pass,
which also gives the row's maximum), the row's log-sum-exp (a second pass), then only
the n blocks with the largest maxima are looked at again. That is
exact: log_softmax is ``(x - max) - logsumexp``, which never decreases as x grows, so a
block's largest log-probability is that of its largest logit, and the n best tokens lie
in the n blocks whose largest log-probabilities are largest (ties included: top_k takes
the lower index first among equals, blocks and tokens alike, and the blocks are read
back in token order).
"""

import jax
import jax.numpy as jnp

# Tokens a block: the block maxima are a 1/BLOCK-sized array, the blocks read back n * BLOCK
# tokens a row.
BLOCK = 128


def top_k(x: jnp.ndarray, k: int) -> tuple[jnp.ndarray, jnp.ndarray]:
    """``jax.lax.top_k`` behind an optimization barrier.

    XLA's CPU compiler turns a top-k into its fast kernel only while the results are used
    whole; slicing them further (as beam search does) makes it a full sort of the row,
    about 100x slower over a 32k-candidate row. The barrier keeps the results whole.
    """
    return jax.lax.optimization_barrier(jax.lax.top_k(x, k))


def log_softmax_top_k(
    logits: jnp.ndarray, n: int, ranked: jnp.ndarray | None = None
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The n largest log_softmax(logits) of each row, best first (the lower token first
    among equals), and their tokens.

    logits [rows, vocab] float32 (-inf for tokens never allowed), n <= vocab. ranked
    [rows, vocab]: the logits to choose among, if not all of them (-inf for the excluded;
    a forced prefix): the log-probabilities stay those of the whole ``logits``. Returns
    values [rows, n] float32 and tokens [rows, n] int32.
    """
    rows, vocab = logits.shape
    blocks = -(-vocab // BLOCK)

    def block_maxima(x):  # [rows, blocks]; reduce_window pads the last block, never x
        return jax.lax.reduce_window(
            x, -jnp.inf, jax.lax.max, (1, BLOCK), (1, BLOCK), ((0, 0), (0, blocks * BLOCK - vocab))
        )

    block_max = block_maxima(logits)
    top = jnp.max(block_max, axis=-1, keepdims=True)
    logsumexp = jnp.log(jnp.sum(jnp.exp(logits - top), axis=-1, keepdims=True))

    def log_probs(x):  # jax.nn.log_softmax's formula, on any part of the rows
        return (x - top) - logsumexp

    if ranked is not None:
        block_max = block_maxima(ranked)
    else:
        ranked = logits
    _, chosen = top_k(log_probs(block_max), min(n, blocks))
    chosen = jnp.sort(chosen, axis=-1)  # in token order, so ties go to the lower token
    tokens = (chosen[:, :, None] * BLOCK + jnp.arange(BLOCK)).reshape(rows, -1)
    candidates = jnp.take_along_axis(ranked, jnp.minimum(tokens, vocab - 1), axis=1)
    candidates = jnp.where(tokens < vocab, candidates, -jnp.inf)  # the last block's padding
    values, where = top_k(log_probs(candidates), n)
    return values, jnp.take_along_axis(tokens, where, axis=1).astype(jnp.int32)
