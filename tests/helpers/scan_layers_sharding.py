"""The scanned model on 8 forced CPU devices; run as a subprocess by test_scan_layers.py.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/helpers/scan_layers_sharding.py

Prints one line ``RESULT {json}``: the compiled sharding of an encoder block's output (the
residual stream) under the default rules and with "length" on the tensor axis, the
sharding of a stacked kernel, and the loss of one scanned train step on a 2x2x2 mesh.
"""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from jaxtrans.models import TransformerConfig
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


def scanned_train_step(mesh) -> dict:
    """One train step of the scanned model, traced under the mesh and the default rules."""
    run = {
        "train": {"label_smoothing": 0.1},
        "data": {"max_source_length": 8, "max_target_length": 8},
    }
    task = TranslationTask(ml_collections.ConfigDict(run), CONFIG)
    optimizer_config = ml_collections.ConfigDict(
        dict(
            name="adamw", b1=0.9, b2=0.98, eps=1e-6, weight_decay=0.01, schedule="constant",
            noam_factor=1.0, learning_rate=1e-3, warmup_steps=0, clip_norm=1.0,
        )
    )  # fmt: skip
    optimizer, schedule = make_optimizer(optimizer_config, 32, 100)
    state, shardings, _ = init_train_state(task.init_params, optimizer, mesh, jax.random.key(0))
    kernel = state.params["encoder"]["layers"]["feed_forward"]["wi"]["kernel"]
    ids = jnp.full((8, 8), 5, jnp.int32)
    batch = {"source": ids, "target_in": ids, "target_out": ids}
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.LOGICAL_RULES):
        step = jax.jit(
            lambda s, b: make_train_step(task, optimizer, schedule)(s, b, s.dropout_key()),
            in_shardings=(shardings, sharding.batch_sharding(mesh)),
            out_shardings=(shardings, sharding.replicated(mesh)),
        )
        _, metrics = step(state, batch)
    return {"kernel_spec": spec(kernel.sharding), "loss": float(metrics["loss"])}


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
