"""Schedule, loss, and the train step's arithmetic."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import torch

from jaxtrans.models import TransformerConfig
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.training import sharding
from jaxtrans.training.loss import label_smoothed_cross_entropy
from jaxtrans.training.optimizer import make_optimizer, noam_schedule
from jaxtrans.training.state import init_train_state
from jaxtrans.training.step import make_train_step


def test_noam_schedule_equals_the_paper_formula():
    schedule = noam_schedule(factor=2.0, d_model=512, warmup=4000)
    for step in (1, 10, 1000, 3999, 4000, 4001, 20_000, 100_000):
        expected = 2.0 * 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        # optax counts updates from 0; the paper's step n is update n - 1.
        np.testing.assert_allclose(float(schedule(step - 1)), expected, rtol=1e-6)


def test_noam_peaks_at_the_end_of_warmup():
    schedule = noam_schedule(1.0, 512, 4000)
    rates = [float(schedule(s)) for s in range(0, 8000, 10)]
    assert abs(int(np.argmax(rates)) * 10 - 3999) <= 10


def numpy_label_smoothing(logits, targets, weights, eps):
    logits = logits.astype(np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    vocab = logits.shape[-1]
    q = np.full(logits.shape, eps / vocab)
    np.put_along_axis(q, targets[..., None], 1 - eps + eps / vocab, axis=-1)
    loss = -(q * logp).sum(-1)
    nll = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
    return (loss * weights).sum(), (nll * weights).sum()


@pytest.mark.slow
def test_label_smoothed_cross_entropy_equals_numpy_and_torch():
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=3.0, size=(3, 5, 11)).astype(np.float32)
    targets = rng.integers(0, 11, size=(3, 5))
    weights = (rng.random((3, 5)) > 0.3).astype(np.float32)
    sums = label_smoothed_cross_entropy(jnp.asarray(logits), jnp.asarray(targets), weights, 0.1)
    loss, nll = numpy_label_smoothing(logits, targets, weights, 0.1)
    np.testing.assert_allclose(float(sums["loss"]), loss, rtol=1e-5)
    np.testing.assert_allclose(float(sums["nll"]), nll, rtol=1e-5)
    assert float(sums["tokens"]) == weights.sum()
    keep = weights.reshape(-1) > 0
    reference = torch.nn.CrossEntropyLoss(label_smoothing=0.1, reduction="sum")(
        torch.tensor(logits.reshape(-1, 11)[keep]), torch.tensor(targets.reshape(-1)[keep])
    )
    np.testing.assert_allclose(float(sums["loss"]), float(reference), rtol=1e-5)


def test_loss_ignores_padding_targets():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 6, 7)).astype(np.float32)
    targets = rng.integers(1, 7, size=(2, 6))
    weights = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], np.float32)
    base = label_smoothed_cross_entropy(logits, targets, weights, 0.1)
    logits2, targets2 = logits.copy(), targets.copy()
    logits2[weights == 0] = rng.normal(scale=10, size=logits2[weights == 0].shape)
    targets2[weights == 0] = 0
    changed = label_smoothed_cross_entropy(logits2, targets2, weights, 0.1)
    for key in base:
        assert float(base[key]) == float(changed[key])


VOCAB = 40


def tiny_setup(accum=1, dropout=0.0, lr=3e-3, eps=1e-9):
    task = TranslationTask(
        ml_collections.ConfigDict(
            {"train": {"label_smoothing": 0.1},
             "data": {"max_source_length": 8, "max_target_length": 8}}
        ),
        TransformerConfig(
            vocab_size=VOCAB, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=1,
            num_decoder_layers=1, dropout_rate=dropout, attention_dropout_rate=dropout,
            activation_dropout_rate=dropout,
        ),
    )  # fmt: skip
    config = ml_collections.ConfigDict(
        dict(
            name="adam", b1=0.9, b2=0.98, eps=eps, weight_decay=0.0, schedule="constant",
            noam_factor=1.0, learning_rate=lr, warmup_steps=0, clip_norm=1.0,
        )
    )  # fmt: skip
    optimizer, schedule = make_optimizer(config, 32, 100)
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=1, fsdp=1, tensor=1)))
    state, _, _ = init_train_state(task.init_params, optimizer, mesh, jax.random.key(0))
    step = jax.jit(make_train_step(task, optimizer, schedule, accum))
    return state, step


def random_batch(rows=8, seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, VOCAB, size=(rows, 8)).astype(np.int32)
    target = rng.integers(4, VOCAB, size=(rows, 8)).astype(np.int32)
    source[:, 6:] = 0
    target[rows // 2 :, 5:] = 0
    target_in = np.concatenate([np.full((rows, 1), 2, np.int32), target[:, :-1]], axis=1)
    target_in[target == 0] = 0
    return {"source": source, "target_in": target_in, "target_out": target}


@pytest.mark.slow
def test_tiny_model_overfits_a_small_batch():
    state, step = tiny_setup(lr=1e-2)
    batch = random_batch()
    losses = []
    for _ in range(150):
        state, metrics = step(state, batch, state.dropout_key())
        losses.append(float(metrics["nll"]))
    assert losses[0] > 3.0
    # Label smoothing 0.1 caps the reference token's probability at 0.9 + 0.1 / vocab.
    floor = -np.log(0.9 + 0.1 / VOCAB)
    assert losses[-1] < floor + 0.02
    assert float(metrics["accuracy"]) == 1.0


@pytest.mark.slow
def test_gradient_accumulation_gives_the_same_update_as_the_whole_batch():
    batch = random_batch(rows=8)
    # Gradients that are zero in exact arithmetic (attention key biases) are rounding noise
    # that Adam divides by its own size; eps = 1e-6 keeps that from swamping the comparison.
    state, step = tiny_setup(accum=1, eps=1e-6)
    state_accum, step_accum = tiny_setup(accum=4, eps=1e-6)
    new, metrics = step(state, batch, state.dropout_key())
    new_accum, metrics_accum = step_accum(state_accum, batch, state_accum.dropout_key())
    for key in ("loss", "nll", "accuracy", "tokens", "grad_norm"):
        np.testing.assert_allclose(float(metrics[key]), float(metrics_accum[key]), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(new_accum.params), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_gradients_are_clipped_to_global_norm_before_adam():
    config = ml_collections.ConfigDict(
        dict(
            name="adam", b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.0, schedule="constant",
            noam_factor=1.0, learning_rate=1.0, warmup_steps=0, clip_norm=1.0,
        )
    )  # fmt: skip
    optimizer, _ = make_optimizer(config, 8, 10)
    params = {"w": jnp.zeros(3)}
    # Adam's first step is scale-free, so clipping shows on the second: a large first
    # gradient (norm 10, clipped to 1) against a small second one (norm 0.5, kept).
    g1, g2 = {"w": jnp.array([6.0, 8.0, 0.0])}, {"w": jnp.array([0.0, 0.3, 0.4])}
    state = optimizer.init(params)
    _, state = optimizer.update(g1, state, params)
    update, _ = optimizer.update(g2, state, params)
    b1, b2 = 0.9, 0.98
    m = b1 * (1 - b1) * np.array([0.6, 0.8, 0.0]) + (1 - b1) * np.array([0.0, 0.3, 0.4])
    v = b2 * (1 - b2) * np.array([0.36, 0.64, 0.0]) + (1 - b2) * np.array([0.0, 0.09, 0.16])
    expected = -(m / (1 - b1**2)) / (np.sqrt(v / (1 - b2**2)) + 1e-9)
    np.testing.assert_allclose(np.asarray(update["w"]), expected, rtol=1e-5)


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_weight_decay_applies_only_to_matrices_in_adamw(name):
    config = ml_collections.ConfigDict(
        dict(
            name=name, b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.1, schedule="constant",
            noam_factor=1.0, learning_rate=1.0, warmup_steps=0, clip_norm=0.0,
        )
    )  # fmt: skip
    optimizer, _ = make_optimizer(config, 8, 10)
    params = {"kernel": jnp.ones((2, 2)), "bias": jnp.ones((2,))}
    zero_grads = jax.tree.map(jnp.zeros_like, params)
    updates, _ = optimizer.update(zero_grads, optimizer.init(params), params)
    # With zero gradients only decoupled weight decay moves a parameter.
    expected_kernel = -0.1 if name == "adamw" else 0.0
    np.testing.assert_allclose(np.asarray(updates["kernel"]), expected_kernel, atol=1e-7)
    np.testing.assert_allclose(np.asarray(updates["bias"]), 0.0, atol=1e-7)
