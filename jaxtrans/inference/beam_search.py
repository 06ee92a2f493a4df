"""Beam search over any incremental step function, inside one jax.lax.while_loop.

The step function and its cache are those of greedy search (search.py): step_fn(cache,
tokens [rows], position) -> (logits [rows, vocab] float32, cache), here over rows
``batch * beam_size``, beam-minor (row ``b * beam_size + k``, see ``tile_beams``). Each
step keeps the K most probable live hypotheses of a row and the K best finished ones,
and reorders the cache to follow the live ones. A forced target prefix keeps every beam
on the prefix and counts the prefix tokens' log-probabilities in the score.
"""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from jaxtrans.inference.logits_processors import Processor, processed
from jaxtrans.inference.options import PENALTY_FORMS, PenaltyForm
from jaxtrans.inference.search import Cache, StepFn, allowed_logits, forced_tokens
from jaxtrans.inference.top_tokens import log_softmax_top_k, top_k
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID


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


def tile_beams(tree: Cache, beam_size: int) -> Cache:
    """Repeat every row beam_size times: leaves [batch, ...] -> [batch * beam_size, ...]."""
    return jax.tree.map(lambda x: x if x.ndim == 0 else jnp.repeat(x, beam_size, axis=0), tree)


def beam_rows(beams: jnp.ndarray) -> jnp.ndarray:
    """beams [batch, K] (each a beam of its row) -> rows [batch * K]: b * K + beams[b, k]."""
    batch, beam_size = beams.shape
    return (jnp.arange(batch)[:, None] * beam_size + beams).reshape(-1)


def gather_rows(tree: Cache, rows: jnp.ndarray) -> Cache:
    """Every leaf's row r is its row rows[r]: leaves [rows, ...]; scalars stay."""
    return jax.tree.map(lambda x: x if x.ndim == 0 else jnp.take(x, rows, axis=0), tree)


def _top_candidates(
    live_logprobs: jnp.ndarray,
    beam_logprobs: jnp.ndarray,
    beam_tokens: jnp.ndarray,
    vocab: int,
    n: int,
):
    """The n most probable extensions of the live hypotheses: their summed
    log-probabilities [batch, n], best first, and their indices [batch, n] into the
    flattened [K * vocab] candidates (beam * vocab + token).

    live_logprobs [batch, K]; beam_logprobs, beam_tokens [batch, K, m >= min(n, vocab)]:
    each beam's m most probable tokens, best first (the lower token first among equals).
    No beam holds more than n of the n best sums and top_k takes the lower index first
    among equals, so this is the top_k of all K * vocab sums, ties and all, without
    writing them.
    """
    batch, k, m = beam_logprobs.shape
    sums = (live_logprobs[:, :, None] + beam_logprobs).reshape(batch, k * m)
    top_logprobs, index = top_k(sums, n)
    token = jnp.take_along_axis(beam_tokens.reshape(batch, k * m), index, axis=1)
    return top_logprobs, (index // m) * vocab + token


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


def _only_forced(logits: jnp.ndarray, forced: jnp.ndarray, pad_id: int) -> jnp.ndarray:
    """logits [rows, vocab] with every token but forced [rows] at -inf in the rows that
    force one (forced != PAD): the beams follow the prefix."""
    other = jnp.arange(logits.shape[-1]) != forced[:, None]
    return jnp.where((forced != pad_id)[:, None] & other, -jnp.inf, logits)


def _processed_top_k(
    processors: Sequence[Processor],
    logits: jnp.ndarray,
    tokens: jnp.ndarray,
    i: jnp.ndarray,
    n: int,
    forced: jnp.ndarray | None,
    pad_id: int,
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """log_softmax_top_k's n best of each row, taken from log_softmax(logits [rows, vocab])
    after the processors (tokens [rows, max_len]: each row's hypothesis so far), as
    transformers' beam search takes them: not renormalised. A row that forces a token
    (forced [rows], not PAD) keeps its log-probability unprocessed."""
    logprobs = jax.nn.log_softmax(logits, axis=-1)
    scores = processed(processors, logprobs, tokens, i)
    if forced is not None:
        scores = _only_forced(
            jnp.where((forced != pad_id)[:, None], logprobs, scores), forced, pad_id
        )
    values, chosen = top_k(scores, n)
    return values, chosen.astype(jnp.int32)


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
    reorder: Callable[[Cache, jnp.ndarray], Cache] = gather_rows,
    run: Callable[[Callable, Callable, dict], dict] | None = None,
    processors: Sequence[Processor] = (),
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

    reorder(cache, rows [batch * beam_size]) -> the cache of those rows, to follow the
    live hypotheses (default: every leaf gathered whole; a model that knows which parts
    of its cache hold something may move only those, as nn.attention.reorder_cache does).

    run(running, step, state) -> the final state: how the loop runs (state["i"] the step,
    state["cache"] the cache; staged_search.beam_run; None: one lax.while_loop).

    processors: logits processors (logits_processors.py) run, every step, on each live
    hypothesis' log_softmax given its tokens so far, before its log-probability is added,
    as transformers' beam search runs them; a hypothesis then sums the processed values
    (its "log-probability" below). They never raise a value above 0, so the stopping
    rule stays exact.

    Returns finished tokens [batch, beam_size, max_len] and their scores
    [batch, beam_size], best first (-inf marks an empty slot); with return_logprobs also
    their summed log-probabilities [batch, beam_size] (score * length_penalty(length)).
    """
    batch, k = max_lengths.shape[0], beam_size
    max_lengths = jnp.minimum(max_lengths, max_len)
    best_possible_penalty = length_penalty(max_lengths, alpha, penalty_form)
    forced = forced_tokens(prefix, max_len, pad_id)
    forced_rows = None if forced is None else jnp.repeat(forced, k, axis=0)

    def running(state):
        return (state["i"] < max_len) & ~jnp.all(state["done"])

    def step(state):
        i, live_tokens = state["i"], state["live_tokens"]
        logits, cache = step_fn(state["cache"], state["last"].reshape(-1), i)
        logits = allowed_logits(logits, pad_id, bos_id)
        vocab = logits.shape[-1]
        # The prefix's token alone may extend a beam, with its own log-probability, so
        # the prefix counts in the score.
        forced_now = None if forced is None else forced_rows[:, i]
        if processors:
            beam_logprobs, beam_tokens = _processed_top_k(
                processors, logits, live_tokens.reshape(batch * k, -1), i, min(2 * k, vocab),
                forced_now, pad_id,
            )  # fmt: skip
        else:
            ranked = None if forced is None else _only_forced(logits, forced_now, pad_id)
            beam_logprobs, beam_tokens = log_softmax_top_k(logits, min(2 * k, vocab), ranked)
        at_limit = (i + 1 >= max_lengths)[:, None]

        # One top-k serves both sets: each live hypothesis has a single EOS extension, so
        # at most K of the 2K most probable candidates end in EOS and at least K do not.
        top_logprobs, top = _top_candidates(
            state["live_logprobs"],
            beam_logprobs.reshape(batch, k, -1),
            beam_tokens.reshape(batch, k, -1),
            vocab,
            2 * k,
        )
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
        cache = reorder(cache, beam_rows(live // vocab))

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
    state = (run or jax.lax.while_loop)(running, step, state)
    if return_logprobs:
        return state["finished_tokens"], state["finished_scores"], state["finished_logprobs"]
    return state["finished_tokens"], state["finished_scores"]
