"""The translation task's loss: label-smoothed cross entropy of the teacher-forced
Transformer over the non-padding targets of a (packed) batch.

``train.loss_chunk_tokens`` > 0 (the default): the decoder's last states and the output
projection go to jaxtrans.training.chunked_loss, which never holds the logits of the whole
batch; 0: the model's float32 logits [rows, length, vocab] go to the plain loss
(jaxtrans.training.loss), the reference the chunked one is tested against. Both give the
same sums to float rounding.
"""

import jax
import jax.numpy as jnp
import ml_collections

from jaxtrans.config_sections import section_values
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.training.chunked_loss import chunked_label_smoothed_cross_entropy
from jaxtrans.training.loss import label_smoothed_cross_entropy
from jaxtrans.training.run_sections import TrainConfig


def _hidden_and_projection(model: Transformer, *args, **kwargs):
    return model(*args, **kwargs, return_hidden=True), model.output_projection()


def translation_loss_sums(
    model: Transformer,
    model_config: TransformerConfig,
    train: TrainConfig | ml_collections.ConfigDict,
    params,
    batch: dict[str, jnp.ndarray],
    rng: jax.Array | None,
    deterministic: bool,
) -> dict[str, jnp.ndarray]:
    """Sums ``loss``, ``nll``, ``correct``, ``tokens`` of ``batch`` (source, target_in,
    target_out [rows, length], and the segments and positions of packed rows), with the
    train section's label_smoothing and loss_chunk_tokens (read as a TrainConfig, at
    trace time)."""
    inputs = (
        batch["source"],
        batch["target_in"],
        batch.get("source_segments"),
        batch.get("target_segments"),
        batch.get("source_positions"),
        batch.get("target_positions"),
    )
    rngs = None if rng is None else {"dropout": rng}
    targets = batch["target_out"]
    weights = targets != model_config.pad_id
    train = section_values(TrainConfig, train)  # a field it lacks takes its default
    smoothing = float(train.label_smoothing)
    chunk_tokens = train.loss_chunk_tokens
    if chunk_tokens <= 0:
        logits = model.apply({"params": params}, *inputs, deterministic=deterministic, rngs=rngs)
        return label_smoothed_cross_entropy(logits, targets, weights, smoothing)
    hidden, (kernel, bias) = model.apply(
        {"params": params},
        *inputs,
        deterministic=deterministic,
        rngs=rngs,
        method=_hidden_and_projection,
    )
    return chunked_label_smoothed_cross_entropy(
        hidden,
        kernel,
        bias,
        targets,
        weights,
        smoothing,
        chunk_tokens,
        model_config.compute_dtype,
    )
