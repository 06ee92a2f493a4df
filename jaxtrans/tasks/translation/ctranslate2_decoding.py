"""CTranslate2's ``translate_batch`` set to search as jaxtrans does (jaxtrans.inference.search),
so that a CTranslate2 model (``--format ctranslate2``, or a Marian export converted by
ct2-transformers-converter) gives jaxtrans's translations token for token:

    settings = search_options(SearchOptions(penalty_form="hf"), max_length=n + 50)
    translator.translate_batch([pieces], **settings)  # n: the source's ids, </s> included

    beam_size            1 is greedy search (the most probable token), as here
    length_penalty       alpha: CTranslate2 divides a finished hypothesis' log-probability
                         by length ** length_penalty, jaxtrans's penalty_form "hf"; it has
                         no ((5 + length) / 6) ** alpha ("gnmt", refused unless alpha is 0)
    return_end_token     True: the length it divides by counts </s>, as jaxtrans counts it
                         (translate_tokens drops the token itself)
    max_decoding_length  the source's ids (</s> included) + max_extra_length, </s> included:
                         jaxtrans's limit, which is one per sentence (translate_tokens
                         translates sentences of one limit together)
    min_decoding_length  0: a translation may end at once (CTranslate2's default is 1)
    patience             max_length when alpha > 0: CTranslate2 then searches to the limit,
                         while jaxtrans stops once no live hypothesis can beat its finished
                         ones; both keep, of every step's K best candidates, those ending in
                         </s>, so the best they return is the same. With its default 1 it
                         stops after K finished hypotheses and may miss a later, better one
                         (faster; docs/benchmarks.md counts how often). With alpha 0 it stops
                         when the best candidate ends, which is exact.
    repetition_penalty,  the options' (1.0 and 0: none), as jaxtrans's logits processors
    no_repeat_ngram_size (inference/logits_processors.py) in greedy search: both run them
                         on the logits there, given the tokens so far. In beam search
                         CTranslate2 runs them on the logits before its log_softmax,
                         renormalising what they leave, where jaxtrans (as transformers)
                         runs them on the log_softmax: refused with beam_size > 1
    disable_unk False, sampling_topk 1: its defaults, written out: jaxtrans has neither
"""

from collections.abc import Sequence
from typing import Any

from jaxtrans.data.reserved_pieces import EOS_PIECE
from jaxtrans.errors import UserError
from jaxtrans.inference.options import SearchOptions


def search_options(
    options: SearchOptions, max_length: int, patience: float | None = None
) -> dict[str, Any]:
    """The translate_batch keyword arguments of one search (see the module doc) with
    ``options``' beam size, length penalty and logits processors (checked first); patience
    None: the exact search (max_length when alpha > 0), else CTranslate2's own."""
    options.check()
    processors = options.repetition_penalty != 1.0 or options.no_repeat_ngram_size
    if options.beam_size > 1 and processors:
        raise UserError(
            "repetition_penalty / no_repeat_ngram_size with beam_size > 1: CTranslate2 "
            "renormalises the processed logits, jaxtrans does not; compare greedy search"
        )
    alpha = float(options.alpha)
    if options.penalty_form == "gnmt" and alpha and options.beam_size > 1:
        raise UserError(
            f"penalty_form='gnmt' with alpha={alpha}: CTranslate2 divides by length ** alpha "
            "only; decode with penalty_form='hf' (eval.penalty_form=hf) or alpha=0"
        )
    if patience is None:
        patience = float(max_length) if alpha else 1.0
    return {
        "beam_size": int(options.beam_size),
        "length_penalty": alpha,
        "patience": float(patience),
        "return_end_token": True,
        "max_decoding_length": int(max_length),
        "min_decoding_length": 0,
        "repetition_penalty": float(options.repetition_penalty),
        "no_repeat_ngram_size": int(options.no_repeat_ngram_size),
        "disable_unk": False,
        "sampling_topk": 1,
        "max_input_length": 0,
    }


def _without_end(tokens: list[str], end: str) -> list[str]:
    return tokens[:-1] if tokens and tokens[-1] == end else tokens


def translate_tokens(
    translator,
    sources: Sequence[Sequence[str]],
    options: SearchOptions,
    *,
    sources_end_with_eos: bool = False,
    position_limit: int | None = None,
    patience: float | None = None,
    end_token: str = EOS_PIECE,
    repetition_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0,
) -> list[list[str]]:
    """Translate source token lists with a ``ctranslate2.Translator`` as jaxtrans would
    with ``options`` (beam size, length penalty, max_extra_length, batch_size, logits
    processors): the best hypothesis of each, ``end_token`` dropped, in the input order.

    sources_end_with_eos: False for a --format ctranslate2 model (pieces as SentencePiece
    cuts them; the model appends </s>), True for a Marian model (MarianTokenizer's tokens,
    </s> included). position_limit: a model whose position table ends (learned positions,
    a Marian export's max_position_embeddings) caps every limit there."""
    extra = options.max_extra_length
    limits = [len(s) + (not sources_end_with_eos) + extra for s in sources]
    if position_limit is not None:
        limits = [min(limit, position_limit) for limit in limits]
    results: list[list[str]] = [[] for _ in sources]
    for limit in sorted(set(limits)):
        chosen = [i for i, n in enumerate(limits) if n == limit]
        settings = search_options(options, limit, patience)
        for start in range(0, len(chosen), options.batch_size):
            rows = chosen[start : start + options.batch_size]
            batch = [list(sources[i]) for i in rows]
            for i, result in zip(rows, translator.translate_batch(batch, **settings), strict=True):
                results[i] = _without_end(result.hypotheses[0], end_token)
    return results
