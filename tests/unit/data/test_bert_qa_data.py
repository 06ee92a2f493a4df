"""Question-answering data: SQuAD files, windows over long contexts with their answer
positions (equal to Hugging Face run_qa.py's, from its fast tokenizer's offsets), answer
text mapped back to exact characters (Chinese too), and the demo corpus."""

import gzip
import json
import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference tokenizer loads from a local file

import numpy as np
import pytest
import transformers

from jaxtrans.data.qa.demo import JOBS, NAMES, SURNAMES, demo_squad, is_held_out
from jaxtrans.data.qa.qa_features import QAEncoder, evaluation_batches, span_text, window_starts
from jaxtrans.data.qa.squad import Answer, QAExample, parse_question_line, read_squad
from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer
from jaxtrans.errors import UserError

_WORDS = (
    "the a of in and was is who where what when did does live lives city river year born "
    "founded company built bridge old town mira tomas oslo lima paris 1976 1850 stone wooden "
    "north south east west , . ? ' s"
)
WORDS = _WORDS.split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "##s", "##ed", "##ing", "build"]

CONTEXT = (
    "The old town of Lima was founded in 1850. A wooden bridge was built north of the river. "
    "Mira lives in Oslo, a city in the north. Tomas lives in Paris. The stone bridge of Paris "
    "was built in 1976, south of the old town. Tomas's company builds bridges."
)


def squad_document(version="v1.1"):
    qas = [
        {"id": "q1", "question": "Where does Mira live?",
         "answers": [{"text": "Oslo", "answer_start": CONTEXT.index("Oslo")}]},
        {"id": "q2", "question": "When was the stone bridge built?",
         "answers": [{"text": "1976", "answer_start": CONTEXT.index("1976")},
                     {"text": "in 1976", "answer_start": CONTEXT.index("in 1976")}]},
    ]  # fmt: skip
    if version == "v2.0":
        qas.append({"id": "q3", "question": "Where does Ada live?", "answers": [],
                    "is_impossible": True})  # fmt: skip
    return {"version": version, "data": [{"title": "Towns", "paragraphs": [
        {"context": CONTEXT, "qas": qas}]}]}  # fmt: skip


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("qa_vocab")
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return directory


@pytest.fixture(scope="module")
def tokenizer(vocab_dir):
    return WordPieceTokenizer.from_huggingface(vocab_dir)


# ------------------------------------------------------------------------ SQuAD files


def test_squad_v1_and_v2_files_read_questions_answers_and_impossibility(tmp_path):
    (tmp_path / "v1.json").write_text(json.dumps(squad_document()))
    with gzip.open(tmp_path / "v2.json.gz", "wt") as f:
        json.dump(squad_document("v2.0"), f)
    v1 = read_squad(tmp_path / "v1.json")
    v2 = read_squad(tmp_path / "v2.json.gz")
    assert [e.id for e in v1] == ["q1", "q2"] and [e.id for e in v2] == ["q1", "q2", "q3"]
    assert v1[1].answers == (
        Answer("1976", CONTEXT.index("1976")),
        Answer("in 1976", CONTEXT.index("in 1976")),
    )
    assert v1[0].context == CONTEXT and v1[0].title == "Towns" and not v1[0].is_impossible
    assert v2[2].is_impossible and v2[2].answers == ()


def qas(document):
    return document["data"][0]["paragraphs"][0]["qas"]


def mutate(document, change):
    change(document)
    return document


@pytest.mark.parametrize(
    "document, message",
    [
        ("not json", "is not valid JSON"),
        ([1, 2], "holds an array; a SQuAD file holds an object"),
        ({"version": "1.1"}, "the file has no 'data'"),
        (mutate(squad_document(), lambda d: d["data"][0]["paragraphs"][0].pop("context")),
         "data[0].paragraphs[0] has no 'context'"),
        (mutate(squad_document(), lambda d: qas(d)[1].pop("question")),
         'data[0].paragraphs[0].qas[1] (id "q2") has no \'question\''),
        (mutate(squad_document(), lambda d: qas(d)[0]["answers"][0]
                .update(answer_start="7")),
         'qas[0] (id "q1").answers[0].answer_start is a string, not a number'),
        (mutate(squad_document(), lambda d: qas(d)[0]["answers"][0]
                .update(answer_start=10_000)),
         "answer_start=10000 is outside the context"),
        (mutate(squad_document(), lambda d: qas(d)[1].update(id="q1")),
         'qas[1] (id "q1"): the id is used twice'),
        (mutate(squad_document(), lambda d: qas(d)[0].update(answers=[])),
         'qas[0] (id "q1") has no answers and is not is_impossible'),
        (mutate(squad_document(), lambda d: qas(d)[0].pop("id")),
         "qas[0] has no string 'id'"),
    ],
)  # fmt: skip
def test_a_malformed_squad_file_is_a_one_line_error_naming_file_and_place(
    tmp_path, document, message
):
    path = tmp_path / "bad.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(UserError) as error:
        read_squad(path)
    assert message in str(error.value) and str(path) in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "line, message",
    [
        ("what?", "--input line 3 is not JSON"),
        ('["q", "c"]', "--input line 3 holds an array"),
        ('{"question": "q"}', '--input line 3 has no "context"'),
        ('{"question": 7, "context": "c"}', '--input line 3: "question" is a number'),
    ],
)
def test_a_bad_input_line_is_a_user_error_naming_the_line(line, message):
    with pytest.raises(UserError, match=message.replace("?", r"\?").replace("[", r"\[")):
        parse_question_line(line, 3)


# ---------------------------------------------------------------------------- windows


def run_qa_reference(reference, example, max_seq_length, doc_stride, max_query_length):
    """Hugging Face run_qa.py's prepare_train_features for one example: windows by the fast
    tokenizer's overflow (``stride`` = the overlap, so that windows start ``doc_stride``
    pieces apart) and answer positions from the offset mapping; [CLS] = 0 when the window
    does not hold the answer."""
    question = reference.convert_tokens_to_string(
        reference.tokenize(example.question)[:max_query_length]
    )
    query = len(reference.tokenize(question))
    room = max_seq_length - query - 3
    encoded = reference(
        question, example.context, truncation="only_second", max_length=max_seq_length,
        stride=max(room - doc_stride, 0), return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )  # fmt: skip
    windows = []
    answer = example.answers[0]
    start_char, end_char = answer.start, answer.start + len(answer.text)
    for i, ids in enumerate(encoded["input_ids"]):
        offsets = encoded["offset_mapping"][i]
        types = encoded.sequence_ids(i)
        first = types.index(1)
        last = len(types) - 1 - types[::-1].index(1)
        if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
            windows.append((ids, 0, 0))
            continue
        s, e = first, last
        while s < len(offsets) and types[s] == 1 and offsets[s][0] <= start_char:
            s += 1
        while types[e] == 1 and offsets[e][1] >= end_char:
            e -= 1
        windows.append((ids, s - 1, e + 1))
    return windows


@pytest.mark.parametrize("max_seq_length, doc_stride", [(24, 5), (24, 16), (40, 7), (128, 128)])
def test_windows_and_answer_positions_equal_huggingface_run_qa(
    vocab_dir, tokenizer, max_seq_length, doc_stride
):
    reference = transformers.BertTokenizerFast.from_pretrained(vocab_dir)
    examples = read_squad_document(squad_document())
    examples += [
        QAExample(f"x{i}", "Who lives in Paris?", CONTEXT, (Answer(text, CONTEXT.index(text)),))
        for i, text in enumerate(["Tomas", "stone bridge of Paris", "The old town", "bridges"])
    ]
    encoder = QAEncoder(
        tokenizer, max_seq_length=max_seq_length, doc_stride=doc_stride, max_query_length=6
    )
    encoded = encoder.encode(examples, training=True)
    assert encoded.skipped == 0
    for index, example in enumerate(examples):
        ours = [w for w in encoded.windows if w.example == index]
        expected = run_qa_reference(reference, example, max_seq_length, doc_stride, 6)
        assert len(ours) == len(expected), example.id
        assert any(w.start_position for w in ours), example.id  # some window holds it
        for window, (ids, start, end) in zip(ours, expected, strict=True):
            assert window.input_ids.tolist() == ids
            assert (window.start_position, window.end_position) == (start, end)
            if start:  # the positions map back to the answer's characters
                text, begin, stop = span_text(
                    example.context, encoded.contexts[index], window, start, end
                )
                answer = example.answers[0]
                assert (text, begin) == (answer.text, answer.start)


def read_squad_document(document):
    from jaxtrans.data.qa.squad import parse_squad

    return parse_squad(document)


def test_every_window_holding_the_answer_points_at_it_even_in_the_overlap(tokenizer):
    """With a stride shorter than the window, the answer lies in several windows; each of
    them points at it (at different positions), the others at [CLS]."""
    example = QAExample("q", "Where?", CONTEXT, (Answer("Oslo", CONTEXT.index("Oslo")),))
    encoder = QAEncoder(tokenizer, max_seq_length=20, doc_stride=3, max_query_length=8)
    encoded = encoder.encode([example], training=True)
    holding = [w for w in encoded.windows if w.start_position]
    assert len(holding) >= 3 and len({w.start_position for w in holding}) == len(holding)
    oslo = tokenizer.encode("Oslo")
    for window in encoded.windows:
        inside = (
            window.context_start
            <= encoded.contexts[0]
            .word_of_piece.tolist()
            .index(next(i for i, w in enumerate(encoded.contexts[0].words) if w.text == "Oslo"))
            < window.context_start + window.context_length
        )
        if window.start_position:
            assert inside
            assert (
                window.input_ids[window.start_position : window.end_position + 1].tolist() == oslo
            )
        else:
            assert (window.start_position, window.end_position) == (0, 0)
    rows = evaluation_batches(encoded.windows, pad_id=0, max_seq_length=20, batch_size=4)
    types = np.concatenate([b["token_type_ids"] for b in rows])[: len(encoded.windows)]
    assert all(types[i, w.context_offset] == 1 and types[i, w.context_offset - 1] == 0
               for i, w in enumerate(encoded.windows))  # fmt: skip


def test_window_starts_follow_bert_run_squad():
    assert window_starts(10, 4, 3) == [0, 3, 6]  # the last reaches the end
    assert window_starts(10, 4, 8) == [0, 4, 8]  # a stride longer than the window: no gap
    assert window_starts(4, 4, 2) == [0] and window_starts(0, 4, 2) == [0]


def test_a_training_answer_not_at_its_offset_is_skipped_and_counted(tokenizer):
    good = QAExample("a", "Where?", CONTEXT, (Answer("Oslo", CONTEXT.index("Oslo")),))
    moved = QAExample("b", "Where?", CONTEXT, (Answer("Oslo", 3),))
    impossible = QAExample("c", "Where?", CONTEXT, (), True)
    encoder = QAEncoder(tokenizer, max_seq_length=128, doc_stride=64, max_query_length=8)
    encoded = encoder.encode([good, moved, impossible], training=True)
    assert encoded.skipped == 1 and [e.id for e in encoded.examples] == ["a", "c"]
    assert [(w.start_position, w.end_position) for w in encoded.windows if w.example == 1] == [
        (0, 0)
    ]
    kept = encoder.encode([good, moved], training=False)  # evaluation keeps every question
    assert kept.skipped == 0 and len(kept.examples) == 2


def test_windows_settings_that_leave_no_room_are_a_user_error(tokenizer):
    with pytest.raises(UserError, match="max_seq_length=10 leaves no room"):
        QAEncoder(tokenizer, max_seq_length=10, doc_stride=4, max_query_length=7)


def test_chinese_answers_map_to_exact_characters(tmp_path):
    """A character-level vocab.txt as bert-base-chinese's: every CJK character a piece,
    the answer found by its character offset, in every window that holds it."""
    context = "北京是中国的首都。上海是中国最大的城市，Apple公司在上海有一个办公室。"
    chars = sorted({c for c in context if not c.isascii()})
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "apple", *chars, "哪", "个"])
        + "\n"
    )
    tokenizer = WordPieceTokenizer.from_huggingface(tmp_path)
    reference = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    examples = [
        QAExample(f"z{i}", "哪个城市最大？", context, (Answer(text, context.index(text)),))
        for i, text in enumerate(["上海", "Apple公司", "首都", "办公室"])
    ]
    for max_seq_length, doc_stride in ((64, 32), (20, 4)):
        encoder = QAEncoder(
            tokenizer, max_seq_length=max_seq_length, doc_stride=doc_stride, max_query_length=16
        )
        encoded = encoder.encode(examples, training=True)
        for index, example in enumerate(examples):
            ours = [w for w in encoded.windows if w.example == index]
            expected = run_qa_reference(reference, example, max_seq_length, doc_stride, 16)
            assert [(w.input_ids.tolist(), w.start_position, w.end_position) for w in ours] == (
                expected
            )
            for window in ours:
                if window.start_position:
                    text, begin, stop = span_text(
                        context, encoded.contexts[index], window,
                        window.start_position, window.end_position,
                    )  # fmt: skip
                    assert (text, begin, stop) == (
                        example.answers[0].text,
                        example.answers[0].start,
                        example.answers[0].start + len(example.answers[0].text),
                    )


# ------------------------------------------------------------------------ demo corpus


def test_demo_corpus_is_seeded_answers_are_at_their_offsets_and_dev_asks_unseen_pairs():
    train = demo_squad(300, seed=0, split="train", unanswerable=0.2)
    assert train == demo_squad(300, seed=0, split="train", unanswerable=0.2)
    dev = demo_squad(60, seed=0, split="dev", unanswerable=0.2)
    assert len(train) == 300 and len(dev) == 60
    assert 0.1 < np.mean([e.is_impossible for e in train]) < 0.3
    for example in train + dev:
        for answer in example.answers:
            assert example.context[answer.start : answer.start + len(answer.text)] == answer.text
    # No training story holds a held-out pair; every dev answer is one.
    words = [e.context.replace(".", " .").split() for e in train]
    pairs = [
        (name, "surname", after) if after in SURNAMES else (name, "job", before)
        for context in words
        for before, name, after in zip(context, context[1:], context[2:], strict=False)
        if name in NAMES and (after in SURNAMES or before in JOBS)
    ]
    assert len(pairs) > 300 and not any(is_held_out(*pair) for pair in pairs)
    for example in dev:
        if not example.answers:
            continue
        answer = example.answers[0].text
        asked = re.findall(r"[A-Za-z]+", example.question)
        if "surname" in asked:
            assert is_held_out(next(w for w in asked if w in NAMES), "surname", answer)
        else:  # Who is the {job}? -> first name and surname
            assert is_held_out(answer.split()[0], "job", next(w for w in asked if w in JOBS))
