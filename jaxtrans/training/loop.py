"""The training loop: set up a run, step, log, evaluate, checkpoint, resume.

``train_and_evaluate(config, workdir)`` is the whole program behind ``train.py``.
Side effects (files, console, signals) live here; the step itself is pure (step.py).
"""

import contextlib
import os
import signal
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxtrans import data
from jaxtrans.checkpoints import Checkpointer
from jaxtrans.errors import UserError
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.training import distributed, flops, sharding
from jaxtrans.training.metrics import MetricsWriter, Progress, say
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.state import TrainState, init_train_state
from jaxtrans.training.step import make_eval_step, make_train_step, summarize
from jaxtrans.training.workdir import load_run_config, save_run_config

# Model fields that fix the parameter shapes; a resumed run must keep them.
SHAPE_FIELDS = (
    "vocab_size",
    "target_vocab_size",
    "d_model",
    "num_heads",
    "d_ff",
    "num_encoder_layers",
    "num_decoder_layers",
    "share_embeddings",
    "tie_output",
    "position",
    "max_len",
)


def resolve_config(config: ml_collections.ConfigDict, tokenizer) -> ml_collections.ConfigDict:
    """The run config with the vocabulary sizes the tokenizer decided."""
    resolved = ml_collections.ConfigDict(config.to_dict())
    resolved.model.vocab_size = tokenizer.source_vocab_size
    resolved.model.target_vocab_size = None if tokenizer.shared else tokenizer.target_vocab_size
    return resolved


def model_config_of(run_config: ml_collections.ConfigDict) -> TransformerConfig:
    try:
        return TransformerConfig.from_dict(run_config.model.to_dict())
    except (ValueError, TypeError) as error:
        raise UserError(f"config.model: {error}") from error


def check_resumable(saved: ml_collections.ConfigDict, current: ml_collections.ConfigDict, workdir):
    """A resumed run must have the parameter shapes its checkpoints hold."""
    changed = [
        f"{key}={saved.model.get(key)!r} (config now says {current.model.get(key)!r})"
        for key in SHAPE_FIELDS
        if saved.model.get(key) != current.model.get(key)
    ]
    if changed:
        raise UserError(
            f"{workdir} was trained with {'; '.join(changed[:3])}; "
            "use the same model config to resume, or a new --workdir"
        )


def setup_compilation_cache(cache_dir: str) -> None:
    """Persistent XLA compilation cache, so restarts compile in seconds."""
    if not cache_dir:
        return
    os.makedirs(os.path.expanduser(cache_dir), exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


class StopSignal:
    """SIGTERM / SIGINT ask the loop to save a checkpoint and stop at the next step."""

    def __init__(self):
        self.received: str | None = None
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def global_batch(local: dict[str, np.ndarray], sharding_) -> dict[str, jax.Array]:
    """Assemble each process's rows into arrays laid out over the mesh."""
    return {
        key: jax.make_array_from_process_local_data(sharding_, value)
        for key, value in local.items()
    }


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Train (or resume) the run in ``workdir`` and return the last logged metrics."""
    distributed.initialize_from_env()
    is_main = jax.process_index() == 0
    workdir = os.path.abspath(workdir)
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create --workdir {workdir}: {error.strerror}") from error
    if not os.access(workdir, os.W_OK):
        raise UserError(f"--workdir {workdir} is not writable; choose another directory")
    setup_compilation_cache(config.train.compilation_cache_dir)

    # Tokenizer and model.
    tokenizer = data.load_or_train_tokenizer(config.data, workdir)
    run_config = resolve_config(config, tokenizer)
    if os.path.exists(os.path.join(workdir, "config.json")):
        check_resumable(load_run_config(workdir), run_config, workdir)
    if is_main:
        save_run_config(workdir, run_config)
    model_config = model_config_of(run_config)
    model = Transformer(model_config)
    num_steps = int(config.train.num_steps)
    optimizer, schedule = make_optimizer(config.optimizer, model_config.d_model, num_steps)

    # State, laid out over the mesh by the logical-axis rules.
    mesh = sharding.make_mesh(config.mesh)
    max_source, max_target = config.data.max_source_length, config.data.max_target_length

    rng = jax.random.key(config.seed)
    state, state_shardings, abstract = init_train_state(
        model, optimizer, mesh, rng, max_source, max_target
    )
    batch_sharding = sharding.batch_sharding(mesh)
    replicated = sharding.replicated(mesh)
    if config.data.batch_size % (mesh.shape["data"] * mesh.shape["fsdp"]):
        raise UserError(
            f"--config.data.batch_size={config.data.batch_size} is not divisible by the "
            f"{mesh.shape['data'] * mesh.shape['fsdp']} data-parallel devices; choose a multiple"
        )
    accum = int(config.train.grad_accum_steps)
    if (config.data.batch_size // jax.process_count()) % accum:
        raise UserError(
            f"--config.train.grad_accum_steps={accum} does not divide the per-process batch of "
            f"{config.data.batch_size // jax.process_count()} rows"
        )

    train_step = make_train_step(model, optimizer, schedule, config.train.label_smoothing, accum)
    jit_train_step = jax.jit(
        lambda state, batch: train_step(state, batch, state.dropout_key()),
        in_shardings=(state_shardings, batch_sharding),
        out_shardings=(state_shardings, replicated),
        donate_argnums=(0,),
    )
    eval_step = jax.jit(
        make_eval_step(model, config.train.label_smoothing),
        in_shardings=(state_shardings.params, replicated),
        out_shardings=replicated,
    )

    # Checkpoints: resume from the latest complete one.
    checkpointer = Checkpointer(
        workdir, keep=config.train.keep_checkpoints, async_save=config.train.async_checkpoints
    )
    train_iter = data.train_iterator(
        config.data,
        tokenizer,
        seed=config.seed,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
    )
    latest = checkpointer.latest_step()
    if latest is None:
        say(f"training from scratch in {workdir}", is_main)
    else:
        with_shardings = lambda tree, shardings: jax.tree.map(  # noqa: E731
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings
        )
        try:
            params, opt_state, rng_data, meta = checkpointer.restore(
                latest,
                with_shardings(abstract.params, state_shardings.params),
                with_shardings(abstract.opt_state, state_shardings.opt_state),
                with_shardings(abstract.rng, state_shardings.rng),
            )
        except (ValueError, KeyError) as error:
            raise UserError(
                f"checkpoint {latest} in {workdir} does not fit this model "
                f"({str(error).splitlines()[0][:160]}); use a new --workdir"
            ) from error
        step = jax.device_put(jnp.asarray(latest, jnp.int32), state_shardings.step)
        state = TrainState(step=step, params=params, opt_state=opt_state, rng=rng_data)
        train_iter.set_state(meta["data"])
        say(f"resuming from checkpoint {latest} in {workdir}", is_main)

    first_step = int(jax.device_get(state.step))
    writer = MetricsWriter(workdir, enabled=is_main)
    progress = Progress(first_step, num_steps, enabled=is_main)
    step_flops = flops.train_step_flops(
        model_config, config.data.batch_size, max_source, max_target
    )
    peak = flops.device_peak_flops(config.train.peak_flops_per_device)
    evaluator = DevEvaluator(config, run_config, model_config, tokenizer, eval_step, replicated)

    def save(step: int) -> None:
        meta = {
            "step": step,
            "data": train_iter.get_state(),
            "model": {k: run_config.model.get(k) for k in SHAPE_FIELDS},
        }
        checkpointer.save(step, state.params, state.opt_state, state.rng, meta)

    say(
        f"{sum(x.size for x in jax.tree.leaves(abstract.params)):,} parameters; mesh "
        f"{dict(mesh.shape)}; {config.data.batch_size} rows x {max_target} target tokens "
        f"per step; {num_steps} steps",
        is_main,
    )
    last_metrics: dict[str, Any] = {}
    pending: list[dict[str, jax.Array]] = []
    step = first_step
    window_start, window_steps = time.time(), 0
    with StopSignal() as stop:
        while step < num_steps:
            batch = global_batch(next(train_iter), batch_sharding)
            state, metrics = jit_train_step(state, batch)
            pending.append(metrics)
            step += 1
            window_steps += 1
            if step % config.train.log_every == 0 or step == num_steps or stop.received:
                jax.block_until_ready(pending[-1])  # time the work, not its dispatch
                last_metrics = log_window(
                    pending,
                    time.time() - window_start,
                    window_steps,
                    step_flops,
                    peak,
                    train_iter.stats(),
                )
                writer.write(step, last_metrics)
                progress.log(step, last_metrics)
                pending, window_start, window_steps = [], time.time(), 0
            if step % config.train.checkpoint_every == 0 or step == num_steps or stop.received:
                save(step)
            if stop.received:
                checkpointer.wait()
                say(
                    f"{stop.received}: saved checkpoint {step}; rerun the command to resume",
                    is_main,
                )
                break
            if config.train.eval_every and (
                step % config.train.eval_every == 0 or step == num_steps
            ):
                record = evaluator(state.params, step)
                if record:
                    writer.write(step, record, prefix="dev")
                    say("  ".join(f"{k} {v}" for k, v in record.items()), is_main)
                window_start = time.time()  # evaluation time is not training throughput
    checkpointer.wait()
    checkpointer.close()
    writer.close()
    return last_metrics


def log_window(
    pending: list[dict[str, jax.Array]],
    seconds: float,
    steps: int,
    step_flops: float,
    peak: float | None,
    data_stats: dict[str, float],
) -> dict[str, Any]:
    """Means over the steps since the last log (token-weighted for per-token metrics)."""
    fetched = jax.device_get(pending)
    tokens = np.array([m["tokens"] for m in fetched])
    weights = tokens / max(tokens.sum(), 1.0)
    record = {
        key: float(np.sum(weights * np.array([m[key] for m in fetched])))
        for key in ("loss", "nll", "accuracy")
    }
    record["perplexity"] = float(np.exp(min(record["nll"], 50.0)))
    record["lr"] = float(fetched[-1]["lr"])
    record["grad_norm"] = float(np.mean([m["grad_norm"] for m in fetched]))
    record["tokens_per_sec"] = float(tokens.sum() / max(seconds, 1e-9))
    record["steps_per_sec"] = steps / max(seconds, 1e-9)
    record["mfu"] = flops.mfu(step_flops, seconds / max(steps, 1), jax.device_count(), peak)
    record["padding_fraction"] = data_stats.get("mean_padding_fraction")
    record["pairs_dropped_too_long"] = data_stats.get("pairs_dropped_too_long")
    if not np.isfinite(record["loss"]):
        raise FloatingPointError(f"loss is {record['loss']} at step window ending {len(pending)}")
    return record


class DevEvaluator:
    """Dev-set loss (and BLEU, when decoding is available) during training."""

    def __init__(self, config, run_config, model_config, tokenizer, eval_step, replicated):
        self.config = config
        self.run_config = run_config
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.eval_step = eval_step
        self.replicated = replicated
        self.pairs = None
        with contextlib.suppress(UserError):
            self.pairs = data.load_split(config.data, "dev")
        if self.pairs is not None and config.eval.dev_sentences:
            self.pairs = self.pairs[: config.eval.dev_sentences]

    def __call__(self, params, step: int) -> dict[str, Any] | None:
        if not self.pairs:
            return None
        totals: dict[str, float] = {}
        for batch in data.eval_batches(
            self.pairs,
            self.tokenizer,
            self.config.eval.batch_size,
            self.config.data.max_source_length,
            self.config.data.max_target_length,
        ):
            batch = {k: v for k, v in batch.items() if k != "index"}
            batch = global_batch(batch, self.replicated)
            sums = jax.device_get(self.eval_step(params, batch))
            for key, value in sums.items():
                totals[key] = totals.get(key, 0.0) + float(value)
        summary = {k: float(v) for k, v in summarize(totals).items()}
        record = {
            "split": "dev",
            "loss": summary["loss"],
            "nll": summary["nll"],
            "accuracy": summary["accuracy"],
        }
        record.update(self.bleu(params, step))
        return record

    def bleu(self, params, step: int) -> dict[str, Any]:
        """Dev BLEU with the evaluation decoder, if this build has one."""
        if not self.config.eval.bleu_during_training:
            return {}
        try:
            from jaxtrans.inference import dev_bleu
        except ImportError:
            return {}
        return dev_bleu(self.model_config, params, self.tokenizer, self.pairs, self.config.eval)
