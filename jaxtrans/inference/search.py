"""Greedy search and sampling over any incremental step function, inside one
jax.lax.while_loop (beam search, over the same step functions: beam_search.py).

The search knows nothing of the model. It calls

    step_fn(cache, tokens [rows], position) -> (logits [rows, vocab] float32, cache)

once per generated position: ``tokens`` are the previous step's outputs (BOS first),
``position`` (a scalar) is their position id, and ``cache`` is any pytree whose
array leaves have a leading ``rows`` axis (scalar leaves, such as a cache index, are
shared by all rows). Rows are ``batch`` for greedy search and sampling and ``batch * beam_size``
for beam search, beam-minor (row ``b * beam_size + k``, see ``beam_search.tile_beams``).

The searches never emit PAD or BOS (neither is ever a target), stop a row at EOS or at
its own maximum length, and return tokens [.., max_len] with PAD after the end: nothing
follows EOS.

A forced target prefix (``prefix`` [batch, prefix_len], PAD after each row's end) makes
step i emit prefix[:, i] wherever it is not PAD: the output starts with the prefix and
the search goes on from the cache the steps built over it.

Logits processors (``processors``, logits_processors.py) change each step's logits, given
the tokens so far (the prefix's included), before the token is chosen.

Greedy search and sampling may also drop finished rows as they go. Given ``narrow`` and
``stages`` (row counts, decreasing), the loop stops when at most stages[0] rows still run;
the running rows move first, ``narrow(cache, rows)`` gives the Decoder of those rows (step
function, cache, and its own narrow), and the search goes on with stages[0] rows until at
most stages[1] run, and so on; each row's tokens go back to its sentence's place at the
end. A step's cost grows with its rows, and a batch's sentences end at different steps:
the last stage decodes the longest sentences alone.

And they may start from a cache of fewer slots than the output's max_len. Given
``widen`` and ``slots``, the first loop also stops at step ``slots`` (its cache full),
``widen(cache, max_len)`` gives the same cache with room for max_len tokens, and the
search goes on as above, narrowed first if at most stages[0] rows still run by then. A
step attends to every slot of its cache, filled or not, and most sentences end long
before max_len.
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxtrans.inference.logits_processors import Processor, processed
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

Cache = Any
StepFn = Callable[[Cache, jnp.ndarray, jnp.ndarray], tuple[jnp.ndarray, Cache]]


class Decoder(NamedTuple):
    """What a search runs: the step function, its starting cache and, where the model can
    give one, the narrowing of both to fewer rows (None: the rows stay):

        narrow(cache, rows [n] int32) -> the Decoder of rows[0], ..., rows[n - 1] of the
        current rows, with their part of ``cache``
    """

    step: StepFn
    cache: Cache
    narrow: "Narrow | None" = None


Narrow = Callable[[Cache, jnp.ndarray], Decoder]
# widen(cache, slots) -> the cache with room for ``slots`` tokens, what it holds kept.
Widen = Callable[[Cache, int], Cache]


def allowed_logits(logits: jnp.ndarray, pad_id: int, bos_id: int) -> jnp.ndarray:
    """PAD and BOS are never targets: padding is not a token (emitting it would make the
    output disagree with the teacher-forced model, whose padding mask hides PAD keys) and
    BOS only starts the decoder (a Marian model's BOS row copies its pad row)."""
    return logits.astype(jnp.float32).at[..., pad_id].set(-jnp.inf).at[..., bos_id].set(-jnp.inf)


def argmax(x: jnp.ndarray) -> jnp.ndarray:
    """``jnp.argmax`` over the last axis (the first maximum; the first NaN if any), int32.

    XLA's CPU compiler runs argmax's (value, index) reduction as a scalar loop, 3x
    slower over an 8k-token row than these two vectorised ones: the maximum, then the
    first index holding it.
    """
    best = jnp.max(x, axis=-1, keepdims=True)
    hit = (x == best) | (jnp.isnan(x) & jnp.isnan(best))
    index = jnp.arange(x.shape[-1], dtype=jnp.int32)
    return jnp.min(jnp.where(hit, index, x.shape[-1]), axis=-1)


def forced_tokens(prefix: jnp.ndarray | None, max_len: int, pad_id: int) -> jnp.ndarray | None:
    """prefix [batch, prefix_len] (PAD after each row's end) -> [batch, max_len]: the token
    step i must emit, PAD where the search chooses; None for no prefix."""
    if prefix is None:
        return None
    prefix = jnp.asarray(prefix, jnp.int32)[:, :max_len]
    return jnp.pad(prefix, ((0, 0), (0, max_len - prefix.shape[1])), constant_values=pad_id)


def _most_probable(logits: jnp.ndarray, step: jnp.ndarray, rows: jnp.ndarray) -> jnp.ndarray:
    """greedy_search's choice: the first most probable token of each row."""
    return argmax(logits)


def _token_search(
    step_fn, cache, max_lengths, max_len, choose, ids, prefix, narrow, stages, widen, slots,
    processors=(),
):  # fmt: skip
    """One token a row a step: ``choose(allowed_logits [rows, vocab], i, sentences [rows])
    -> [rows]``, or the prefix's token where it forces one; narrowed to each of ``stages``
    rows in turn and widened from ``slots`` to max_len (see the module's docstring) where
    ``narrow`` and ``widen`` are given. The ``processors`` run on the logits before ``choose``."""
    batch = max_lengths.shape[0]
    pad_id = ids[2]
    stages = tuple(stages) if narrow is not None else ()
    previous = (batch, *stages)[: len(stages)]
    if any(b >= a for a, b in zip(previous, stages, strict=True)) or any(n < 1 for n in stages):
        raise ValueError(f"stages {stages} must decrease from the {batch} rows and stay above 0")
    if widen is None or slots is None or slots >= max_len:
        widen, slots = None, max_len
    loop = _Loop(choose, forced_tokens(prefix, max_len, pad_id), ids, max_len, tuple(processors))
    # The running rows: row r decodes sentence sentences[r].
    rows = _Rows(jnp.arange(batch, dtype=jnp.int32), jnp.minimum(max_lengths, max_len))
    state = (
        jnp.array(0, jnp.int32),
        jnp.full((batch, max_len), pad_id, jnp.int32),
        jnp.full((batch,), ids[0], jnp.int32),
        rows.limits <= 0,
        cache,
    )
    output = jnp.full((batch, max_len), pad_id, jnp.int32)
    if widen is None:
        return loop.stages(step_fn, state, rows, narrow, stages, output)
    # The first loop's cache holds ``slots`` tokens: it stops there at the latest.
    state = loop.run(stages[0] if stages else 0, step_fn, state, rows, until=slots)

    def widened(state):  # inside the branch that takes it: XLA pads only where it runs
        i, tokens, last, done, cache = state
        return i, tokens, last, done, widen(cache, max_len)

    if not stages:
        return loop.stages(step_fn, widened(state), rows, None, (), output)

    def narrowed_then_widened(state):
        output_now = output.at[rows.sentences].set(state[1])
        return loop.narrowed(step_fn, state, rows, narrow, stages, output_now, widen)

    def widened_then_narrowed(state):
        return loop.stages(step_fn, widened(state), rows, narrow, stages, output)

    done = state[3]
    few_run = jnp.sum(~done) <= stages[0]
    return jax.lax.cond(few_run, narrowed_then_widened, widened_then_narrowed, state)


class _Rows(NamedTuple):
    """The rows a loop runs: sentences[r] is row r's sentence, limits[r] its length limit."""

    sentences: jnp.ndarray
    limits: jnp.ndarray

    def take(self, keep: jnp.ndarray) -> "_Rows":
        return _Rows(self.sentences[keep], self.limits[keep])


class _Loop(NamedTuple):
    """_token_search's loops: ``run`` steps one stage, ``stages`` runs them all."""

    choose: Callable
    forced: jnp.ndarray | None
    ids: tuple[int, int, int]
    max_len: int
    processors: tuple[Processor, ...] = ()

    def stages(self, step_fn, state, rows: _Rows, narrow, stages, output) -> jnp.ndarray:
        """Steps while more than stages[0] rows run, narrows to those, and so on to the
        end; the output with every row's tokens at its sentence's place."""
        state = self.run(stages[0] if stages else 0, step_fn, state, rows)
        output = output.at[rows.sentences].set(state[1])
        if not stages:
            return output
        return self.narrowed(step_fn, state, rows, narrow, stages, output)

    def narrowed(self, step_fn, state, rows, narrow, stages, output, widen=None):
        """The rest of the search from ``state``, where at most stages[0] rows run: those
        first, narrowed to stages[0] rows (their cache widened to max_len by ``widen``)."""
        i, tokens, last, done, cache = state
        keep = jnp.argsort(done, stable=True)[: stages[0]].astype(jnp.int32)  # running first
        step_fn, cache, narrow = narrow(cache, keep)
        if widen is not None:
            cache = widen(cache, self.max_len)
        state = (i, tokens[keep], last[keep], done[keep], cache)
        return self.stages(step_fn, state, rows.take(keep), narrow, stages[1:], output)

    def run(self, rows_left: int, step_fn, state, rows: _Rows, until: int | None = None):
        """Steps while more than ``rows_left`` rows run, up to step ``until`` (max_len)."""
        bos_id, eos_id, pad_id = self.ids
        until = self.max_len if until is None else until
        forced = None if self.forced is None else self.forced[rows.sentences]

        def running(state):
            i, _, _, done, _ = state
            return (i < until) & (jnp.sum(~done) > rows_left)

        def step(state):
            i, tokens, last, done, cache = state
            logits, cache = step_fn(cache, last, i)
            scores = processed(self.processors, allowed_logits(logits, pad_id, bos_id), tokens, i)
            token = self.choose(scores, i, rows.sentences)
            if forced is not None:
                token = jnp.where(forced[:, i] != pad_id, forced[:, i], token)
            token = jnp.where(done, pad_id, token)
            tokens = tokens.at[:, i].set(token)
            done = done | (token == eos_id) | (i + 1 >= rows.limits)
            return i + 1, tokens, token, done, cache

        return jax.lax.while_loop(running, step, state)


def greedy_search(
    step_fn: StepFn,
    cache: Cache,
    max_lengths: jnp.ndarray,
    max_len: int,
    *,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    prefix: jnp.ndarray | None = None,
    narrow: Narrow | None = None,
    stages: Sequence[int] = (),
    widen: Widen | None = None,
    slots: int | None = None,
    processors: Sequence[Processor] = (),
) -> jnp.ndarray:
    """The most probable next token at every step, after the forced ``prefix`` if given.

    max_lengths [batch]: tokens each row may produce (EOS included, the prefix too); 0
    marks a dummy row. max_len: static length of the output buffer. prefix [batch,
    prefix_len]: forced tokens, PAD after each row's end. narrow, stages: finished rows
    dropped; widen, slots: a starting cache of ``slots`` tokens widened to max_len (the
    module's docstring; the same tokens either way). processors: logits processors
    (logits_processors.py) run on each step's logits, PAD and BOS at -inf, before the argmax.
    Returns tokens [batch, max_len] int32.
    """
    ids = (bos_id, eos_id, pad_id)
    return _token_search(
        step_fn, cache, max_lengths, max_len, _most_probable, ids, prefix, narrow, stages,
        widen, slots, processors,
    )  # fmt: skip


def sampling_logits(
    logits: jnp.ndarray,
    temperature: float | jnp.ndarray = 1.0,
    top_k: int | jnp.ndarray = 0,
    top_p: float | jnp.ndarray = 1.0,
) -> jnp.ndarray:
    """The logits [.., vocab] that sampling draws from, -inf outside the kept set, in Hugging
    Face's and fairseq's order: logits / temperature (> 0); then the top_k most probable
    (0: all; tokens tied with the k-th stay); then, renormalised, the smallest set of most
    probable tokens whose cumulative probability reaches top_p (1.0: all; at least one).
    The settings may be traced: one compiled search serves them all."""
    logits = logits.astype(jnp.float32) / jnp.asarray(temperature, jnp.float32)
    vocab = logits.shape[-1]
    descending = -jnp.sort(-logits, axis=-1)
    k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
    kth = jnp.take_along_axis(descending, jnp.broadcast_to(k - 1, logits.shape[:-1])[..., None], -1)
    logits = jnp.where(logits < kth, -jnp.inf, logits)
    descending = jnp.where(jnp.arange(vocab) < k, descending, -jnp.inf)
    probs = jax.nn.softmax(descending, axis=-1)
    # Keep a token while the tokens more probable than it hold less than top_p.
    before = jnp.cumsum(probs, axis=-1) - probs
    kept = (before < top_p) | (jnp.arange(vocab) == 0)
    lowest = jnp.min(jnp.where(kept, descending, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits < lowest, -jnp.inf, logits)


def row_keys(seed: int | jnp.ndarray, rows: jnp.ndarray) -> jnp.ndarray:
    """One PRNG key per row, folded from ``seed`` by the row's number ``rows`` [batch] (a
    sentence's index: its samples do not depend on the batch it lands in)."""
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(jax.random.key(seed), rows)


def sample_search(
    step_fn: StepFn,
    cache: Cache,
    max_lengths: jnp.ndarray,
    max_len: int,
    keys: jnp.ndarray,
    *,
    temperature: float | jnp.ndarray = 1.0,
    top_k: int | jnp.ndarray = 0,
    top_p: float | jnp.ndarray = 1.0,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    prefix: jnp.ndarray | None = None,
    narrow: Narrow | None = None,
    stages: Sequence[int] = (),
    widen: Widen | None = None,
    slots: int | None = None,
    processors: Sequence[Processor] = (),
) -> jnp.ndarray:
    """A token drawn at every step from ``sampling_logits`` (never PAD or BOS), in
    greedy_search's loop; temperature 0 is greedy search exactly.

    keys [batch]: a PRNG key per row (``row_keys``); step i draws with fold_in(key, i), so
    the same keys and inputs give the same tokens. prefix, narrow, stages, widen, slots: as for
    greedy_search (the draws start after the prefix; a row keeps its key when rows are
    dropped). processors: logits processors (logits_processors.py) run on each step's
    logits before the temperature, top_k and top_p (and before the argmax of temperature 0).
    Returns tokens [batch, max_len] int32.
    """
    temperature = jnp.asarray(temperature, jnp.float32)
    greedy = temperature <= 0

    def choose(logits, i, sentences):
        kept = sampling_logits(logits, jnp.where(greedy, 1.0, temperature), top_k, top_p)
        step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys[sentences], i)
        drawn = jax.vmap(jax.random.categorical)(step_keys, kept).astype(jnp.int32)
        return jnp.where(greedy, argmax(logits), drawn)

    ids = (bos_id, eos_id, pad_id)
    return _token_search(
        step_fn, cache, max_lengths, max_len, choose, ids, prefix, narrow, stages, widen, slots,
        processors,
    )  # fmt: skip
