"""Two training steps of a tiny model on given meshes; run as a subprocess by the tests.

    python tests/helpers/parallel_step.py OUTDIR DATAxFSDPxTENSOR [...]

For each mesh (using the first data*fsdp*tensor devices) writes the last step's loss and
the updated parameters (flattened) to OUTDIR/DATAxFSDPxTENSOR.npz from process 0.
Multi-process runs set JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID.
"""

import sys

import jax
import ml_collections
import numpy as np

from jaxtrans.models import TransformerConfig
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.training import distributed, sharding
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.state import init_train_state
from jaxtrans.training.step import make_train_step

GLOBAL_ROWS, SRC, TGT, VOCAB = 16, 12, 10, 64
DATA = {"max_source_length": SRC, "max_target_length": TGT}


def fixed_batch() -> dict[str, np.ndarray]:
    """A packed-looking global batch, identical in every process."""
    rng = np.random.default_rng(0)
    lengths_src = rng.integers(3, SRC + 1, GLOBAL_ROWS)
    lengths_tgt = rng.integers(3, TGT + 1, GLOBAL_ROWS)
    batch = {}
    for side, width, lengths in (("source", SRC, lengths_src), ("target", TGT, lengths_tgt)):
        real = np.arange(width)[None] < lengths[:, None]
        ids = np.where(real, rng.integers(4, VOCAB, (GLOBAL_ROWS, width)), 0).astype(np.int32)
        if side == "source":
            batch["source"] = ids
        else:
            batch["target_in"] = ids
            batch["target_out"] = np.where(real, rng.integers(4, VOCAB, ids.shape), 0).astype(
                np.int32
            )
        batch[f"{side}_segments"] = real.astype(np.int32)
        batch[f"{side}_positions"] = np.where(real, np.arange(width)[None], 0).astype(np.int32)
    return batch


def run(out: str, data: int, fsdp: int, tensor: int) -> None:
    task = TranslationTask(
        ml_collections.ConfigDict({"train": {"label_smoothing": 0.1}, "data": DATA}),
        TransformerConfig(
            vocab_size=VOCAB,
            d_model=32,
            num_heads=4,
            d_ff=64,
            num_encoder_layers=1,
            num_decoder_layers=1,
        ),
    )
    # A gradient that is zero in exact arithmetic (the key bias: softmax ignores a constant
    # added to every score) is pure rounding noise, and Adam divides it by its own size;
    # eps = 1e-6 keeps that noise from becoming a full learning-rate step, so the
    # comparison sees the sharded gradients, not Adam's amplification of their last bits.
    optimizer_config = ml_collections.ConfigDict(
        dict(
            name="adamw", b1=0.9, b2=0.98, eps=1e-6, weight_decay=0.01, schedule="constant",
            noam_factor=1.0, learning_rate=1e-3, warmup_steps=0, clip_norm=1.0,
        )
    )  # fmt: skip
    optimizer, schedule = make_optimizer(optimizer_config, 32, 100)
    mesh_config = ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor))
    mesh = sharding.make_mesh(mesh_config, jax.devices()[: data * fsdp * tensor])
    state, shardings, _ = init_train_state(task.init_params, optimizer, mesh, jax.random.key(0))
    batch_sharding = sharding.batch_sharding(mesh)
    step = jax.jit(
        lambda s, b: make_train_step(task, optimizer, schedule)(s, b, s.dropout_key()),
        in_shardings=(shardings, batch_sharding),
        out_shardings=(shardings, sharding.replicated(mesh)),
    )
    batch = fixed_batch()
    rows = GLOBAL_ROWS // jax.process_count()
    local = {
        k: v[jax.process_index() * rows : (jax.process_index() + 1) * rows]
        for k, v in batch.items()
    }
    global_batch = {
        k: jax.make_array_from_process_local_data(batch_sharding, v) for k, v in local.items()
    }
    for _ in range(2):  # two steps: the second sees the optimizer state of the first
        state, metrics = step(state, global_batch)
    gathered = jax.jit(lambda p: p, out_shardings=sharding.replicated(mesh))(state.params)
    leaves = jax.tree_util.tree_leaves_with_path(gathered)
    if jax.process_index() == 0:
        np.savez(
            out,
            loss=np.asarray(metrics["loss"]),
            grad_norm=np.asarray(metrics["grad_norm"]),
            **{jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves},
        )


if __name__ == "__main__":
    distributed.initialize_from_env()
    for name in sys.argv[2:]:
        run(f"{sys.argv[1]}/{name}.npz", *map(int, name.split("x")))
