"""SQuAD exact match and F1, as the official evaluation scripts compute them.

Answers are compared after the official normalisation: lower case, ASCII punctuation
removed, the articles a/an/the removed, whitespace collapsed. Exact match is 1 when the
normalised strings are equal; F1 is the harmonic mean of precision and recall of the
normalised words as bags. A question scores the maximum over its gold answers.
Unanswerable questions (SQuAD 2.0) have the one gold answer "" (the empty prediction
scores 1, any other 0), and the v2.0 breakdown reports answerable (``HasAns_*``) and
unanswerable (``NoAns_*``) questions apart, as ``evaluate-v2.0.py`` does. (For SQuAD 1.1
data the numbers equal ``evaluate-v1.1.py``'s: its gold answers are never empty.)

Scores here are fractions in [0, 1]; the official scripts print them times 100.

``cjk_characters=True`` makes every CJK ideograph a word of its own and removes Unicode
punctuation as well, so that Chinese answers (written without spaces) are scored by
character overlap, as the CMRC and DRCD evaluations do (CMRC 2018 itself takes the longest
common substring rather than the bag of characters). Text without CJK characters or
non-ASCII punctuation scores as with the official normalisation.
"""

import collections
import re
import string
import unicodedata
from collections.abc import Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_ASCII_PUNCTUATION = frozenset(string.punctuation)


def _is_cjk(char: str) -> bool:
    cp = ord(char)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _is_punctuation(char: str, cjk_characters: bool) -> bool:
    if char in _ASCII_PUNCTUATION:
        return True
    return cjk_characters and unicodedata.category(char).startswith("P")


def normalize_answer(text: str, cjk_characters: bool = False) -> str:
    """The official normalisation: lower case, no punctuation, no articles, single spaces
    (with ``cjk_characters``: Unicode punctuation too, a space around each CJK ideograph)."""
    text = "".join(c for c in text.lower() if not _is_punctuation(c, cjk_characters))
    if cjk_characters:
        text = "".join(f" {c} " if _is_cjk(c) else c for c in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_tokens(text: str, cjk_characters: bool = False) -> list[str]:
    return normalize_answer(text, cjk_characters).split() if text else []


def exact_match(gold: str, prediction: str, cjk_characters: bool = False) -> float:
    return float(
        normalize_answer(gold, cjk_characters) == normalize_answer(prediction, cjk_characters)
    )


def f1_score(gold: str, prediction: str, cjk_characters: bool = False) -> float:
    """Bag-of-words F1 of the normalised answers; 1 when both are empty, 0 when one is."""
    gold_tokens = answer_tokens(gold, cjk_characters)
    predicted_tokens = answer_tokens(prediction, cjk_characters)
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    common = collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(predicted_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def question_scores(
    golds: Sequence[str], prediction: str, cjk_characters: bool = False
) -> tuple[float, float]:
    """(exact match, F1) of one question: the maximum over its gold answers. Gold answers
    that normalise to nothing are dropped; with none left the gold answer is ""."""
    golds = [g for g in golds if normalize_answer(g, cjk_characters)] or [""]
    return (
        max(exact_match(g, prediction, cjk_characters) for g in golds),
        max(f1_score(g, prediction, cjk_characters) for g in golds),
    )


def squad_scores(
    golds: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    cjk_characters: bool = False,
    breakdown: bool | None = None,
) -> dict[str, float]:
    """Scores of ``predictions`` (question id -> answer text, "" for no answer) against
    ``golds`` (question id -> its gold answer texts, [] when unanswerable).

    Returns ``exact_match``, ``f1`` and ``total`` over all questions and, with
    ``breakdown`` (SQuAD 2.0; None: when some question is unanswerable), the same over the
    answerable and the unanswerable questions apart where there are any: ``HasAns_exact``,
    ``HasAns_f1``, ``HasAns_total``, ``NoAns_exact``, ``NoAns_f1``, ``NoAns_total``.
    Raises KeyError for a question with no prediction."""
    exact: dict[str, float] = {}
    f1: dict[str, float] = {}
    for qid, answers in golds.items():
        exact[qid], f1[qid] = question_scores(answers, predictions[qid], cjk_characters)

    def means(prefix: str, ids: list[str]) -> dict[str, float]:
        n = max(len(ids), 1)
        return {
            f"{prefix}exact" if prefix else "exact_match": sum(exact[i] for i in ids) / n,
            f"{prefix}f1": sum(f1[i] for i in ids) / n,
            f"{prefix}total": len(ids),
        }

    scores = means("", list(golds))
    has_answer = [qid for qid, answers in golds.items() if answers]
    no_answer = [qid for qid, answers in golds.items() if not answers]
    if breakdown or (breakdown is None and no_answer):
        for prefix, ids in (("HasAns_", has_answer), ("NoAns_", no_answer)):
            if ids:
                scores.update(means(prefix, ids))
    return scores
