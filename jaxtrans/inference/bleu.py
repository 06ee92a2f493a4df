"""Corpus BLEU and chrF with sacreBLEU, so scores compare with published ones.

BLEU needs a tokenizer suited to the target language: sacreBLEU's default "13a" for
languages written with spaces, "zh" (one token per Chinese character) for Chinese.
The sacreBLEU signature strings say exactly how a score was computed.
"""

import dataclasses
from collections.abc import Sequence

from sacrebleu.metrics import BLEU, CHRF

from jaxtrans.errors import UserError

# Share of Han characters among non-space characters above which text counts as Chinese.
_CJK_SHARE = 0.3


def _is_han(char: str) -> bool:
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF  # CJK Unified Ideographs
        or 0x3400 <= code <= 0x4DBF  # Extension A
        or 0xF900 <= code <= 0xFAFF  # Compatibility Ideographs
        or 0x20000 <= code <= 0x2FA1F  # Extensions B.. and supplement
    )


def looks_chinese(texts: Sequence[str]) -> bool:
    """True when most of the text is written in Han characters."""
    chars = [c for text in texts for c in text if not c.isspace()]
    return bool(chars) and sum(map(_is_han, chars)) / len(chars) > _CJK_SHARE


def bleu_tokenizer(target_lang: str | None, references: Sequence[str]) -> str:
    """sacreBLEU tokenizer for the target: "zh" for Chinese, else "13a".

    target_lang is a language code ("zh", "zh-CN", "de", ...); None detects Chinese
    from the references.
    """
    if target_lang is None:
        return "zh" if looks_chinese(references) else "13a"
    return "zh" if target_lang.lower().split("-")[0].split("_")[0] == "zh" else "13a"


@dataclasses.dataclass(frozen=True)
class CorpusScores:
    """Corpus-level scores (0..100) and how they were computed."""

    bleu: float
    chrf: float
    # sacreBLEU signatures, e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0".
    bleu_signature: str
    chrf_signature: str
    # sacreBLEU's one-line BLEU summary: n-gram precisions, brevity penalty, lengths.
    bleu_details: str
    tokenize: str


def corpus_scores(
    hypotheses: Sequence[str], references: Sequence[str], target_lang: str | None = None
) -> CorpusScores:
    """BLEU and chrF of hypotheses against one reference each."""
    if len(hypotheses) != len(references):
        raise UserError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; "
            "give one reference per hypothesis"
        )
    tokenize = bleu_tokenizer(target_lang, references)
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
    bleu_score = bleu.corpus_score(list(hypotheses), [list(references)])
    chrf_score = chrf.corpus_score(list(hypotheses), [list(references)])
    return CorpusScores(
        bleu=bleu_score.score,
        chrf=chrf_score.score,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        bleu_details=str(bleu_score),
        tokenize=tokenize,
    )
