"""The loop's dev evaluation of a tiny model on given meshes; run as a subprocess by the
tests.

    python tests/helpers/sharded_evaluation.py OUTDIR DATAxFSDPxTENSOR [...]

For each mesh (the first data*fsdp*tensor devices) the parameters (the same values on
every mesh) are laid out as a run lays them out, and the loop's evaluation
(loop.evaluate: dev batches of 13 and 5 rows, split over the mesh's data and fsdp axes)
computes the dev loss and decodes the dev sources greedily and with beam 2 over the mesh
(translate_ids with the loop's rows sharding). Process 0 writes OUTDIR/MESH.json: the
record and the hypotheses, with those that one device decodes from the parameters
gathered to the host (translate_ids without rows, the path before), and the dev loss
summed plainly over the unpadded batches.
Multi-process runs set JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID.
"""

import json
import sys

import jax
import ml_collections
import numpy as np

from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.translate import translate_ids
from jaxtrans.models import TransformerConfig
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.training import distributed, loop, sharding
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.state import init_train_state
from jaxtrans.training.step_layout import StepLayout, jit_eval_step

SRC, TGT, VOCAB = 12, 10, 64
DATA = {"max_source_length": SRC, "max_target_length": TGT}
MODEL = TransformerConfig(
    vocab_size=VOCAB, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=1,
    num_decoder_layers=1, max_len=64,
)  # fmt: skip


def dev_batches() -> list[dict[str, np.ndarray]]:
    """Two batches as data/translation/evaluation.py makes them (13 and 5 rows: neither
    splits over 2, 4 or 8 devices), the last row of each all PAD (a row that fills a batch)."""
    rng = np.random.default_rng(0)
    batches = []
    for rows in (13, 5):
        batch = {}
        for key, width in (("source", SRC), ("target_in", TGT), ("target_out", TGT)):
            lengths = rng.integers(2, width + 1, rows)
            lengths[-1] = 0
            ids = rng.integers(4, VOCAB, (rows, width))
            batch[key] = np.where(np.arange(width) < lengths[:, None], ids, 0).astype(np.int32)
        batches.append(batch)
    return batches


def dev_sources() -> list[list[int]]:
    """Eleven sources of 3 to 12 ids, EOS last."""
    rng = np.random.default_rng(1)
    return [[*rng.integers(4, VOCAB, int(n)).tolist(), 1] for n in rng.integers(2, SRC, 11)]


class DevTask(TranslationTask):
    """The translation task with fixed dev batches, whose extra evaluation decodes the dev
    sources over the loop's rows sharding."""

    def eval_batches(self):
        return dev_batches()

    def extra_eval(self, params, step, rows=None):
        with sharding.rows_axis_rules(rows):
            return {
                f"beam{beam}": translate_ids(
                    self.model_config,
                    params,
                    dev_sources(),
                    SearchOptions(batch_size=2, beam_size=beam, max_extra_length=6),
                    rows=rows,
                )  # fmt: skip
                for beam in (1, 2)
            }


def run(out: str, data: int, fsdp: int, tensor: int) -> None:
    task = DevTask(
        ml_collections.ConfigDict({"train": {"label_smoothing": 0.1}, "data": DATA}), MODEL
    )
    optimizer_config = ml_collections.ConfigDict(
        dict(
            name="adamw", b1=0.9, b2=0.98, eps=1e-6, weight_decay=0.01, schedule="constant",
            noam_factor=1.0, learning_rate=1e-3, warmup_steps=0, clip_norm=1.0,
        )
    )  # fmt: skip
    optimizer, _ = make_optimizer(optimizer_config, 32, 100)
    mesh = sharding.make_mesh(
        ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor)),
        jax.devices()[: data * fsdp * tensor],
    )
    _, shardings, _ = init_train_state(task.init_params, optimizer, mesh, jax.random.key(0))
    # The same values on every mesh: made on the host, placed as the run places them.
    host_params = jax.device_get(jax.jit(lambda k: task.init_params(k))(jax.random.key(0)))
    host_params = jax.tree.map(np.asarray, host_params)
    unboxed = jax.tree.map(
        lambda x: x.unbox() if hasattr(x, "unbox") else x,
        host_params,
        is_leaf=lambda x: hasattr(x, "unbox"),
    )
    params = jax.tree.map(
        lambda x, s: jax.make_array_from_callback(x.shape, s, lambda index: x[index]),
        unboxed,
        shardings.params,
    )
    layout = StepLayout.of(mesh, sharding.LOGICAL_RULES, shardings)
    record = loop.evaluate(task, jit_eval_step(task, layout), layout, params, 0)
    one_device = task.extra_eval(unboxed, 0)
    # The dev loss as plain sums over the batches as they are (no padding, no jit).
    sums = [task.loss_sums(unboxed, b, None, deterministic=True) for b in dev_batches()]
    plain = task.summarize(jax.tree.map(lambda *x: sum(x), *sums))
    if jax.process_index() == 0:
        with open(out, "w") as f:
            json.dump(
                {
                    "record": record,
                    "one_device": one_device,
                    "plain": {k: float(v) for k, v in plain.items()},
                },
                f,
            )


if __name__ == "__main__":
    distributed.initialize_from_env()
    for name in sys.argv[2:]:
        run(f"{sys.argv[1]}/{name}.json", *map(int, name.split("x")))
