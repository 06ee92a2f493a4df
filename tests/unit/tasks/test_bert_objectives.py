"""BERT objectives against NumPy float64 references, and what they must ignore."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.models.bert.bert_model import BertConfig, BertForPretraining
from jaxtrans.tasks.bert.bert_objectives import (
    classification_loss,
    masked_lm_sums,
    pretraining_loss,
    pretraining_sums,
)

VOCAB = 17


def log_softmax64(logits) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def pretraining_batch(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    weights = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]], np.int32)
    return {
        "masked_ids": np.where(weights == 1, rng.integers(7, VOCAB, (3, 4)), 0).astype(np.int32),
        "masked_weights": weights,
        "masked_positions": np.array([[1, 2, 5, 0], [3, 0, 0, 0], [2, 6, 0, 0]], np.int32),
        "next_sentence_label": np.array([0, 1, 1], np.int32),
    }


def reference_pretraining(mlm_logits, nsp_logits, batch) -> dict:
    """Loss and accuracies in float64, looping over the real predictions."""
    mlm_lp, nsp_lp = log_softmax64(mlm_logits), log_softmax64(nsp_logits)
    losses, hits = [], []
    for b, p in zip(*np.nonzero(batch["masked_weights"]), strict=True):
        target = batch["masked_ids"][b, p]
        losses.append(-mlm_lp[b, p, target])
        hits.append(np.argmax(mlm_logits[b, p]) == target)
    labels = batch["next_sentence_label"]
    nsp_losses = -nsp_lp[np.arange(len(labels)), labels]
    nsp_hits = np.argmax(nsp_logits, axis=-1) == labels
    return {
        "loss": np.mean(losses) + np.mean(nsp_losses),
        "mlm_loss": np.mean(losses),
        "mlm_accuracy": np.mean(hits),
        "nsp_loss": np.mean(nsp_losses),
        "nsp_accuracy": np.mean(nsp_hits),
        "mlm_tokens": len(losses),
    }


@pytest.mark.slow
def test_pretraining_loss_equals_float64_reference():
    rng = np.random.default_rng(1)
    mlm_logits = rng.normal(size=(3, 4, VOCAB)).astype(np.float32) * 3
    nsp_logits = rng.normal(size=(3, 2)).astype(np.float32) * 3
    batch = pretraining_batch()
    loss, metrics = pretraining_loss(mlm_logits, nsp_logits, batch)
    expected = reference_pretraining(mlm_logits, nsp_logits, batch)
    assert float(loss) == float(metrics["loss"])
    for key, value in expected.items():
        np.testing.assert_allclose(float(metrics[key]), value, rtol=1e-6, atol=1e-6, err_msg=key)


@pytest.mark.slow
def test_mlm_loss_ignores_unmasked_prediction_slots():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(3, 4, VOCAB)).astype(np.float32)
    batch = pretraining_batch()
    padding = batch["masked_weights"] == 0
    perturbed_logits = np.where(padding[..., None], rng.normal(size=logits.shape) * 50, logits)
    perturbed_ids = np.where(padding, rng.integers(0, VOCAB, padding.shape), batch["masked_ids"])
    before = masked_lm_sums(logits, batch["masked_ids"], batch["masked_weights"])
    after = masked_lm_sums(perturbed_logits, perturbed_ids, batch["masked_weights"])
    for key in before:
        assert float(before[key]) == float(after[key]), key

    def mlm_loss(x):
        return masked_lm_sums(x, batch["masked_ids"], batch["masked_weights"])["mlm_loss"]

    grad = jax.grad(mlm_loss)(jnp.asarray(logits))
    assert np.all(np.asarray(grad)[padding] == 0) and np.any(np.asarray(grad)[~padding] != 0)


@pytest.mark.slow
def test_model_loss_depends_only_on_the_masked_positions():
    cfg = BertConfig(vocab_size=VOCAB, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8)
    model = BertForPretraining(cfg)
    batch = pretraining_batch()
    ids = np.random.default_rng(3).integers(7, VOCAB, (3, 8)).astype(np.int32)
    params = model.init(jax.random.key(0), ids)["params"]
    mlm, nsp = model.apply({"params": params}, ids, masked_positions=batch["masked_positions"])
    full, _ = model.apply({"params": params}, ids)  # logits at every position
    loss, metrics = pretraining_loss(mlm, nsp, batch)
    # The reference reads the full logits at the masked positions only.
    gathered = np.stack([np.asarray(full)[b, batch["masked_positions"][b]] for b in range(3)])
    expected = reference_pretraining(gathered, np.asarray(nsp), batch)
    np.testing.assert_allclose(float(metrics["mlm_loss"]), expected["mlm_loss"], rtol=1e-5)
    np.testing.assert_allclose(float(loss), expected["loss"], rtol=1e-5)


def test_batch_without_masked_tokens_has_finite_loss():
    batch = pretraining_batch()
    batch["masked_weights"] = np.zeros_like(batch["masked_weights"])
    loss, metrics = pretraining_loss(np.zeros((3, 4, VOCAB)), np.zeros((3, 2)), batch)
    assert float(metrics["mlm_loss"]) == 0.0 and float(metrics["mlm_tokens"]) == 0.0
    np.testing.assert_allclose(float(loss), np.log(2), rtol=1e-6)


@pytest.mark.slow
def test_classification_loss_equals_reference_and_ignores_padding_rows():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(5, 3)).astype(np.float32) * 2
    batch = {"label": np.array([0, 2, 1, 1, 0], np.int32), "weight": np.array([1, 1, 1, 0, 0])}
    loss, metrics = classification_loss(logits, batch)
    lp = log_softmax64(logits)[:3]
    expected_loss = -np.mean(lp[np.arange(3), batch["label"][:3]])
    expected_accuracy = np.mean(np.argmax(logits[:3], -1) == batch["label"][:3])
    np.testing.assert_allclose(float(loss), expected_loss, rtol=1e-6)
    np.testing.assert_allclose(float(metrics["accuracy"]), expected_accuracy)
    assert float(metrics["examples"]) == 3.0
    perturbed = logits.copy()
    perturbed[3:] = 100 * rng.normal(size=(2, 3))
    assert float(classification_loss(perturbed, batch)[0]) == float(loss)
    # Without weights every row counts.
    unweighted, _ = classification_loss(logits, {"label": batch["label"]})
    all_rows = -np.mean(log_softmax64(logits)[np.arange(5), batch["label"]])
    np.testing.assert_allclose(float(unweighted), all_rows, rtol=1e-6)


def test_pretraining_sums_count_nothing_for_rows_of_zeros_that_pad_an_evaluation_batch():
    """The loop pads a dev batch with rows of zeros so that its rows split over the
    devices (training/step_layout.place_eval_batch): whatever their logits, they add no
    masked token and no next-sentence example."""
    batch = pretraining_batch()
    batch["attention_mask"] = np.ones((3, 8), np.int32)
    rng = np.random.default_rng(1)
    mlm_logits = rng.normal(size=(3, 4, VOCAB)).astype(np.float32)
    nsp_logits = rng.normal(size=(3, 2)).astype(np.float32)
    padded = {
        k: np.concatenate([v, np.zeros((2, *v.shape[1:]), v.dtype)]) for k, v in batch.items()
    }
    more_mlm = np.concatenate([mlm_logits, rng.normal(size=(2, 4, VOCAB)).astype(np.float32)])
    more_nsp = np.concatenate([nsp_logits, rng.normal(size=(2, 2)).astype(np.float32)])

    want = pretraining_sums(mlm_logits, nsp_logits, batch)
    got = pretraining_sums(more_mlm, more_nsp, padded)

    assert float(got["nsp_examples"]) == 3.0 and float(got["mlm_tokens"]) == 6.0
    for key, value in want.items():
        np.testing.assert_allclose(float(got[key]), float(value), rtol=1e-6, err_msg=key)
