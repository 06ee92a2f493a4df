"""Translation's answers to user input: evaluate.py --input and Translator.translate.

    lines -> sources and forced prefixes -> translate, or translate_nbest for nbest N
          -> one translation a line, or one JSON object a line (inference.nbest.nbest_json):
             {"source": ..., "hypotheses": [{"text": ..., "score": ..., "logprob": ...}, ...]}

A forced prefix is one text for every line (--prefix TEXT) or each line's own: with
--prefix_from_input a line is SOURCE<TAB>PREFIX (SOURCE<TAB> for none).
"""

from collections.abc import Sequence
from typing import Any

from jaxtrans.errors import UserError
from jaxtrans.inference.nbest import Hypothesis, nbest_json, translate_nbest
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.translate import translate
from jaxtrans.models import TransformerConfig
from jaxtrans.tasks.translation.decoding_settings import Decoding


def split_prefixes(
    lines: Sequence[str], prefix: str | None, from_input: bool
) -> tuple[list[str], str | list[str] | None]:
    """(sources, prefix) of the input lines: the lines and ``prefix`` (None: none), or with
    ``from_input`` each line's text before and after its one TAB."""
    if not from_input:
        return list(lines), prefix
    if prefix is not None:
        raise UserError("give either --prefix TEXT or --prefix_from_input, not both")
    sources, prefixes = [], []
    for number, line in enumerate(lines, 1):
        parts = line.split("\t")
        if len(parts) != 2:
            raise UserError(
                f"input line {number} has {len(parts) - 1} TABs; with --prefix_from_input "
                "each line is SOURCE<TAB>PREFIX (SOURCE<TAB> for no prefix)"
            )
        sources.append(parts[0])
        prefixes.append(parts[1])
    return sources, prefixes


def translate_with(
    model_config: TransformerConfig,
    params,
    tokenizer,
    sentences: Sequence[str],
    options: SearchOptions,
    nbest: int = 0,
    prefix: str | Sequence[str] | None = None,
) -> list[str] | list[list[Hypothesis]]:
    """The translation of each sentence decoded as ``options`` say (decoding_settings),
    each starting with its ``prefix`` (one text for all, or one a sentence); for nbest N,
    its n-best list instead (inference.nbest: text, score, logprob)."""
    if not nbest:
        return translate(model_config, params, tokenizer, list(sentences), options, prefix=prefix)
    return translate_nbest(
        model_config, params, tokenizer, list(sentences), nbest, options, prefix=prefix
    )


def answer_lines(
    model_config: TransformerConfig,
    params,
    tokenizer,
    lines: Sequence[str],
    decoding: Decoding,
    given: dict[str, Any] | None = None,
) -> list[str]:
    """evaluate.py --input's answer to each line: its translation, or for ``decoding``'s
    nbest N its n-best list as one JSON object. ``given``: evaluate.py's flag values,
    whose prefix (a text) or prefix_from_input (SOURCE<TAB>PREFIX lines) force how the
    translations start."""
    given = given or {}
    sources, prefixes = split_prefixes(
        lines, given.get("prefix"), bool(given.get("prefix_from_input"))
    )
    model = (model_config, params, tokenizer)
    answers = translate_with(*model, sources, decoding.options, decoding.nbest, prefixes)
    if not decoding.nbest:
        return answers
    return [nbest_json(source, listed) for source, listed in zip(sources, answers, strict=True)]
