"""SQuAD scores equal the official evaluate-v2.0.py's (its logic copied below as the
reference), and the answer span is the best one over all windows of an example."""

import collections
import random
import re
import string

import numpy as np
import pytest

from jaxtrans.inference.qa_spans import best_window_span, choose_span
from jaxtrans.inference.squad_metrics import f1_score, normalize_answer, squad_scores

# ------------------------------------------- the official SQuAD 2.0 evaluation script
# From https://rajpurkar.github.io/SQuAD-explorer/ (evaluate-v2.0.py), unchanged but for
# reading the dataset and predictions from arguments instead of files.


def official_normalize_answer(s):
    def remove_articles(text):
        regex = re.compile(r"\b(a|an|the)\b", re.UNICODE)
        return re.sub(regex, " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def official_get_tokens(s):
    if not s:
        return []
    return official_normalize_answer(s).split()


def official_compute_exact(a_gold, a_pred):
    return int(official_normalize_answer(a_gold) == official_normalize_answer(a_pred))


def official_compute_f1(a_gold, a_pred):
    gold_toks = official_get_tokens(a_gold)
    pred_toks = official_get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        # If either is no-answer, then F1 is 1 if they agree, 0 otherwise
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def official_get_raw_scores(dataset, preds):
    exact_scores = {}
    f1_scores = {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                qid = qa["id"]
                gold_answers = [
                    a["text"] for a in qa["answers"] if official_normalize_answer(a["text"])
                ]
                if not gold_answers:
                    # For unanswerable questions, only correct answer is empty string
                    gold_answers = [""]
                if qid not in preds:
                    print("Missing prediction for %s" % qid)  # noqa: UP031
                    continue
                a_pred = preds[qid]
                # Take max over all gold answers
                exact_scores[qid] = max(official_compute_exact(a, a_pred) for a in gold_answers)
                f1_scores[qid] = max(official_compute_f1(a, a_pred) for a in gold_answers)
    return exact_scores, f1_scores


def official_make_eval_dict(exact_scores, f1_scores, qid_list=None):
    if not qid_list:
        total = len(exact_scores)
        return collections.OrderedDict(
            [
                ("exact", 100.0 * sum(exact_scores.values()) / total),
                ("f1", 100.0 * sum(f1_scores.values()) / total),
                ("total", total),
            ]
        )
    else:
        total = len(qid_list)
        return collections.OrderedDict(
            [
                ("exact", 100.0 * sum(exact_scores[k] for k in qid_list) / total),
                ("f1", 100.0 * sum(f1_scores[k] for k in qid_list) / total),
                ("total", total),
            ]
        )


def official_merge_eval(main_eval, new_eval, prefix):
    for k in new_eval:
        main_eval["%s_%s" % (prefix, k)] = new_eval[k]  # noqa: UP031


def official_evaluate(dataset, preds):
    """main() without a no-answer probability file (every threshold keeps the scores)."""
    qid_to_has_ans = {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                qid_to_has_ans[qa["id"]] = bool(qa["answers"])
    has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
    no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
    exact_raw, f1_raw = official_get_raw_scores(dataset, preds)
    out_eval = official_make_eval_dict(exact_raw, f1_raw)
    if has_ans_qids:
        has_ans_eval = official_make_eval_dict(exact_raw, f1_raw, qid_list=has_ans_qids)
        official_merge_eval(out_eval, has_ans_eval, "HasAns")
    if no_ans_qids:
        no_ans_eval = official_make_eval_dict(exact_raw, f1_raw, qid_list=no_ans_qids)
        official_merge_eval(out_eval, no_ans_eval, "NoAns")
    return out_eval


# ------------------------------------------------------------------------- the tests

PHRASES = [
    "the Eiffel Tower", "Eiffel Tower", "in 1889", "1889", "A tower!", "an iron lattice",
    "Paris, France", "paris france", "the  city of   Paris", "Gustave Eiffel's company",
    "Theatre", "the the the", "(1889)", "  ", "...", "An Apple a day", "a", "Ångström",
    "over 300 metres", "300 m", "an", "Tower of the Eiffel",
]  # fmt: skip


def generated_dataset(seed: int):
    """Questions with 0-3 gold answers (0: unanswerable) and predictions that are copies,
    parts, other cases, other punctuation or other phrases of them, or empty."""
    rng = random.Random(seed)
    qas, predictions = [], {}
    for i in range(300):
        golds = rng.sample(PHRASES, rng.choice([0, 1, 1, 2, 3]))
        qas.append({"id": f"q{i}", "answers": [{"text": g, "answer_start": 0} for g in golds]})
        base = rng.choice(golds or PHRASES)
        words = base.split()
        kind = rng.randrange(6)
        if kind == 0:
            prediction = base
        elif kind == 1:
            prediction = " ".join(words[rng.randrange(len(words) or 1) :]) if words else base
        elif kind == 2:
            prediction = base.upper() + rng.choice(["", ".", " ,", "!?"])
        elif kind == 3:
            prediction = rng.choice(PHRASES)
        elif kind == 4:
            prediction = ""
        else:
            prediction = base + " " + rng.choice(PHRASES)
        predictions[f"q{i}"] = prediction
    return [{"paragraphs": [{"context": "", "qas": qas}]}], predictions


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scores_equal_the_official_squad2_script(seed):
    dataset, predictions = generated_dataset(seed)
    golds = {
        qa["id"]: [a["text"] for a in qa["answers"]] for qa in dataset[0]["paragraphs"][0]["qas"]
    }
    expected = official_evaluate(dataset, predictions)
    ours = squad_scores(golds, predictions)
    assert ours["exact_match"] * 100 == pytest.approx(expected["exact"], abs=1e-9)
    assert ours["f1"] * 100 == pytest.approx(expected["f1"], abs=1e-9)
    for prefix in ("HasAns", "NoAns"):
        assert ours[f"{prefix}_exact"] * 100 == pytest.approx(expected[f"{prefix}_exact"], abs=1e-9)
        assert ours[f"{prefix}_f1"] * 100 == pytest.approx(expected[f"{prefix}_f1"], abs=1e-9)
        assert ours[f"{prefix}_total"] == expected[f"{prefix}_total"]
    for a in PHRASES:
        assert normalize_answer(a) == official_normalize_answer(a)
        for b in PHRASES:
            assert f1_score(a, b) == pytest.approx(official_compute_f1(a, b), abs=1e-12)


def test_squad1_data_has_no_breakdown_unless_asked():
    golds = {"a": ["Paris"], "b": ["the Tower", "Eiffel Tower"]}
    scores = squad_scores(golds, {"a": "paris.", "b": "Eiffel"})
    assert scores == {"exact_match": 0.5, "f1": pytest.approx(0.5 + 0.5 * 2 / 3), "total": 2}
    assert squad_scores(golds, {"a": "Paris", "b": ""}, breakdown=True)["HasAns_total"] == 2


def test_chinese_answers_score_by_characters_when_asked():
    # Without spaces a Chinese answer is one word for the official normalisation.
    assert f1_score("北京大学", "北京") == 0.0
    assert f1_score("北京大学", "北京", cjk_characters=True) == pytest.approx(2 / 3)
    assert f1_score("在北京。", "北京", cjk_characters=True) == pytest.approx(0.8)
    assert squad_scores({"q": ["上海"]}, {"q": "上海，"}, cjk_characters=True)["exact_match"] == 1
    # Text without CJK characters or non-ASCII punctuation scores as before.
    for a in PHRASES:
        assert normalize_answer(a, cjk_characters=True) == official_normalize_answer(a)


# ------------------------------------------------------------------------ best spans


def brute_force_span(starts, ends, context, max_answer_length):
    best = (-1, -1, float("-inf"))
    for s in range(*context):
        for e in range(s, min(context[1], s + max_answer_length)):
            if starts[s] + ends[e] > best[2]:
                best = (s, e, starts[s] + ends[e])
    return best


def test_the_best_span_of_a_window_equals_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(200):
        length = int(rng.integers(4, 30))
        starts, ends = rng.normal(size=(2, length))
        first = int(rng.integers(1, length - 1))
        context = (first, int(rng.integers(first + 1, length + 1)))
        max_answer_length = int(rng.integers(1, 8))
        s, e, score = best_window_span(starts, ends, context, max_answer_length)
        bs, be, bscore = brute_force_span(starts, ends, context, max_answer_length)
        assert score == pytest.approx(bscore) and (s, e) == (bs, be)


def test_the_best_span_over_windows_is_found_in_the_second_window():
    """Window 0 has the best single start (9.0, but its best end is before it or outside
    the context); window 1 has the best valid pair. The no-answer score is the smallest
    [CLS] score over the windows."""
    neg = -5.0
    starts = [
        np.array([1.0, neg, neg, 9.0, neg, neg, neg, 3.0]),  # [CLS] q [SEP] ctx... [SEP]
        np.array([4.0, neg, neg, neg, 2.0, 6.0, neg, neg]),
    ]
    ends = [
        np.array([1.0, neg, 8.0, neg, neg, neg, neg, 9.0]),  # 8.0 before, 9.0 on [SEP]
        np.array([0.5, neg, neg, neg, neg, neg, 5.0, neg]),
    ]
    contexts = [(3, 7), (3, 7)]
    choice = choose_span(starts, ends, contexts, max_answer_length=30, allow_no_answer=True)
    assert (choice.window, choice.start, choice.end) == (1, 5, 6)
    assert choice.score == 11.0 and choice.null_score == 2.0 and not choice.no_answer
    # Spans are at most max_answer_length long: then (5, 6) is too long, (3, 3) wins.
    short = choose_span(starts, ends, contexts, max_answer_length=1, allow_no_answer=False)
    assert (short.window, short.start, short.end, short.score) == (0, 3, 3, 4.0)
    # No answer wins when its score beats the best span's by more than the threshold.
    null = [s.copy() for s in starts]
    null[0][0] = null[1][0] = 20.0
    assert choose_span(null, ends, contexts, max_answer_length=30, allow_no_answer=True).no_answer
    kept = choose_span(
        null, ends, contexts, max_answer_length=30, allow_no_answer=True,
        null_score_diff_threshold=11.0,
    )  # fmt: skip
    assert not kept.no_answer  # 20.5 - 11 > threshold? no: 9.5 < 11
    assert not choose_span(
        null, ends, contexts, max_answer_length=30, allow_no_answer=False
    ).no_answer
