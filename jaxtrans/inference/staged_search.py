"""Runs a search's loop in the stages a DecodePlan gives (decode_plan.py): from a first
cache of plan.slots tokens widened to max_len, and, for greedy search and sampling, on
fewer rows as rows finish. The same tokens as one loop over every row from a cache of
max_len slots; only the work is cut differently (search.py's ``run``, beam_search.py's).

Narrowing, given the Decoder's ``narrow`` and stages (row counts, decreasing): the loop
stops when at most stages[0] rows still run; the running rows move first, ``narrow(cache,
rows)`` gives the Decoder of those rows (step function, cache, and its own narrow), and
the search goes on with stages[0] rows until at most stages[1] run, and so on; each row's
tokens go back to its sentence's place at the end.

Widening, given ``widen(cache, slots)`` (the same cache with room for ``slots`` tokens,
nn.attention.widen_cache): the first loop also stops at step plan.slots (its cache full),
the cache is widened to max_len and the search goes on, narrowed first if at most
stages[0] rows still run by then (one lax.cond: XLA pads the cache only on the way that
takes it). Beam search widens alike and never narrows (``beam_run``).
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxtrans.inference.decode_plan import DecodePlan
from jaxtrans.inference.search import Cache, LoopState, Narrow, Rows, Run, TokenLoop

# widen(cache, slots) -> the cache with room for ``slots`` tokens, what it holds kept.
Widen = Callable[[Cache, int], Cache]
# beam_search's run(running, step, state) -> the final state; state["i"] is the step and
# state["cache"] the cache (None: one lax.while_loop(running, step, state)).
BeamRun = Callable[[Callable, Callable, dict], dict]


def staged_run(plan: DecodePlan, narrow: Narrow | None, widen: Widen | None) -> Run | None:
    """greedy_search's and sample_search's ``run`` for ``plan`` (None where it is one loop):
    narrowed by ``narrow`` to plan.stages rows (none without it), from a cache of
    plan.slots tokens widened by ``widen`` (max_len slots from the start without it)."""
    stages = plan.stages if narrow is not None else ()
    slots = plan.slots if widen is not None else plan.max_len
    if not stages and slots >= plan.max_len:
        return None

    def run(loop: TokenLoop, step_fn, state: LoopState, rows: Rows) -> jnp.ndarray:
        batch = rows.sentences.shape[0]
        previous = (batch, *stages)[: len(stages)]
        if any(b >= a for a, b in zip(previous, stages, strict=True)) or min(stages, default=1) < 1:
            raise ValueError(
                f"stages {stages} must decrease from the {batch} rows and stay above 0"
            )
        output = jnp.full((batch, loop.max_len), loop.ids[2], jnp.int32)
        if slots >= loop.max_len:
            return _stages(loop, step_fn, state, rows, narrow, stages, output)
        return _widened_stages(loop, step_fn, state, rows, narrow, stages, slots, widen, output)

    return run


def _widened_stages(loop, step_fn, state, rows, narrow, stages, slots, widen, output):
    """The search from a cache of ``slots`` tokens: the first loop stops there at the
    latest, then the cache widens to max_len, before or after narrowing."""
    state = loop.run(stages[0] if stages else 0, step_fn, state, rows, until=slots)

    def widened(state):  # inside the branch that takes it: XLA pads only where it runs
        i, tokens, last, done, cache = state
        return i, tokens, last, done, widen(cache, loop.max_len)

    if not stages:
        return _stages(loop, step_fn, widened(state), rows, None, (), output)

    def narrowed_then_widened(state):
        output_now = output.at[rows.sentences].set(state[1])
        return _narrowed(loop, step_fn, state, rows, narrow, stages, output_now, widen)

    def widened_then_narrowed(state):
        return _stages(loop, step_fn, widened(state), rows, narrow, stages, output)

    done = state[3]
    few_run = jnp.sum(~done) <= stages[0]
    return jax.lax.cond(few_run, narrowed_then_widened, widened_then_narrowed, state)


def _stages(loop: TokenLoop, step_fn, state, rows: Rows, narrow, stages, output) -> jnp.ndarray:
    """Steps while more than stages[0] rows run, narrows to those, and so on to the end;
    the output with every row's tokens at its sentence's place."""
    state = loop.run(stages[0] if stages else 0, step_fn, state, rows)
    output = output.at[rows.sentences].set(state[1])
    if not stages:
        return output
    return _narrowed(loop, step_fn, state, rows, narrow, stages, output)


def _narrowed(loop, step_fn, state, rows, narrow, stages, output, widen=None):
    """The rest of the search from ``state``, where at most stages[0] rows run: those
    first, narrowed to stages[0] rows (their cache widened to max_len by ``widen``)."""
    i, tokens, last, done, cache = state
    keep = jnp.argsort(done, stable=True)[: stages[0]].astype(jnp.int32)  # running first
    step_fn, cache, narrow = narrow(cache, keep)
    if widen is not None:
        cache = widen(cache, loop.max_len)
    state = (i, tokens[keep], last[keep], done[keep], cache)
    return _stages(loop, step_fn, state, rows.take(keep), narrow, stages[1:], output)


def beam_run(plan: DecodePlan, widen: Widen | None) -> BeamRun | None:
    """beam_search's ``run`` for ``plan`` (None where it is one loop): a loop to step
    plan.slots at the latest, the cache widened to max_len by ``widen``, a loop on."""
    if widen is None or plan.slots >= plan.max_len:
        return None

    def run(running, step, state: dict) -> dict:
        state = jax.lax.while_loop(lambda s: running(s) & (s["i"] < plan.slots), step, state)
        state = {**state, "cache": widen(state["cache"], plan.max_len)}
        return jax.lax.while_loop(running, step, state)

    return run
