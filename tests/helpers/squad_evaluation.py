"""The official SQuAD evaluation scripts' scoring, written out here as they compute it, so
that the question-answering tests check jaxtrans's scores against an implementation that
shares no code with it.

``evaluate_v2`` follows ``evaluate-v2.0.py`` (without a no-answer probability file): gold
answers that normalise to nothing are dropped, a question without any is scored against
"", and the totals are split into ``HasAns_*`` and ``NoAns_*``. ``evaluate_v1`` follows
``evaluate-v1.1.py``, whose questions all have answers. Both read the SQuAD JSON document
(``{"data": [{"paragraphs": [{"context", "qas": [{"id", "answers": [{"text"}]}]}]}]}``)
and return percentages, as the scripts print them.
"""

import collections
import re
import string


def normalize_answer(s: str) -> str:
    """Lower case, remove punctuation, articles and extra whitespace."""

    def remove_articles(text):
        return re.sub(re.compile(r"\b(a|an|the)\b", re.UNICODE), " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def questions(document: dict):
    for article in document["data"]:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


# ------------------------------------------------------------------- evaluate-v2.0.py


def get_tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def compute_exact(a_gold: str, a_pred: str) -> int:
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    gold_toks, pred_toks = get_tokens(a_gold), get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        # If either is no-answer, then F1 is 1 if they agree, 0 otherwise.
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def evaluate_v2(document: dict, preds: dict[str, str]) -> dict[str, float]:
    """``exact``, ``f1``, ``total`` and, where there are such questions, the same with
    ``HasAns_`` and ``NoAns_`` prefixes."""
    exact_scores, f1_scores, has_ans = {}, {}, {}
    for qa in questions(document):
        qid = qa["id"]
        has_ans[qid] = bool(qa["answers"])
        gold_answers = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
        if not gold_answers:
            # For unanswerable questions, the only correct answer is the empty string.
            gold_answers = [""]
        a_pred = preds[qid]
        exact_scores[qid] = max(compute_exact(a, a_pred) for a in gold_answers)
        f1_scores[qid] = max(compute_f1(a, a_pred) for a in gold_answers)

    def make_eval_dict(qid_list):
        total = len(qid_list)
        return {
            "exact": 100.0 * sum(exact_scores[k] for k in qid_list) / total,
            "f1": 100.0 * sum(f1_scores[k] for k in qid_list) / total,
            "total": total,
        }

    out = make_eval_dict(list(exact_scores))
    for prefix, ids in (
        ("HasAns", [k for k, v in has_ans.items() if v]),
        ("NoAns", [k for k, v in has_ans.items() if not v]),
    ):
        if ids:
            out.update({f"{prefix}_{k}": v for k, v in make_eval_dict(ids).items()})
    return out


# ------------------------------------------------------------------- evaluate-v1.1.py


def f1_score_v1(prediction: str, ground_truth: str) -> float:
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def exact_match_score_v1(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def evaluate_v1(document: dict, predictions: dict[str, str]) -> dict[str, float]:
    """``exact_match`` and ``f1`` over the document's questions (all with answers)."""
    f1 = exact_match = total = 0
    for qa in questions(document):
        total += 1
        ground_truths = [a["text"] for a in qa["answers"]]
        prediction = predictions[qa["id"]]
        exact_match += max(exact_match_score_v1(prediction, g) for g in ground_truths)
        f1 += max(f1_score_v1(prediction, g) for g in ground_truths)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}
