"""The translation task's loss with train.loss_chunk_tokens (the chunked loss, the
default) equals it with 0 (the model's whole logits, then the plain loss): the sums and
the gradient of every parameter, on packed and padded batches, tied and untied outputs,
Marian's final_logits_bias, with dropout on (the same masks either way).

Tolerance: each sum within 1e-5 of the plain one relative to it; each gradient leaf's
largest difference within 1e-5 of the leaf's largest magnitude.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.training.run_sections import TrainConfig

ROWS, SRC, TGT, VOCAB = 4, 10, 9, 41
RTOL = 1e-5


def packed_batch(seed: int = 0) -> dict[str, np.ndarray]:
    """Rows of two or three packed pairs and trailing padding."""
    rng = np.random.default_rng(seed)
    batch = {}
    for side, width in (("source", SRC), ("target", TGT)):
        segments = np.zeros((ROWS, width), np.int32)
        positions = np.zeros((ROWS, width), np.int32)
        for row in range(ROWS):
            start = 0
            for pair in range(1, 2 + row % 2 + 1):
                size = int(rng.integers(2, 4))
                segments[row, start : start + size] = pair
                positions[row, start : start + size] = np.arange(size)
                start += size
        ids = np.where(segments > 0, rng.integers(4, VOCAB, (ROWS, width)), 0).astype(np.int32)
        batch[f"{side}_segments"], batch[f"{side}_positions"] = segments, positions
        if side == "source":
            batch["source"] = ids
        else:
            batch["target_in"] = ids
            out = rng.integers(4, VOCAB, (ROWS, width))
            batch["target_out"] = np.where(segments > 0, out, 0).astype(np.int32)
    return batch


def task_with(chunk_tokens: int, **model) -> TranslationTask:
    config = ml_collections.ConfigDict(
        {
            "train": {"label_smoothing": 0.1, "loss_chunk_tokens": chunk_tokens},
            "data": {"max_source_length": SRC, "max_target_length": TGT},
        }
    )
    fields = dict(vocab_size=VOCAB, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1)
    return TranslationTask(
        config, TransformerConfig(**{**fields, "num_decoder_layers": 2, **model})
    )


def sums_and_grads(task: TranslationTask, params, batch, rng):
    def objective(params):
        sums = task.loss_sums(params, batch, rng, deterministic=rng is None)
        return sums["loss"] / sums["tokens"] + 0.5 * sums["nll"], sums

    return jax.jit(jax.grad(objective, has_aux=True))(params)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, packed, dropout",
    [
        ({"tie_output": True}, True, True),
        ({"tie_output": False}, True, False),
        ({"tie_output": True, "final_logits_bias": True}, False, False),
        ({"tie_output": True, "share_embeddings": False, "target_vocab_size": 29}, True, False),
    ],
)
def test_chunked_translation_loss_equals_the_whole_logits(model, packed, dropout):
    batch = packed_batch()
    if model.get("target_vocab_size"):
        batch["target_out"] = batch["target_out"] % model["target_vocab_size"]
        batch["target_in"] = batch["target_in"] % model["target_vocab_size"]
    if not packed:
        batch = {k: v for k, v in batch.items() if k in ("source", "target_in", "target_out")}
    chunked, whole = task_with(3 * ROWS, **model), task_with(0, **model)
    params = chunked.init_params(jax.random.key(0))
    params = nn.meta.unbox(params)
    if model.get("final_logits_bias"):
        params["final_logits_bias"] = jnp.linspace(-1.0, 1.0, VOCAB)
    rng = jax.random.key(1) if dropout else None
    grads_got, got = sums_and_grads(chunked, params, batch, rng)
    grads_want, want = sums_and_grads(whole, params, batch, rng)
    for key in ("loss", "nll", "correct", "tokens"):
        np.testing.assert_allclose(got[key], want[key], rtol=RTOL, err_msg=key)
    flat_want = jax.tree_util.tree_leaves_with_path(grads_want)
    flat_got = jax.tree.leaves(grads_got)
    assert len(flat_got) == len(flat_want)
    largest = max(float(jnp.max(jnp.abs(w))) for _, w in flat_want)
    for (path, w), g in zip(flat_want, flat_got, strict=True):
        scale = float(jnp.max(jnp.abs(w)))
        if jax.tree_util.keystr(path).endswith("['key']['bias']"):
            # Zero in exact arithmetic (softmax ignores a constant added to every score):
            # both are rounding noise, measured against the largest gradient.
            scale = largest
        assert float(jnp.max(jnp.abs(g - w))) <= RTOL * scale, path


def test_the_chunk_size_defaults_where_a_config_predates_it():
    assert TrainConfig.loss_chunk_tokens > 0
    default, older = task_with(TrainConfig.loss_chunk_tokens), task_with(0)
    del older.config.train["loss_chunk_tokens"]  # then the loss chunks as the default does
    batch = packed_batch(2)
    params = default.init_params(jax.random.key(0))
    chunked = jax.make_jaxpr(lambda p: default.loss_sums(p, batch, None, True))(params)
    unset = jax.make_jaxpr(lambda p: older.loss_sums(p, batch, None, True))(params)
    whole = jax.make_jaxpr(lambda p: task_with(0).loss_sums(p, batch, None, True))(params)
    assert str(unset) == str(chunked) != str(whole)


def test_output_projection_gives_the_logits_of_decode():
    """hidden @ kernel + bias from Transformer.decode(return_hidden) and
    output_projection() are decode's logits (the untied case; the tied one is above)."""
    model = Transformer(task_with(0, tie_output=False).model_config)
    batch = packed_batch(2)
    variables = model.init(jax.random.key(0), batch["source"], batch["target_in"])

    def both(m, source, target):
        return m(source, target), m(source, target, return_hidden=True), m.output_projection()

    logits, hidden, (kernel, bias) = model.apply(
        variables, batch["source"], batch["target_in"], method=both
    )
    assert hidden.shape == (ROWS, TGT, 16) and kernel.shape == (16, VOCAB)
    np.testing.assert_allclose(hidden @ kernel + bias, logits, rtol=1e-5, atol=1e-5)
