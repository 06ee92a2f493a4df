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

How the loop is run is the caller's (``run``): one while_loop to the end by default, or
in stages (staged_search.py: fewer rows, a wider cache), with the same tokens either way.
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
    give one, the same decoder over fewer of its rows (None: the rows stay):

        narrow(cache, rows [n] int32) -> the Decoder of rows[0], ..., rows[n - 1] of the
        current rows, with their part of ``cache``
    """

    step: StepFn
    cache: Cache
    narrow: "Narrow | None" = None


Narrow = Callable[[Cache, jnp.ndarray], Decoder]


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


class Rows(NamedTuple):
    """The rows a loop runs: sentences[r] is row r's sentence, limits[r] its length limit."""

    sentences: jnp.ndarray
    limits: jnp.ndarray

    def take(self, keep: jnp.ndarray) -> "Rows":
        return Rows(self.sentences[keep], self.limits[keep])


# A loop's state: (step i, tokens [rows, max_len], last tokens [rows], done [rows], cache).
LoopState = tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray, jnp.ndarray, Cache]


class TokenLoop(NamedTuple):
    """The token search's loop: ``choose`` picks each row's token from its allowed logits
    after the ``processors``, ``forced`` [batch, max_len] (or None) overrides it where not PAD."""

    choose: Callable
    forced: jnp.ndarray | None
    ids: tuple[int, int, int]
    max_len: int
    processors: tuple[Processor, ...] = ()

    def run(self, rows_left: int, step_fn, state, rows: Rows, until: int | None = None):
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


# run(loop, step_fn, state, rows) -> tokens [batch, max_len], each row's at its sentence's
# place: how the loop's steps are run (staged_search.staged_run; None: one loop to the end).
Run = Callable[[TokenLoop, StepFn, LoopState, Rows], jnp.ndarray]


def _token_search(
    step_fn, cache, max_lengths, max_len, choose, ids, prefix, run: Run | None, processors
):
    """One token a row a step: ``choose(processed allowed_logits [rows, vocab], i, sentences
    [rows]) -> [rows]``, or the prefix's token where it forces one."""
    batch = max_lengths.shape[0]
    pad_id = ids[2]
    forced = forced_tokens(prefix, max_len, pad_id)
    loop = TokenLoop(choose, forced, ids, max_len, tuple(processors))
    # The running rows: row r decodes sentence sentences[r].
    rows = Rows(jnp.arange(batch, dtype=jnp.int32), jnp.minimum(max_lengths, max_len))
    state = (
        jnp.array(0, jnp.int32),
        jnp.full((batch, max_len), pad_id, jnp.int32),
        jnp.full((batch,), ids[0], jnp.int32),
        rows.limits <= 0,
        cache,
    )
    if run is not None:
        return run(loop, step_fn, state, rows)
    return loop.run(0, step_fn, state, rows)[1]


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
    run: Run | None = None,
    processors: Sequence[Processor] = (),
) -> jnp.ndarray:
    """The most probable next token at every step, after the forced ``prefix`` if given.

    max_lengths [batch]: tokens each row may produce (EOS included, the prefix too); 0
    marks a dummy row. max_len: static length of the output buffer. prefix [batch,
    prefix_len]: forced tokens, PAD after each row's end. run: how the loop runs (Run;
    None: one while_loop). processors: logits processors (logits_processors.py) run on
    each step's logits, PAD and BOS at -inf, before the argmax. Returns tokens
    [batch, max_len] int32.
    """
    ids = (bos_id, eos_id, pad_id)
    return _token_search(
        step_fn, cache, max_lengths, max_len, _most_probable, ids, prefix, run, processors
    )


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
    run: Run | None = None,
    processors: Sequence[Processor] = (),
) -> jnp.ndarray:
    """A token drawn at every step from ``sampling_logits`` (never PAD or BOS), in
    greedy_search's loop; temperature 0 is greedy search exactly.

    keys [batch]: a PRNG key per row (``row_keys``); step i draws with fold_in(key, i), so
    the same keys and inputs give the same tokens. prefix, run: as for greedy_search (the
    draws start after the prefix; a row keeps its key, by its sentence, in any stage).
    processors: logits processors (logits_processors.py) run on each step's logits before
    the temperature, top_k and top_p (and before the argmax of temperature 0).
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
    return _token_search(step_fn, cache, max_lengths, max_len, choose, ids, prefix, run, processors)
