"""The scanned model on 8 forced CPU devices; run as a subprocess by test_scan_layers.py.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/helpers/scan_layers_sharding.py

Prints one line ``RESULT {json}``: the compiled sharding of an encoder block's output (the
residual stream) under the default rules and with "length" on the tensor axis, the
sharding of a stacked kernel, and one train step on a varied padded batch
(parallel_step.fixed_batch) twice from the same parameters: scanned on a 2x2x2 mesh and
per layer on one device: both losses and gradient norms, the largest difference between
their updated parameters and the largest update.
"""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from parallel_step import DATA, fixed_batch

from jaxtrans.models import TransformerConfig
from jaxtrans.models.layer_stacks import arrange_layers, unstack_layers
from jaxtrans.nn.blocks import EncoderBlock
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.training import sharding
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.state import init_train_state
from jaxtrans.training.step import make_train_step

CONFIG = TransformerConfig(
    vocab_size=64, d_model=32, num_heads=4, d_ff=64,
    num_encoder_layers=2, num_decoder_layers=2, scan_layers=True,
)  # fmt: skip


def spec(sharding_) -> list:
    return [list(a) if isinstance(a, tuple) else a for a in sharding_.spec]


def residual_stream_sharding(mesh, rules) -> list:
    """The compiled sharding of an encoder block's output [batch, length, d_model]."""
    block = EncoderBlock(CONFIG)
    x = jnp.ones((8, 16, CONFIG.d_model))
    variables = block.init(jax.random.key(0), x, None, None, True)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        y = jax.jit(lambda v, x: block.apply(v, x, None, None, True))(variables, x)
    return spec(y.sharding)


def train_step(config: TransformerConfig, mesh, batch) -> tuple[dict, dict, dict, list]:
    """One train step of ``config``'s model, traced under the mesh and the default rules,
    from the per-layer model's initial parameters (stacked when scanned) -> (parameters
    before and after, per layer, on the host; the step's metrics; the sharding spec of the
    first feed-forward kernel of the encoder)."""
    run = {"train": {"label_smoothing": 0.1}, "data": DATA}
    task = TranslationTask(ml_collections.ConfigDict(run), config)
    per_layer = TranslationTask(task.config, config.replace(scan_layers=False))
    optimizer_config = ml_collections.ConfigDict(
        dict(
            name="adamw", b1=0.9, b2=0.98, eps=1e-6, weight_decay=0.01, schedule="constant",
            noam_factor=1.0, learning_rate=1e-3, warmup_steps=0, clip_norm=1.0,
        )
    )  # fmt: skip
    optimizer, schedule = make_optimizer(optimizer_config, 32, 100)
    init = lambda rng: arrange_layers(per_layer.init_params(rng), config.scan_layers)  # noqa: E731
    state, shardings, _ = init_train_state(init, optimizer, mesh, jax.random.key(0))
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.LOGICAL_RULES):
        step = jax.jit(
            lambda s, b: make_train_step(task, optimizer, schedule)(s, b, s.dropout_key()),
            in_shardings=(shardings, sharding.batch_sharding(mesh)),
            out_shardings=(shardings, sharding.replicated(mesh)),
        )
        new_state, metrics = step(state, jax.device_put(batch, sharding.batch_sharding(mesh)))
    encoder = state.params["encoder"]
    kernel = (encoder["layers"] if config.scan_layers else encoder["layer_0"])["feed_forward"]
    host = lambda params: unstack_layers(jax.device_get(params))  # noqa: E731
    return (
        host(state.params),
        host(new_state.params),
        jax.device_get(metrics),
        spec(kernel["wi"]["kernel"].sharding),
    )


def scanned_train_step(mesh) -> dict:
    """The scanned step on ``mesh`` and the per-layer step on one device, compared."""
    config = CONFIG.replace(
        dropout_rate=0.0, attention_dropout_rate=0.0, activation_dropout_rate=0.0
    )
    batch = fixed_batch()
    one_device = sharding.make_mesh(
        ml_collections.ConfigDict(dict(data=1, fsdp=1, tensor=1)), jax.devices()[:1]
    )
    before, scanned, metrics, kernel_spec = train_step(config, mesh, batch)
    _, reference, reference_metrics, _ = train_step(
        config.replace(scan_layers=False), one_device, batch
    )
    pairs = zip(jax.tree.leaves(scanned), jax.tree.leaves(reference), strict=True)
    updates = zip(jax.tree.leaves(reference), jax.tree.leaves(before), strict=True)
    return {
        "kernel_spec": kernel_spec,
        "loss": [float(metrics["loss"]), float(reference_metrics["loss"])],
        "grad_norm": [float(metrics["grad_norm"]), float(reference_metrics["grad_norm"])],
        "same_structure": jax.tree.structure(scanned) == jax.tree.structure(reference),
        "param_difference": max(float(np.max(np.abs(a - b))) for a, b in pairs),
        "update": max(float(np.max(np.abs(a - b))) for a, b in updates),
    }


def main() -> None:
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=2, fsdp=2, tensor=2)))
    length_on_tensor = tuple(
        (name, "tensor" if name == "length" else axes) for name, axes in sharding.LOGICAL_RULES
    )
    result = {
        "default": residual_stream_sharding(mesh, sharding.LOGICAL_RULES),
        "length_on_tensor": residual_stream_sharding(mesh, length_on_tensor),
        **scanned_train_step(mesh),
    }
    print("RESULT", json.dumps(result))


if __name__ == "__main__":
    main()
