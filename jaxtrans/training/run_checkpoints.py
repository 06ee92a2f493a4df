"""A run's checkpoints as the training loop writes and restores them: failed writes and
unreadable checkpoints become one-line errors that say how to resume."""

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections

from jaxtrans.errors import UserError, describe
from jaxtrans.training.state import TrainState
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta
from jaxtrans.workdirs.checkpoints import (
    Checkpointer,
    CheckpointNotWritten,
    CheckpointUnreadable,
    checkpoint_dir,
)


class RunCheckpoints:
    """The run's checkpointer; a failed write, or one that orbax calls done but that is not
    complete on disk (CheckpointNotWritten), becomes a one-line error that says how to
    resume. An async write fails late (at the next save or wait), so the failed step is the
    one named in the message."""

    def __init__(self, workdir: str, train_config: ml_collections.ConfigDict):
        self.workdir = workdir
        self.checkpointer = Checkpointer(
            workdir, keep=train_config.keep_checkpoints, async_save=train_config.async_checkpoints
        )

    def _failed(self, error: Exception) -> UserError:
        if isinstance(error, CheckpointNotWritten):
            latest = self.checkpointer.latest_step()
            resume = "start over" if latest is None else f"resume from checkpoint {latest}"
            return UserError(
                f"writing a checkpoint in {checkpoint_dir(self.workdir)} failed: {error}; "
                f"rerun the same command to {resume}, the newest complete one"
            )
        return UserError(
            f"writing a checkpoint in {checkpoint_dir(self.workdir)} failed "
            f"({describe(error)}); free space or fix permissions, then rerun the same command "
            "to resume from the last complete checkpoint"
        )

    def save(
        self, step: int, state: TrainState, meta: CheckpointMeta, best: int | None = None
    ) -> None:
        """Start writing checkpoint ``step`` with ``meta`` and the generator of the state's
        dropout key; ``best``: the step of the best checkpoint, kept beyond the newest
        train.keep_checkpoints (None: none)."""
        meta = dataclasses.replace(meta, dropout_rng_impl=state.rng_impl)
        try:
            self.checkpointer.save(step, state.params, state.opt_state, state.rng, meta, kept=best)
        except Exception as error:  # orbax reports disk trouble with many exception types
            raise self._failed(error) from error

    def wait(self) -> None:
        try:
            self.checkpointer.wait()
        except Exception as error:
            raise self._failed(error) from error


def restore_state(
    checkpointer: Checkpointer, step: int, abstract: TrainState, shardings: TrainState, workdir: str
) -> tuple[TrainState, CheckpointMeta]:
    """The train state of checkpoint ``step``, laid out by ``shardings``, and its metadata."""
    with_shardings = lambda tree, shardings: jax.tree.map(  # noqa: E731
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings
    )
    try:
        params, opt_state, rng, meta = checkpointer.restore(
            step,
            with_shardings(abstract.params, shardings.params),
            with_shardings(abstract.opt_state, shardings.opt_state),
            with_shardings(abstract.rng, shardings.rng),
        )
    except CheckpointUnreadable as error:
        older = [s for s in checkpointer.all_steps() if s < step]
        fallback = f"resume from checkpoint {older[-1]}" if older else "start over"
        raise UserError(
            f"checkpoint {step} in {workdir} cannot be restored, it is damaged or from "
            f"another model ({describe(error)}); "
            f"move {checkpoint_dir(workdir)}/{step} aside to {fallback}, or use a new "
            "--workdir"
        ) from error
    step_array = jax.device_put(jnp.asarray(step, jnp.int32), shardings.step)
    restored = TrainState(
        step=step_array, params=params, opt_state=opt_state, rng=rng, rng_impl=abstract.rng_impl
    )
    return restored, meta


def dropout_rng_impl(checkpointer: Checkpointer, wanted: str) -> tuple[str, str | None]:
    """The dropout generator of a run whose config asks for ``wanted``, and a note for the
    console if it is not that: the latest checkpoint's generator (threefry for a checkpoint
    older than the choice), so that a resumed run draws the masks it would have drawn
    uninterrupted; ``wanted`` for a new run, or where the checkpoint cannot be read
    (restoring it then says why)."""
    latest = checkpointer.latest_step()
    if latest is None:
        return wanted, None
    try:
        saved = checkpointer.restore_meta(latest).dropout_rng_impl
    except CheckpointUnreadable:
        return wanted, None
    if saved == wanted:
        return wanted, None
    return saved, (
        f"train.dropout_rng_impl={wanted}: checkpoint {latest} holds a dropout key of {saved}, "
        f"kept so that the run resumes exactly (a new --workdir starts with {wanted})"
    )
