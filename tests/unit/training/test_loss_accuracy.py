"""The accuracy count of label_smoothed_cross_entropy: reference token = highest logit."""

import numpy as np

from jaxtrans.training.loss import label_smoothed_cross_entropy


def test_correct_counts_weighted_targets_whose_logit_is_the_highest():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 9, 13)).astype(np.float32)
    targets = rng.integers(0, 13, size=(4, 9))
    targets[:, :3] = np.argmax(logits[:, :3], axis=-1)  # some hits for sure
    weights = (rng.random((4, 9)) > 0.25).astype(np.float32)
    sums = label_smoothed_cross_entropy(logits, targets, weights, 0.1)
    expected = np.sum((np.argmax(logits, axis=-1) == targets) * weights)
    assert float(sums["correct"]) == expected


def test_a_reference_token_tied_with_the_highest_logit_counts_as_correct():
    logits = np.array([[[2.0, 5.0, 5.0, 1.0]]], np.float32)
    sums = label_smoothed_cross_entropy(logits, np.array([[2]]), np.ones((1, 1)), 0.1)
    assert float(sums["correct"]) == 1.0
