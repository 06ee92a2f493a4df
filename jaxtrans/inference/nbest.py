"""N-best lists: the N best finished hypotheses of beam search for each sentence, with
their scores.

    sentences -> length_batches -> beam_decode (with summed log-probabilities)
              -> [batch, beam_size] finished hypotheses, best first -> the first N of each

A hypothesis' ``logprob`` sums, over its tokens (EOS included, a forced prefix's too), the
model's log_softmax over the tokens decoding may emit (all but PAD and BOS); its ``score``
is what beam search ranks by, logprob / length_penalty(its length). A list is sorted by
score, best first, and holds N distinct hypotheses, or fewer where the beam finished
fewer; its first is the hypothesis translate() returns with the same settings.
"""

import dataclasses
import json
from collections.abc import Sequence

import jax
import numpy as np

from jaxtrans.errors import UserError
from jaxtrans.inference.decoding import beam_decode
from jaxtrans.inference.ensemble import ModelConfig
from jaxtrans.inference.length_buckets import LengthBatch, decoded_batches, length_batches
from jaxtrans.inference.options import DEFAULT_OPTIONS, SearchOptions
from jaxtrans.inference.translate import (
    TranslationTokenizer,
    check_prefixes,
    decoding_params,
    hypothesis_ids,
    target_prefixes,
)
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID


@dataclasses.dataclass(frozen=True)
class ScoredIds:
    """One hypothesis as target ids (EOS and PAD removed), with its scores."""

    ids: list[int]
    # logprob / length_penalty(length, EOS included): what beam search ranks by.
    score: float
    # The summed log-probability of its tokens, EOS included.
    logprob: float


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    """One hypothesis as text, with its scores (as ScoredIds')."""

    text: str
    score: float
    logprob: float


def check_nbest(nbest: int, beam_size: int) -> None:
    """UserError unless 1 <= nbest <= beam_size (the list is drawn from the beam)."""
    if isinstance(nbest, bool) or not float(nbest).is_integer() or nbest < 1:
        raise UserError(f"nbest={nbest}: must be a whole number >= 1 (0: no n-best list)")
    if nbest > beam_size:
        raise UserError(
            f"nbest={nbest} with beam_size={beam_size}: the list is drawn from the beam; "
            f"give beam_size >= {nbest}"
        )


def _scored(tokens, scores, logprobs, nbest: int, eos_id: int, pad_id: int) -> list[ScoredIds]:
    """The first nbest finite entries of one sentence's finished tokens [K, max_len],
    scores [K] and logprobs [K] (NumPy, best first; -inf marks an empty slot)."""
    return [
        ScoredIds(hypothesis_ids(row, eos_id, pad_id), float(score), float(logprob))
        for row, score, logprob in zip(tokens, scores, logprobs, strict=True)
        if np.isfinite(score)
    ][:nbest]


def nbest_ids(
    config: ModelConfig,
    params,
    sources: Sequence[Sequence[int]],
    nbest: int,
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> list[list[ScoredIds]]:
    """Source id lists (EOS included) -> the nbest best hypotheses of each, best first.

    ``options`` as translate_ids' (beam search only, its sampling settings unused;
    beam_size >= nbest, beam_size 1 being beam search with one beam, which is greedy
    search); prefixes: forced target ids, one list a sentence, carried by every beam and
    counted in the scores.
    """
    options.check()
    check_nbest(nbest, options.beam_size)
    check_prefixes(prefixes, len(sources), (pad_id, bos_id, eos_id))
    config, params = decoding_params(config, params)
    lists: list[list[ScoredIds]] = [[] for _ in sources]
    batches = length_batches(
        config,
        sources,
        prefixes,
        batch_size=options.batch_size,
        max_extra_length=options.max_extra_length,
        length_multiple=options.length_multiple,
        pad_id=pad_id,
    )
    decoder_options = options.for_decoder()

    def decode(batch: LengthBatch) -> tuple[jax.Array, jax.Array, jax.Array]:
        return beam_decode(
            params,
            batch.source,
            batch.max_lengths,
            decoder_options,
            config=config,
            max_len=batch.max_len,
            bos_id=bos_id,
            eos_id=eos_id,
            pad_id=pad_id,
            prefix=batch.prefix,
            return_logprobs=True,
        )

    for batch, (tokens, scores, logprobs) in decoded_batches(batches, decode):
        for row, i in enumerate(batch.indices):
            lists[i] = _scored(tokens[row], scores[row], logprobs[row], nbest, eos_id, pad_id)
    return lists


def translate_nbest(
    config: ModelConfig,
    params,
    tokenizer: TranslationTokenizer,
    sentences: Sequence[str],
    nbest: int,
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    prefix: str | Sequence[str] | None = None,
) -> list[list[Hypothesis]]:
    """Source sentences -> the nbest best translations of each, best first, in the input
    order; tokenised, decoded (``options``, nbest_ids) and prefixed as by translate()."""
    sources = [[*tokenizer.encode_source(s), EOS_ID] for s in sentences]
    lists = nbest_ids(
        config,
        params,
        sources,
        nbest,
        options,
        prefixes=target_prefixes(tokenizer, prefix, len(sentences)),
    )
    return [
        [Hypothesis(tokenizer.decode_target(h.ids), h.score, h.logprob) for h in hypotheses]
        for hypotheses in lists
    ]


def nbest_json(source: str, hypotheses: Sequence[Hypothesis]) -> str:
    """One JSON line: {"source": ..., "hypotheses": [{"text": ..., "score": ...,
    "logprob": ...}, ...]}, best first."""
    listed = [dataclasses.asdict(h) for h in hypotheses]
    return json.dumps({"source": source, "hypotheses": listed}, ensure_ascii=False)
