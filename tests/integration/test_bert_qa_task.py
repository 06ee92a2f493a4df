"""The question-answering task end to end: train.py on the demo corpus (tiny), evaluate.py
--workdir (exact match / F1 report and the predictions file) and --input, a SQuAD file
scored as the official evaluation scripts score it (tests/helpers/squad_evaluation.py), and
answers of a Hugging Face BertForQuestionAnswering directory equal to those computed from
transformers' own logits with the same rule."""

import json
import os
import subprocess
import sys

import squad_evaluation
from paths import REPO

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built and read locally

import numpy as np
import pytest
import torch
import transformers

from jaxtrans import tasks
from jaxtrans.data.qa.demo import demo_squad
from jaxtrans.errors import UserError

if REPO not in sys.path:
    sys.path.insert(0, REPO)

from configs import bert_qa  # noqa: E402

# configs/bert_qa_demo.py shrunk to seconds.
TINY_QA = {
    "model.d_model": 32,
    "model.num_heads": 2,
    "model.d_ff": 64,
    "model.num_layers": 1,
    "data.qa_demo_questions": 200,
    "data.qa_demo_eval_questions": 24,
    "data.batch_size": 8,
    "data.max_seq_length": 48,
    "data.doc_stride": 16,
    "model.max_len": 48,
    "train.num_steps": 4,
    "train.log_every": 2,
    "train.eval_every": 4,
    "train.checkpoint_every": 4,
    "train.async_checkpoints": False,
    "eval.batch_size": 16,
}


def run(*args, stdin=None):
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=REPO,
        input=stdin,
    )  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("qa_demo")
    flags = [f"--config.{k}={v}" for k, v in TINY_QA.items()]
    result = run(
        "train.py", "--config", "configs/bert_qa_demo.py", "--workdir", str(workdir), *flags
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def squad_document(examples, more_answers=None) -> dict:
    """The examples as a SQuAD 2.0 JSON document, a paragraph each; ``more_answers``: id ->
    gold answer texts that replace all but the first (at offset 0: only the first answer's
    offset is used, for the loss)."""
    more_answers = more_answers or {}
    paragraphs = []
    for e in examples:
        answers = [{"text": a.text, "answer_start": a.start} for a in e.answers]
        if e.id in more_answers:
            answers[1:] = [{"text": t, "answer_start": 0} for t in more_answers[e.id]]
        qa = {"id": e.id, "question": e.question, "answers": answers}
        paragraphs.append({"context": e.context, "qas": [{**qa, "is_impossible": e.is_impossible}]})
    return {"version": "v2.0", "data": [{"title": "demo", "paragraphs": paragraphs}]}


def assert_official_scores(report, official):
    """A report's scores (fractions) equal the official script's (percentages)."""
    expected = {
        "exact_match" if k == "exact" else k: v if k.endswith("total") else v / 100
        for k, v in official.items()
    }
    assert {k: report.get(k) for k in expected} == pytest.approx(expected, abs=1e-9)


def test_train_and_evaluate_report_exact_match_f1_and_write_predictions(trained):
    with open(trained / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f]
    (dev,) = [r for r in records if r.get("split") == "dev"]
    for key in ("loss", "start_accuracy", "end_accuracy", "exact_match", "f1", "NoAns_f1"):
        assert np.isfinite(dev[key]), key
    result = run("evaluate.py", "--workdir", str(trained))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((trained / "eval" / "dev-step4.json").read_text())
    predictions = json.loads((trained / "eval" / "dev-step4-predictions.json").read_text())
    null_odds = json.loads((trained / "eval" / "dev-step4-null_odds.json").read_text())
    dev_examples = demo_squad(TINY_QA["data.qa_demo_eval_questions"], 0, "dev", 0.2)
    assert set(predictions) == set(null_odds) == {e.id for e in dev_examples}
    expected = squad_evaluation.evaluate_v2(squad_document(dev_examples), predictions)
    assert report["task"] == "bert_question_answering" and report["split"] == "dev"
    assert report["examples"] == len(dev_examples) and report["windows"] >= len(dev_examples)
    assert_official_scores(report, expected)
    assert dev["exact_match"] == pytest.approx(report["exact_match"])
    contexts = {e.id: e.context for e in dev_examples}
    assert all(text == "" or text in contexts[qid] for qid, text in predictions.items())


def test_a_squad_file_with_several_answers_a_question_is_scored_as_the_official_scripts(
    trained, tmp_path
):
    task = tasks.restore_task(str(trained))
    encoded = task.encoded_split("dev")  # the demo's dev questions
    _, answers = task.answer(task.restore_params().params, encoded)
    # More gold answers, made from the model's own spans, so that the scores are not all 0:
    # the span in capitals with an article and punctuation (exact after normalisation), its
    # first word with more words (partial F1), none, or an article (dropped: it normalises
    # to "", which would match an empty prediction).
    more_answers = {}
    spans = [(e, a["answer"] or "x") for e, a in zip(encoded.examples, answers, strict=True)]
    for k, (example, span) in enumerate((e, s) for e, s in spans if e.answers):
        more = [[f"The {span.upper()}!"], [f"{span.split()[0]} of the town", "north"], [], ["the"]]
        more_answers[example.id] = more[k % 4]
    document = squad_document(encoded.examples, more_answers)
    (tmp_path / "dev.json").write_text(json.dumps(document))
    # About half the questions answered "" (the null score wins), half with their span.
    odds = sorted(a["null_score"] - a["score"] for a in answers)
    task = tasks.restore_task(str(trained))
    task.config.data.qa_dev = str(tmp_path / "dev.json")
    task.config.eval.null_score_diff_threshold = float(odds[len(odds) // 2])
    report = task.evaluate("dev", outdir=str(tmp_path / "eval"))
    predictions = json.loads((tmp_path / "eval" / "dev-step4-predictions.json").read_text())
    assert "" in predictions.values() and set(predictions.values()) != {""}
    official = squad_evaluation.evaluate_v2(document, predictions)
    assert_official_scores(report, official)
    assert 0 < official["HasAns_exact"] < official["HasAns_f1"] and official["NoAns_exact"] > 0
    # The answerable questions without the article answers are a SQuAD 1.1 file (whose
    # answers never normalise to ""): evaluate-v1.1.py's scores.
    paragraphs = [p for p in document["data"][0]["paragraphs"] if p["qas"][0]["answers"]]
    for p in paragraphs:
        p["qas"][0]["answers"] = [a for a in p["qas"][0]["answers"] if a["text"] != "the"]
    expected = squad_evaluation.evaluate_v1({"data": [{"paragraphs": paragraphs}]}, predictions)
    assert report["HasAns_exact"] == pytest.approx(expected["exact_match"] / 100, abs=1e-9)
    assert report["HasAns_f1"] == pytest.approx(expected["f1"] / 100, abs=1e-9)


def test_evaluate_input_answers_each_line_with_offsets_into_its_context(trained, tmp_path):
    examples = demo_squad(3, 5, "test")
    lines = [json.dumps({"question": e.question, "context": e.context}) for e in examples]
    lines.append(json.dumps({"question": "谁住在北京？", "context": "Mira 住在北京。"}))
    result = run("evaluate.py", "--workdir", str(trained), "--input", "-", stdin="\n".join(lines))
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(outputs) == len(lines)
    contexts = [e.context for e in examples] + ["Mira 住在北京。"]
    for output, context in zip(outputs, contexts, strict=True):
        if output.get("no_answer"):
            assert output["answer"] == "" and output["start"] is None
        else:
            assert set(output) == {"answer", "start", "end", "score"}
            assert context[output["start"] : output["end"]] == output["answer"] != ""
    # A bad line is a one-line UserError naming it (evaluate.py: exit status 2).
    with pytest.raises(UserError, match='--input line 2 has no "context"'):
        tasks.restore_task(str(trained)).predict([lines[0], '{"question": "Who?"}'])


# --------------------------------------------- a Hugging Face BertForQuestionAnswering

_VOCAB = (
    "[PAD] [UNK] [CLS] [SEP] [MASK] the a of in and was is who where what when did does "
    "live lives city river year born founded company built bridge old town mira tomas oslo "
    "lima paris 1976 1850 stone wooden north south , . ? ' ##s ##ed ##ing build"
)
VOCAB = _VOCAB.split()
QUESTIONS = [
    ("Where does Mira live?", "Mira lives in Oslo, a city in the north. Tomas lives in Paris. "
     "The stone bridge of Paris was built in 1976, south of the old town."),
    ("Who built the bridge?", "The old town of Lima was founded in 1850. A wooden bridge was "
     "built north of the river by Tomas's company."),
    ("When?", "Paris"),
]  # fmt: skip


@pytest.fixture(scope="module")
def huggingface_qa(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hf_qa")
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    transformers.BertTokenizerFast(str(directory / "vocab.txt")).save_pretrained(directory)
    config = transformers.BertConfig(
        vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BertForQuestionAnswering(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=generator))
    model.eval().save_pretrained(directory)
    return model, directory


def reference_answer(model, directory, question, context, settings, allow_no_answer):
    """Windows from the fast tokenizer's overflow, logits from transformers, the best span
    by brute force over all windows, its characters from the tokenizer's word offsets."""
    tokenizer = transformers.BertTokenizerFast.from_pretrained(directory)
    length, stride = settings["max_seq_length"], settings["doc_stride"]
    room = length - len(tokenizer.tokenize(question)) - 3
    encoded = tokenizer(
        question, context, truncation="only_second", max_length=length, padding="max_length",
        stride=max(room - stride, 0), return_overflowing_tokens=True, return_tensors="pt",
    )  # fmt: skip
    with torch.no_grad():
        out = model(
            input_ids=encoded["input_ids"],
            token_type_ids=encoded["token_type_ids"],
            attention_mask=encoded["attention_mask"],
        )
    starts, ends = out.start_logits.numpy(), out.end_logits.numpy()
    best, null = None, np.inf
    for w in range(len(starts)):
        null = min(null, starts[w, 0] + ends[w, 0])
        context_positions = [i for i, t in enumerate(encoded.sequence_ids(w)) if t == 1]
        for s in context_positions:
            for e in context_positions:
                if s <= e < s + settings["max_answer_length"]:
                    score = starts[w, s] + ends[w, e]
                    if best is None or score > best[0]:
                        best = (score, w, s, e)
    score, w, s, e = best
    if allow_no_answer and null > score:
        return {"answer": "", "start": None, "end": None, "score": null, "no_answer": True}
    words = encoded.word_ids(w)
    begin = encoded.word_to_chars(w, words[s], sequence_index=1).start
    stop = encoded.word_to_chars(w, words[e], sequence_index=1).end
    return {"answer": context[begin:stop], "start": begin, "end": stop, "score": score}


@pytest.mark.parametrize("version_2", [False, True])
def test_pretrained_predict_equals_the_span_from_transformers_logits(huggingface_qa, version_2):
    model, directory = huggingface_qa
    config = bert_qa.get_config()
    config.model.dtype = "float32"  # the recipe's bfloat16 off: compared with transformers
    settings = {
        "max_seq_length": 24,
        "doc_stride": 6,
        "max_query_length": 16,
        "max_answer_length": 4,
    }
    config.data.update(settings, version_2_with_negative=version_2)
    task = tasks.pretrained_task("bert_question_answering", str(directory), config)
    lines = [json.dumps({"question": q, "context": c}) for q, c in QUESTIONS]
    outputs = [json.loads(line) for line in task.predict(lines)]
    no_answers = 0
    for output, (question, context) in zip(outputs, QUESTIONS, strict=True):
        expected = reference_answer(model, directory, question, context, settings, version_2)
        assert output["score"] == pytest.approx(float(expected.pop("score")), abs=1e-4)
        assert {k: v for k, v in output.items() if k != "score"} == expected
        no_answers += bool(expected.get("no_answer"))
    assert not version_2 or 0 < no_answers < len(QUESTIONS)  # both forms are exercised


def test_pretrained_task_refuses_a_model_without_the_qa_head(tmp_path):
    config = transformers.BertConfig(
        vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16, max_position_embeddings=32,
    )  # fmt: skip
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    with pytest.raises(UserError, match="needs one of BertForQuestionAnswering"):
        tasks.pretrained_task("bert_question_answering", str(tmp_path))
