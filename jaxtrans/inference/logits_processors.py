"""Logits processors: functions that change a step's scores given the tokens so far, as
transformers' ``generate`` and CTranslate2's ``translate_batch`` have them.

    processor(scores [rows, vocab] float32, tokens [rows, max_len] int32, i) -> scores

``tokens`` holds each row's output so far at positions 0 .. i - 1 (a forced prefix's tokens
included; the decoder's start token is not an output); what lies at i and after (PAD, or
anything) is never read. The searches call the processors in order, every step:

    greedy search, sampling   on the logits (PAD and BOS at -inf), before the argmax or
                              the temperature, top_k and top_p of sampling
    beam search               on the log_softmax of the logits, before the hypotheses'
                              log-probabilities are added: a hypothesis' score sums the
                              processed values, which are not renormalised
    ensembles                 on the ensemble's scores (the log of the members' mean
                              probabilities), as on one model's logits

which is where transformers' ``generate`` runs them (``_sample``, ``_beam_search``), so
that ``MarianMTModel.generate(repetition_penalty=..., no_repeat_ngram_size=...)`` and
jaxtrans pick the same tokens. CTranslate2 runs them on the logits in every search,
before its log_softmax: the same tokens in greedy search, not in beam search (there the
processed logits are renormalised). Steps that force a prefix token pass their scores on
unprocessed: the prefix is the user's, and its tokens count as the output so far after.

Every processor here is traced into the search's program (static sizes, no Python loop
over rows); at the defaults there are none, and the program is the one without them.
"""

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from jaxtrans.inference.options import SearchOptions

Processor = Callable[[jnp.ndarray, jnp.ndarray, jnp.ndarray], jnp.ndarray]


def _marked(tokens: jnp.ndarray, keep: jnp.ndarray, vocab: int) -> jnp.ndarray:
    """[rows, vocab] bool: True at tokens[r, j] wherever keep[r, j] ([rows, m] each)."""
    rows = jnp.arange(tokens.shape[0])[:, None]
    # Tokens not kept go to a spare column past the vocabulary, dropped after.
    columns = jnp.where(keep, jnp.clip(tokens, 0, vocab), vocab)
    marks = jnp.zeros((tokens.shape[0], vocab + 1), bool).at[rows, columns].set(True)
    return marks[:, :vocab]


def repetition_penalty(
    scores: jnp.ndarray, tokens: jnp.ndarray, i: jnp.ndarray, *, penalty: float
) -> jnp.ndarray:
    """The score of every token already in a row's output, once however often it occurs,
    divided by ``penalty`` where it is positive and multiplied by it where it is negative
    (Keskar et al. 2019, CTRL; transformers' RepetitionPenaltyLogitsProcessor, CTranslate2's
    repetition_penalty): above 1 a repeat grows less likely, below 1 more.

    scores [rows, vocab] float32, tokens [rows, max_len] (positions < i read), i the step.
    """
    vocab = scores.shape[-1]
    seen = _marked(tokens, jnp.arange(tokens.shape[1]) < i, vocab)
    # Divided element by element, as transformers divides: XLA turns a division by a
    # scalar into a product with its reciprocal, which rounds differently (1 ulp).
    divisor = jax.lax.optimization_barrier(jnp.full(scores.shape, penalty, scores.dtype))
    penalised = jnp.where(scores < 0, scores * penalty, scores / divisor)
    return jnp.where(seen, penalised, scores)


def no_repeat_ngram(scores: jnp.ndarray, tokens: jnp.ndarray, i: jnp.ndarray, *, n: int):
    """-inf for every token that would complete an n-gram already in the row's output:
    the last n - 1 tokens (all of them for n = 1) are matched against every complete
    n-gram so far, and each match bans the n-gram's last token (transformers'
    NoRepeatNGramLogitsProcessor, fairseq's and CTranslate2's no_repeat_ngram_size). Before
    the output holds n tokens, nothing is banned.

    scores [rows, vocab] float32, tokens [rows, max_len] (positions < i read), i the step;
    n static. Every window of n positions is compared at once: [rows, max_len, n].
    """
    length = tokens.shape[1]
    if length < n:
        return scores
    windows = jnp.stack([tokens[:, o : length - n + 1 + o] for o in range(n)], axis=-1)
    # The last n - 1 tokens (positions i - n + 1 .. i - 1); when i < n no window is
    # complete, and the clamped slice is never compared.
    start = jnp.maximum(i - (n - 1), 0)
    suffix = jax.lax.dynamic_slice_in_dim(tokens, start, n - 1, axis=1)
    complete = jnp.arange(length - n + 1) + n <= i  # the window ends before position i
    matches = complete & jnp.all(windows[..., : n - 1] == suffix[:, None, :], axis=-1)
    banned = _marked(windows[..., n - 1], matches, scores.shape[-1])
    return jnp.where(banned, -jnp.inf, scores)


def logits_processors(options: SearchOptions) -> tuple[Processor, ...]:
    """The processors ``options`` asks for, in transformers' order (the repetition penalty,
    then the n-gram ban); empty at the defaults. The values are checked by
    SearchOptions.check."""
    processors: list[Processor] = []
    if options.repetition_penalty != 1.0:
        penalty = float(options.repetition_penalty)
        processors.append(functools.partial(repetition_penalty, penalty=penalty))
    if options.no_repeat_ngram_size > 0:
        processors.append(functools.partial(no_repeat_ngram, n=int(options.no_repeat_ngram_size)))
    return tuple(processors)


def processed(
    processors: Sequence[Processor], scores: jnp.ndarray, tokens: jnp.ndarray, i: jnp.ndarray
) -> jnp.ndarray:
    """scores [rows, vocab] after every processor in turn (none: scores themselves)."""
    for processor in processors:
        scores = processor(scores, tokens, i)
    return scores
