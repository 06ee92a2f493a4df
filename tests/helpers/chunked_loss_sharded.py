"""The translation loss and its gradient, chunked, on given meshes; run as a subprocess with
eight forced CPU devices by tests/integration/test_chunked_loss_sharded.py.

    python tests/helpers/chunked_loss_sharded.py OUTDIR CHUNK_TOKENS DATAxFSDPxTENSOR [...]

For each mesh writes OUTDIR/DATAxFSDPxTENSOR-CHUNK_TOKENS.npz: the loss sums and the
gradient of every parameter (gathered), and ``collectives``: the names of the collective
operations in the compiled program (all-gather, all-to-all, ... once each, sorted), and
``batch_shards``: the parts the chunked loss takes the rows to be split into there.
"""

import re
import sys

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from parallel_step import DATA, VOCAB, fixed_batch

from jaxtrans.models import TransformerConfig
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.training import sharding
from jaxtrans.training.chunked_loss import batch_shards


def run(out: str, chunk_tokens: int, data: int, fsdp: int, tensor: int) -> None:
    train = {"label_smoothing": 0.1, "loss_chunk_tokens": chunk_tokens}
    task = TranslationTask(
        ml_collections.ConfigDict({"train": train, "data": DATA}),
        TransformerConfig(
            vocab_size=VOCAB, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=1,
            num_decoder_layers=1, dropout_rate=0.0, attention_dropout_rate=0.0,
            activation_dropout_rate=0.0,
        ),
    )  # fmt: skip
    mesh = sharding.make_mesh(
        ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor)),
        jax.devices()[: data * fsdp * tensor],
    )
    with sharding.axis_rules(mesh):
        boxed = jax.eval_shape(task.init_params, jax.random.key(0))
        param_shardings = sharding.logical_shardings(boxed, mesh)
        params = jax.jit(
            lambda key: nn.meta.unbox(task.init_params(key)), out_shardings=param_shardings
        )(jax.random.key(0))

        def gradients(params, batch):
            def objective(params):
                sums = task.loss_sums(params, batch, None, deterministic=True)
                return sums["loss"] / sums["tokens"] + 0.5 * sums["nll"], sums

            return jax.grad(objective, has_aux=True)(params)

        step = jax.jit(
            gradients,
            in_shardings=(param_shardings, sharding.batch_sharding(mesh)),
            out_shardings=sharding.replicated(mesh),
        )
        batch = jax.device_put(fixed_batch(), sharding.batch_sharding(mesh))
        compiled = step.lower(params, batch).compile()
        shards = batch_shards()
        grads, sums = compiled(params, batch)
    kinds = r"(all-gather|all-to-all|collective-permute|all-reduce|reduce-scatter)"
    collectives = sorted(set(re.findall(rf"\s{kinds}(?:-start)?\(", compiled.as_text())))
    leaves = jax.tree_util.tree_leaves_with_path(grads)
    np.savez(
        out,
        collectives=np.array(collectives, dtype=str),
        batch_shards=np.array(shards),
        **{f"sum_{k}": np.asarray(v) for k, v in sums.items()},
        **{jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves},
    )


if __name__ == "__main__":
    chunk = int(sys.argv[2])
    for name in sys.argv[3:]:
        run(f"{sys.argv[1]}/{name}-{chunk}.npz", chunk, *map(int, name.split("x")))
