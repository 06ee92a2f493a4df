"""BERT's training objectives as pure functions of logits and a batch.

Pretraining: masked-LM cross entropy over the masked positions only (weighted by
``masked_weights``, so the padding rows of ``masked_positions`` count for nothing), plus
next-sentence cross entropy; the loss is the sum of the two means, as in BERT.
Fine-tuning: cross entropy over the classes, weighted by ``weight`` (0 for rows that pad
an evaluation batch).

The ``*_sums`` functions return sums and counts, so that micro-batches and evaluation
batches can be added up before dividing; the ``*_loss`` functions divide and return
``(loss, metrics)`` for a train step.
"""

import jax.numpy as jnp
import optax

Batch = dict[str, jnp.ndarray]


def _weighted_sums(
    logits: jnp.ndarray, labels: jnp.ndarray, weights: jnp.ndarray
) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """(sum of weighted cross entropy, sum of weighted correct argmax, sum of weights)."""
    logits = logits.astype(jnp.float32)
    weights = weights.astype(jnp.float32)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return jnp.sum(loss * weights), jnp.sum(correct * weights), jnp.sum(weights)


def masked_lm_sums(
    logits: jnp.ndarray, masked_ids: jnp.ndarray, masked_weights: jnp.ndarray
) -> dict[str, jnp.ndarray]:
    """logits [batch, predictions, vocab] at the masked positions, masked_ids and
    masked_weights [batch, predictions] -> mlm_loss, mlm_correct, mlm_tokens (sums)."""
    loss, correct, tokens = _weighted_sums(logits, masked_ids, masked_weights)
    return {"mlm_loss": loss, "mlm_correct": correct, "mlm_tokens": tokens}


def next_sentence_sums(
    logits: jnp.ndarray, labels: jnp.ndarray, weights: jnp.ndarray | None = None
) -> dict[str, jnp.ndarray]:
    """logits [batch, 2], labels [batch] (0 = B follows A), weights [batch] (None: every
    row counts) -> nsp_loss, nsp_correct, nsp_examples (sums)."""
    weights = jnp.ones(labels.shape) if weights is None else weights
    loss, correct, count = _weighted_sums(logits, labels, weights)
    return {"nsp_loss": loss, "nsp_correct": correct, "nsp_examples": count}


def example_rows(batch: Batch) -> jnp.ndarray | None:
    """1 for each row that holds an example, else 0: every example starts with an attended
    [CLS], a row of zeros (that pads an evaluation batch to split over the devices) has
    none; None for a batch without attention_mask (every row counts)."""
    mask = batch.get("attention_mask")
    return None if mask is None else mask[:, 0]


def pretraining_sums(
    mlm_logits: jnp.ndarray, nsp_logits: jnp.ndarray, batch: Batch
) -> dict[str, jnp.ndarray]:
    """Both objectives' sums for one pretraining batch (data/bert/pretraining_examples.py)."""
    return {
        **masked_lm_sums(mlm_logits, batch["masked_ids"], batch["masked_weights"]),
        **next_sentence_sums(nsp_logits, batch["next_sentence_label"], example_rows(batch)),
    }


def summarize_pretraining(sums: dict[str, jnp.ndarray]) -> dict[str, jnp.ndarray]:
    """Means from pretraining sums: loss = mean MLM loss + mean NSP loss."""
    tokens = jnp.maximum(sums["mlm_tokens"], 1.0)
    examples = jnp.maximum(sums["nsp_examples"], 1.0)
    mlm_loss = sums["mlm_loss"] / tokens
    nsp_loss = sums["nsp_loss"] / examples
    return {
        "loss": mlm_loss + nsp_loss,
        "mlm_loss": mlm_loss,
        "mlm_accuracy": sums["mlm_correct"] / tokens,
        "nsp_loss": nsp_loss,
        "nsp_accuracy": sums["nsp_correct"] / examples,
        "mlm_tokens": sums["mlm_tokens"],
    }


def pretraining_loss(
    mlm_logits: jnp.ndarray, nsp_logits: jnp.ndarray, batch: Batch
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """(loss, metrics) of one pretraining batch.

    mlm_logits [batch, max_predictions, vocab]: the model's logits at
    ``batch["masked_positions"]``; nsp_logits [batch, 2].
    """
    metrics = summarize_pretraining(pretraining_sums(mlm_logits, nsp_logits, batch))
    return metrics["loss"], metrics


def classification_sums(logits: jnp.ndarray, batch: Batch) -> dict[str, jnp.ndarray]:
    """logits [batch, num_labels]; batch["label"], optional batch["weight"] [batch]
    -> loss, correct, examples (sums)."""
    weights = batch.get("weight", jnp.ones(batch["label"].shape))
    loss, correct, count = _weighted_sums(logits, batch["label"], weights)
    return {"loss": loss, "correct": correct, "examples": count}


def classification_loss(logits: jnp.ndarray, batch: Batch) -> tuple[jnp.ndarray, dict]:
    """(mean cross entropy, {loss, accuracy, examples}) of one classification batch."""
    sums = classification_sums(logits, batch)
    examples = jnp.maximum(sums["examples"], 1.0)
    loss = sums["loss"] / examples
    return loss, {
        "loss": loss,
        "accuracy": sums["correct"] / examples,
        "examples": sums["examples"],
    }
