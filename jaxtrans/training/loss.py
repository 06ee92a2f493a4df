"""Label-smoothed cross entropy over non-padding targets."""

import jax
import jax.numpy as jnp


def smoothed_target_distribution(
    targets: jnp.ndarray, vocab_size: int, smoothing: float
) -> jnp.ndarray:
    """The target distribution the loss below compares the model with, written out:
    targets [...] ints -> [..., vocab_size] float32, 1 - smoothing + smoothing / vocab on
    the reference token and smoothing / vocab on every other one (the pad id included;
    padding target positions are left out of the loss by their weight, not here).

    The loss never builds it: its cross entropy with log_softmax(logits) is the loss."""
    one_hot = jax.nn.one_hot(targets, vocab_size, dtype=jnp.float32)
    return (1.0 - smoothing) * one_hot + smoothing / vocab_size


def label_smoothed_cross_entropy(
    logits: jnp.ndarray, targets: jnp.ndarray, weights: jnp.ndarray, smoothing: float
) -> dict[str, jnp.ndarray]:
    """Sums over the weighted tokens of one batch.

    logits [batch, length, vocab] (float32), targets [batch, length] ints, weights
    [batch, length] (1 for real targets, 0 for padding). The smoothed target puts
    1 - smoothing + smoothing / vocab on the reference token and smoothing / vocab on every
    other token (torch's ``CrossEntropyLoss(label_smoothing=...)``), which reduces to

        loss = (1 - smoothing) * nll + smoothing * mean_v(-log p_v)

    computed from one log-sum-exp, without materialising one-hot targets.

    Returns sums (not means) so that micro-batches and devices can be added up before
    dividing by the token count: ``loss``, ``nll``, ``correct`` and ``tokens``.
    """
    logits = logits.astype(jnp.float32)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    nll = log_z - target_logit
    uniform = log_z - jnp.mean(logits, axis=-1)
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    # Correct: the reference token has the highest logit (a tie counts as correct). The
    # max is shared with the log-sum-exp; argmax would be one more pass over the logits.
    correct = (target_logit >= jnp.max(logits, axis=-1)).astype(jnp.float32)
    weights = weights.astype(jnp.float32)
    return {
        "loss": jnp.sum(loss * weights),
        "nll": jnp.sum(nll * weights),
        "correct": jnp.sum(correct * weights),
        "tokens": jnp.sum(weights),
    }
