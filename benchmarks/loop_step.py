"""The training loop's own step on the packed batches train.py feeds it, for the
accelerator benchmark (accelerator.py, gpu.sh). Imports JAX and jaxtrans, never torch.

run_config     a config file's run config with dotted overrides (``model.dtype=bfloat16``)
packed_batches local batches from the training pipeline over a synthetic corpus
LoopStep       the step as the loop compiles it: mesh, logical-axis rules, the non-finite
               guard's guarded step, the donated state (training/step_layout.py)

The batches are what ``jaxtrans.data.translation.pipeline.train_iterator`` makes of a TSV
of token ids (a tokenizer that reads the ids back): rows packed first-fit with segment ids
and positions as the run's data section says (``data.pack``), so the step attends within
pairs, pads what packing leaves and counts the real target tokens. The pair lengths follow
a log-normal with WMT14 EN-DE's median (about 25 pieces a side with a 32k vocabulary),
scaled down where the rows are shorter.
"""

import ast
import importlib.util
import os
import tempfile
from collections.abc import Iterable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxtrans.data.reserved_pieces import NUM_RESERVED_IDS, PAD_ID
from jaxtrans.tasks import compile_task
from jaxtrans.training import sharding
from jaxtrans.training.loop import global_batch
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.run_settings import batch_rows, check_run_settings, train_settings
from jaxtrans.training.state import init_train_state
from jaxtrans.training.step_layout import StepLayout, jit_train_step

# The schedule length of a run whose length is not a step count: the program is the same.
_ANY_LENGTH = 2**31 - 1
# Median pieces a side of a WMT14 EN-DE pair under a 32k SentencePiece vocabulary.
_MEDIAN_PAIR_LENGTH = 25


def parse_override(text: str) -> tuple[str, object]:
    """``"model.dtype=bfloat16"`` -> ("model.dtype", "bfloat16"); Python literals (numbers,
    True, None, quoted strings) become values, anything else stays a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"{text!r}: give KEY=VALUE, e.g. model.dtype=bfloat16")
    try:
        return key.strip(), ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key.strip(), value


def run_config(path: str, overrides: Iterable[tuple[str, object]]) -> ml_collections.ConfigDict:
    """``get_config()`` of the config file at ``path``, each (dotted key, value) set."""
    spec = importlib.util.spec_from_file_location("benchmark_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    for key, value in overrides:
        *sections, field = key.split(".")
        node = config
        for section in sections:
            node = node[section]
        if field not in node:
            raise KeyError(f"{key}: the config has no such field")
        node[field] = value
    return config


class IdTokenizer:
    """Reads back the token ids a synthetic line holds ("17 402 9" -> [17, 402, 9])."""

    @staticmethod
    def encode_source_batch(lines: list[str]) -> list[list[int]]:
        return [[int(word) for word in line.split()] for line in lines]

    encode_target_batch = encode_source_batch


def median_pair_length(data) -> int:
    """WMT14's median, or a tenth of the source row where rows are shorter than 250."""
    return min(_MEDIAN_PAIR_LENGTH, max(2, int(data.max_source_length) // 10))


def synthetic_corpus(path: str, pairs: int, config, seed: int = 0) -> None:
    """Write ``pairs`` lines of SOURCE<TAB>TARGET token ids to ``path``: lengths log-normal
    (sigma 0.6) around the median pair length (a tenth of the row where rows are shorter),
    targets 0.8-1.25 times their source, all within the data section's limits; ids uniform
    over the vocabulary's non-reserved pieces."""
    data = config.data
    rng = np.random.default_rng(seed)
    vocab = int(data.vocab_size)
    median = median_pair_length(data)
    source = np.clip(rng.lognormal(np.log(median), 0.6, pairs), 1, data.max_source_length - 1)
    ratio = rng.uniform(0.8, 1.25, pairs)
    target = np.clip(source * ratio, 1, data.max_target_length - 1)
    with open(path, "w", encoding="utf-8") as f:
        for n, m in zip(source.astype(int), target.astype(int), strict=True):
            ids = rng.integers(NUM_RESERVED_IDS, vocab, n + m)
            f.write(" ".join(map(str, ids[:n])) + "\t" + " ".join(map(str, ids[n:])) + "\n")


def packed_batches(config: ml_collections.ConfigDict, count: int) -> list[dict[str, np.ndarray]]:
    """``count`` local batches of the training pipeline (this process's rows) over a
    synthetic corpus large enough to fill the packer's pool and then ``count`` batches."""
    from jaxtrans.data.translation.pipeline import train_iterator

    data = ml_collections.ConfigDict(config.data.to_dict())
    # Enough pairs for the packer's pool and ``count`` batches (the pipeline repeats the
    # corpus, reshuffled, where that is not enough).
    per_row = max(1, int(data.max_target_length) // median_pair_length(data))
    pool = int(data.pack_pool_batches) if data.pack else 0
    pairs = int(data.batch_size) * (count + pool + 1) * per_row
    with tempfile.TemporaryDirectory(prefix="jaxtrans-bench-") as directory:
        data.train = os.path.join(directory, "train.tsv")
        # Made in this process (workers=0): a few batches, kept; the step is what is timed.
        data.update(tfds_name="", dev="", test="", prefetch_batches=0, workers=0)
        synthetic_corpus(data.train, pairs, config)
        batches = train_iterator(data, IdTokenizer(), seed=config.seed)
        return [next(batches) for _ in range(count)]


def real_target_tokens(batch: dict[str, np.ndarray]) -> int:
    return int(np.count_nonzero(batch["target_out"] != PAD_ID))


class LoopStep:
    """The train step of a run of ``config`` on this process's devices, as the loop
    compiles it (mesh, rules, guard mode ``train.on_nonfinite``, donated state), with the
    state it updates. ``step(batch)`` dispatches one update of a device batch (``put``);
    ``sync()`` waits for the last one."""

    def __init__(self, config: ml_collections.ConfigDict):
        self.mesh = sharding.make_mesh(config.mesh, jax.devices())
        self.rules = sharding.logical_rules(config.mesh.get("rules", ""))
        config = batch_rows(config, self.mesh, is_main=False)
        check_run_settings(config, self.mesh, jax.process_count())
        train = train_settings(config)
        self.config = config
        self.task = compile_task(config)
        optimizer, schedule = make_optimizer(
            config.optimizer, self.task.model_config.d_model, int(train.num_steps) or _ANY_LENGTH
        )
        self.state, shardings, _ = init_train_state(
            self.task.init_params, optimizer, self.mesh, jax.random.key(config.seed), self.rules
        )
        self.layout = StepLayout.of(self.mesh, self.rules, shardings)
        self.guard_mode = train.on_nonfinite
        jitted = jit_train_step(
            self.task, optimizer, schedule, int(train.grad_accum_steps), train.on_nonfinite,
            self.layout,
        )  # fmt: skip
        self._update = sharding.with_axis_rules(jitted, self.mesh, self.rules)
        self.frozen = jax.device_put(jnp.zeros((), bool), self.layout.replicated)
        self.metrics = None

    def put(self, local_batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """A local batch laid out over the mesh, as the loop places it."""
        return global_batch(local_batch, self.layout.batch)

    def step(self, batch: dict[str, jax.Array]) -> None:
        self.state, self.metrics = self._update(self.state, batch, self.frozen)
        if self.guard_mode == "stop":  # the flag the guard carries to the next step
            self.frozen = self.metrics["nonfinite"]

    def sync(self) -> None:
        jax.block_until_ready((self.state, self.metrics))
