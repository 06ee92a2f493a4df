"""Greedy search, sampling and beam search over any incremental step function, inside one
jax.lax.while_loop.

The search knows nothing of the model. It calls

    step_fn(cache, tokens [rows], position) -> (logits [rows, vocab] float32, cache)

once per generated position: ``tokens`` are the previous step's outputs (BOS first),
``position`` (a scalar) is their position id, and ``cache`` is any pytree whose
array leaves have a leading ``rows`` axis (scalar leaves, such as a cache index, are
shared by all rows). Rows are ``batch`` for greedy search and sampling and ``batch * beam_size``
for beam search, beam-minor (row ``b * beam_size + k``, see ``tile_beams``).

The searches never emit PAD or BOS (neither is ever a target), stop a row at EOS or at
its own maximum length, and return tokens [.., max_len] with PAD after the end: nothing
follows EOS.

A forced target prefix (``prefix`` [batch, prefix_len], PAD after each row's end) makes
step i emit prefix[:, i] wherever it is not PAD: the output starts with the prefix and
the search goes on from the cache the steps built over it. Beam search keeps every beam
on the prefix and counts the prefix tokens' log-probabilities in the score.
"""

from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp

from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

Cache = Any
StepFn = Callable[[Cache, jnp.ndarray, jnp.ndarray], tuple[jnp.ndarray, Cache]]
# How beam search normalises a finished hypothesis' log-probability by its length.
PenaltyForm = Literal["gnmt", "hf"]
PENALTY_FORMS = ("gnmt", "hf")


def _allowed_logits(logits: jnp.ndarray, pad_id: int, bos_id: int) -> jnp.ndarray:
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


def _most_probable(logits: jnp.ndarray, step: jnp.ndarray) -> jnp.ndarray:
    """greedy_search's choice: the first most probable token of each row."""
    return argmax(logits)


def _token_search(step_fn, cache, max_lengths, max_len, choose, bos_id, eos_id, pad_id, prefix):
    """One token a row a step: ``choose(allowed_logits [batch, vocab], i) -> [batch]``, or
    the prefix's token where it forces one."""
    batch = max_lengths.shape[0]
    max_lengths = jnp.minimum(max_lengths, max_len)
    forced = forced_tokens(prefix, max_len, pad_id)

    def running(state):
        i, _, _, done, _ = state
        return (i < max_len) & ~jnp.all(done)

    def step(state):
        i, tokens, last, done, cache = state
        logits, cache = step_fn(cache, last, i)
        token = choose(_allowed_logits(logits, pad_id, bos_id), i)
        if forced is not None:
            token = jnp.where(forced[:, i] != pad_id, forced[:, i], token)
        token = jnp.where(done, pad_id, token)
        tokens = tokens.at[:, i].set(token)
        done = done | (token == eos_id) | (i + 1 >= max_lengths)
        return i + 1, tokens, token, done, cache

    state = (
        jnp.array(0, jnp.int32),
        jnp.full((batch, max_len), pad_id, jnp.int32),
        jnp.full((batch,), bos_id, jnp.int32),
        max_lengths <= 0,
        cache,
    )
    return jax.lax.while_loop(running, step, state)[1]


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
) -> jnp.ndarray:
    """The most probable next token at every step, after the forced ``prefix`` if given.

    max_lengths [batch]: tokens each row may produce (EOS included, the prefix too); 0
    marks a dummy row. max_len: static length of the output buffer. prefix [batch,
    prefix_len]: forced tokens, PAD after each row's end. Returns tokens [batch, max_len]
    int32.
    """
    return _token_search(
        step_fn, cache, max_lengths, max_len, _most_probable, bos_id, eos_id, pad_id, prefix
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
) -> jnp.ndarray:
    """A token drawn at every step from ``sampling_logits`` (never PAD or BOS), in
    greedy_search's loop; temperature 0 is greedy search exactly.

    keys [batch]: a PRNG key per row (``row_keys``); step i draws with fold_in(key, i), so
    the same keys and inputs give the same tokens. prefix: forced tokens, as for
    greedy_search (the draws start after it). Returns tokens [batch, max_len] int32.
    """
    temperature = jnp.asarray(temperature, jnp.float32)
    greedy = temperature <= 0

    def choose(logits, i):
        kept = sampling_logits(logits, jnp.where(greedy, 1.0, temperature), top_k, top_p)
        step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, i)
        drawn = jax.vmap(jax.random.categorical)(step_keys, kept).astype(jnp.int32)
        return jnp.where(greedy, argmax(logits), drawn)

    return _token_search(
        step_fn, cache, max_lengths, max_len, choose, bos_id, eos_id, pad_id, prefix
    )


def length_penalty(
    length: jnp.ndarray, alpha: float | jnp.ndarray, form: PenaltyForm = "gnmt"
) -> jnp.ndarray:
    """The divisor of a finished hypothesis' log-probability; length counts its tokens,
    EOS included, BOS not.

    "gnmt": ((5 + length) / 6) ** alpha (Wu et al. 2016, the Transformer paper's search);
    "hf": length ** alpha (Hugging Face's ``length_penalty=alpha``, which divides by the
    generated length without the decoder start token).
    """
    length = jnp.asarray(length, jnp.float32)
    if form == "hf":
        return length**alpha
    if form != "gnmt":
        raise ValueError(f"length penalty form {form!r} is not one of {PENALTY_FORMS}")
    return ((5.0 + length) / 6.0) ** alpha


def top_k(x: jnp.ndarray, k: int) -> tuple[jnp.ndarray, jnp.ndarray]:
    """``jax.lax.top_k`` behind an optimization barrier.

    XLA's CPU compiler turns a top-k into its fast kernel only while the results are used
    whole; slicing them further (as beam search does) makes it a full sort of the row,
    about 100x slower over a 32k-candidate row. The barrier keeps the results whole.
    """
    return jax.lax.optimization_barrier(jax.lax.top_k(x, k))


def tile_beams(tree: Cache, beam_size: int) -> Cache:
    """Repeat every row beam_size times: leaves [batch, ...] -> [batch * beam_size, ...]."""
    return jax.tree.map(lambda x: x if x.ndim == 0 else jnp.repeat(x, beam_size, axis=0), tree)


def gather_beams(tree: Cache, beams: jnp.ndarray) -> Cache:
    """Row b * K + k of the result is row b * K + beams[b, k] of the input.

    tree leaves [batch * K, ...], beams [batch, K] -> leaves [batch * K, ...].
    """
    batch, beam_size = beams.shape
    rows = (jnp.arange(batch)[:, None] * beam_size + beams).reshape(-1)
    return jax.tree.map(lambda x: x if x.ndim == 0 else jnp.take(x, rows, axis=0), tree)


def _extend(tokens: jnp.ndarray, beams: jnp.ndarray, new: jnp.ndarray, i: jnp.ndarray):
    """tokens [batch, K, max_len] of the parent beams [batch, K], with new [batch, K] at i."""
    parents = jnp.take_along_axis(tokens, beams[:, :, None], axis=1)
    return parents.at[:, :, i].set(new)


def _best(scores: jnp.ndarray, tokens: jnp.ndarray, logprobs: jnp.ndarray, k: int):
    """The k best of scores [batch, n], best first, with their tokens [batch, n, max_len]
    and log-probabilities [batch, n]."""
    scores, index = top_k(scores, k)
    tokens = jnp.take_along_axis(tokens, index[:, :, None], axis=1)
    return scores, tokens, jnp.take_along_axis(logprobs, index, axis=1)


def _only_forced(logprobs: jnp.ndarray, forced: jnp.ndarray, pad_id: int) -> jnp.ndarray:
    """logprobs [batch, K, vocab] with every token but forced [batch] at -inf in the rows
    that force one (forced != PAD): the beams follow the prefix, and the forced token keeps
    its own log-probability, so the prefix counts in the score."""
    other = jnp.arange(logprobs.shape[-1]) != forced[:, None, None]
    return jnp.where((forced != pad_id)[:, None, None] & other, -jnp.inf, logprobs)


def beam_search(
    step_fn: StepFn,
    cache: Cache,
    max_lengths: jnp.ndarray,
    max_len: int,
    beam_size: int,
    alpha: float | jnp.ndarray,
    *,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    penalty_form: PenaltyForm = "gnmt",
    prefix: jnp.ndarray | None = None,
    return_logprobs: bool = False,
) -> tuple[jnp.ndarray, ...]:
    """Beam search with the length penalty ((5 + len) / 6) ** alpha, or len ** alpha with
    ``penalty_form="hf"`` (alpha >= 0; see ``length_penalty``).

    cache: rows [batch * beam_size] (``tile_beams``); max_lengths [batch] as for
    greedy_search. A hypothesis' log-probability sums, over its steps, log_softmax over
    the tokens that may be emitted (all but PAD and BOS). Each step extends the K live
    hypotheses by every token; of the K * vocab candidates, those among the K most
    probable that end in EOS are finished (scored logprob / length_penalty(length)),
    and the K most probable that do not stay live (the cache is gathered to follow
    them). At a row's maximum length every candidate among the K best is finished. A
    row stops when no live hypothesis can still beat the worst of its K finished ones.

    This is Hugging Face's beam search with ``early_stopping="never"`` (for alpha > 0;
    any setting for alpha = 0) and, with penalty_form="hf", ``length_penalty=alpha``, when
    every row has the same max_lengths (``max_new_tokens``) and the model gives PAD
    (there: blocked by ``bad_words_ids``, but still in its log_softmax) no probability.

    prefix [batch, prefix_len] (PAD after each row's end; one per sentence, not per beam):
    tokens every beam of the row must start with. Only the forced token extends a beam
    while the row forces one, with its own log-probability: a prefixed hypothesis scores
    log p(prefix and continuation) / length_penalty(its whole length), as an unforced
    search would score the same tokens. (CTranslate2's target_prefix instead leaves the
    prefix's log-probabilities out.)

    Returns finished tokens [batch, beam_size, max_len] and their scores
    [batch, beam_size], best first (-inf marks an empty slot); with return_logprobs also
    their summed log-probabilities [batch, beam_size] (score * length_penalty(length)).
    """
    batch, k = max_lengths.shape[0], beam_size
    max_lengths = jnp.minimum(max_lengths, max_len)
    best_possible_penalty = length_penalty(max_lengths, alpha, penalty_form)
    forced = forced_tokens(prefix, max_len, pad_id)

    def running(state):
        return (state["i"] < max_len) & ~jnp.all(state["done"])

    def step(state):
        i, live_tokens = state["i"], state["live_tokens"]
        logits, cache = step_fn(state["cache"], state["last"].reshape(-1), i)
        logprobs = jax.nn.log_softmax(_allowed_logits(logits, pad_id, bos_id))
        vocab = logprobs.shape[-1]
        logprobs = logprobs.reshape(batch, k, vocab)
        if forced is not None:
            logprobs = _only_forced(logprobs, forced[:, i], pad_id)
        candidates = state["live_logprobs"][:, :, None] + logprobs
        candidates = candidates.reshape(batch, k * vocab)
        at_limit = (i + 1 >= max_lengths)[:, None]

        # One top-k serves both sets: each live hypothesis has a single EOS extension, so
        # at most K of the 2K most probable candidates end in EOS and at least K do not.
        top_logprobs, top = top_k(candidates, 2 * k)
        top_tokens = top % vocab

        # Finish the candidates among the K most probable that end in EOS (all of them
        # at the length limit); a beam of one thus stops exactly where greedy does.
        ends = (top_tokens[:, :k] == eos_id) | at_limit
        penalty = length_penalty(i + 1, alpha, penalty_form)
        new_logprobs = jnp.where(ends, top_logprobs[:, :k], -jnp.inf)
        new_tokens = _extend(live_tokens, top[:, :k] // vocab, top_tokens[:, :k], i)
        finished_scores, finished_tokens, finished_logprobs = _best(
            jnp.concatenate([state["finished_scores"], new_logprobs / penalty], axis=1),
            jnp.concatenate([state["finished_tokens"], new_tokens], axis=1),
            jnp.concatenate([state["finished_logprobs"], new_logprobs], axis=1),
            k,
        )

        # Keep the K most probable candidates that do not end in EOS alive.
        live_logprobs, kept = top_k(jnp.where(top_tokens == eos_id, -jnp.inf, top_logprobs), k)
        live = jnp.take_along_axis(top, kept, axis=1)
        last = (live % vocab).astype(jnp.int32)
        live_tokens = _extend(live_tokens, live // vocab, last, i)
        cache = gather_beams(cache, live // vocab)

        # Log-probabilities only fall as hypotheses grow and the penalty is largest at
        # the row's limit, so live_logprob / penalty(limit) bounds every later score.
        hopeless = finished_scores[:, -1] > live_logprobs[:, 0] / best_possible_penalty
        # Rows that were already done keep what they had.
        was_done = state["done"][:, None]
        return {
            "i": i + 1,
            "done": state["done"] | at_limit[:, 0] | hopeless,
            "live_tokens": live_tokens,
            "live_logprobs": live_logprobs,
            "last": last,
            "finished_tokens": jnp.where(
                was_done[:, :, None], state["finished_tokens"], finished_tokens
            ),
            "finished_scores": jnp.where(was_done, state["finished_scores"], finished_scores),
            "finished_logprobs": jnp.where(was_done, state["finished_logprobs"], finished_logprobs),
            "cache": cache,
        }

    pads = jnp.full((batch, k, max_len), pad_id, jnp.int32)
    # Only the first beam is alive at the start, else K copies of BOS would fill the beam.
    first_alive = jnp.where(jnp.arange(k) == 0, 0.0, -jnp.inf).astype(jnp.float32)
    state = {
        "i": jnp.array(0, jnp.int32),
        "done": max_lengths <= 0,
        "live_tokens": pads,
        "live_logprobs": jnp.broadcast_to(first_alive, (batch, k)),
        "last": jnp.full((batch, k), bos_id, jnp.int32),
        "finished_tokens": pads,
        "finished_scores": jnp.full((batch, k), -jnp.inf),
        "finished_logprobs": jnp.full((batch, k), -jnp.inf),
        "cache": cache,
    }
    state = jax.lax.while_loop(running, step, state)
    if return_logprobs:
        return state["finished_tokens"], state["finished_scores"], state["finished_logprobs"]
    return state["finished_tokens"], state["finished_scores"]
