"""Entity-tagging data: the CoNLL reader (columns, -DOCSTART-, the three tag schemes, errors
naming file:line), labels on the first piece of each word equal to Hugging Face's word
alignment, windows of long sentences, and the generated demo corpus."""

import gzip
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference tokenizer loads from a local file

import ml_collections
import numpy as np
import pytest
import transformers

from jaxtrans.data.ner.conll import TaggedSentence, entity_types, read_conll, write_conll
from jaxtrans.data.ner.demo import demo_sentences
from jaxtrans.data.ner.token_classification import (
    TaggedData,
    evaluation_batches,
    model_labels,
    pad_window,
    sentence_windows,
    training_batches,
    word_predictions,
)
from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer
from jaxtrans.errors import UserError
from jaxtrans.inference.entities import convert_tags, entity_spans

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
. . O O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O
BRUSSELS NNP B-NP B-LOC
"""


def test_the_tag_is_the_last_column_and_docstart_lines_separate_sentences(tmp_path):
    (tmp_path / "train.txt").write_text(CONLL)
    sentences = read_conll(tmp_path / "train.txt")
    assert [s.words for s in sentences] == [
        ("EU", "rejects", "German", "call", "."),
        ("Peter", "Blackburn"),
        ("BRUSSELS",),
    ]
    assert sentences[1].tags == ("B-PER", "I-PER")
    assert sentences[0].location(2) == f"{tmp_path / 'train.txt'}:5"
    assert entity_types(sentences) == ["LOC", "MISC", "ORG", "PER"]


def test_gzip_and_tab_separated_files_read_the_same(tmp_path):
    sentences = [
        TaggedSentence(
            ("Anna", "Berg", "lives", "in", "Oslo"), ("B-PER", "I-PER", "O", "O", "B-LOC")
        )
    ]
    write_conll(sentences, tmp_path / "a.txt")
    with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as f:
        f.write((tmp_path / "a.txt").read_text().replace(" ", "\t"))
    plain, packed = read_conll(tmp_path / "a.txt"), read_conll(tmp_path / "a.txt.gz")
    assert [(s.words, s.tags) for s in plain] == [(s.words, s.tags) for s in packed]
    assert [(s.words, s.tags) for s in plain] == [(s.words, s.tags) for s in sentences]


@pytest.mark.parametrize(
    "scheme, tags",
    [
        ("bio", ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC"]),
        ("iob1", ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC"]),
        ("iobes", ["B-PER", "E-PER", "O", "S-LOC", "B-LOC", "E-LOC"]),
    ],
)
def test_the_three_schemes_give_the_same_entities_and_bio_labels(tmp_path, scheme, tags):
    words = ["Anna", "Berg", "in", "Oslo", "New", "York"]
    (tmp_path / "t.txt").write_text("".join(f"{w} {t}\n" for w, t in zip(words, tags, strict=True)))
    (sentence,) = read_conll(tmp_path / "t.txt", scheme)
    assert [(e.type, e.start, e.end) for e in entity_spans(sentence.tags)] == [
        ("PER", 0, 2),
        ("LOC", 3, 4),
        ("LOC", 4, 6),
    ]
    assert convert_tags(sentence.tags, "bio") == ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC"]


@pytest.mark.parametrize(
    "content, scheme, message",
    [
        ("EU B-ORG\nrejects\n", "bio", r"t.txt:2: one column 'rejects'"),
        ("EU B-ORG\n\nBerlin S-LOC\n", "bio", r"t.txt:3: tag 'S-LOC' is not O, B-TYPE, I-TYPE"),
        ("EU X-ORG\n", "iobes", r"t.txt:1: tag 'X-ORG' is not O, B-TYPE, I-TYPE, E-TYPE"),
        ("EU B-\n", "bio", r"t.txt:1: tag 'B-'"),
        ("EU ORG\n", "bio", r"t.txt:1: tag 'ORG'"),
        ("EU B-ORG,X\n", "bio", r"t.txt:1: entity type 'ORG,X' contains a comma"),
        ("-DOCSTART- O\n\n\n", "bio", r"t.txt holds no tagged sentences"),
    ],
)
def test_malformed_lines_are_one_line_errors_naming_file_and_line(
    tmp_path, content, scheme, message
):
    (tmp_path / "t.txt").write_text(content)
    with pytest.raises(UserError, match=message) as error:
        read_conll(tmp_path / "t.txt", scheme)
    assert "\n" not in str(error.value)


def test_unreadable_files_and_unknown_schemes_are_user_errors(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("Zürich B-LOC\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1.txt:1: not UTF-8"):
        read_conll(tmp_path / "latin1.txt")
    with pytest.raises(UserError, match="not found"):
        read_conll(tmp_path / "missing.txt")
    with pytest.raises(UserError, match=r"tag_scheme='bioes'"):
        read_conll(tmp_path / "latin1.txt", "bioes")


# ------------------------------------------------------------ word pieces and labels

VOCAB = [
    *("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "in", "of", ".", ",", "-"),
    *("ber", "##lin", "##er", "new", "york", "##shire", "ann", "##a", "anna", "lives"),
    *("mira", "##bel", "##le", "o", "##slo"),
]


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ner_vocab")
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return directory


@pytest.fixture(scope="module")
def tokenizer(vocab_dir):
    return WordPieceTokenizer.from_huggingface(vocab_dir)


SENTENCES = [
    ["Anna", "lives", "in", "Berliner", "Yorkshire", "."],
    ["Mirabelle", "of", "New-York", ",", "Oslo"],
    ["the", "Zzz", "a"],
]
LABELS = [[3, 0, 0, 1, 2, 0], [3, 0, 1, 0, 1], [0, 4, 0]]


def test_labels_sit_on_the_first_piece_of_each_word_as_huggingface_aligns_words(
    vocab_dir, tokenizer
):
    reference = transformers.BertTokenizerFast.from_pretrained(vocab_dir)
    windows, split = sentence_windows(tokenizer, SENTENCES, 24, LABELS)
    assert split == 0 and len(windows) == len(SENTENCES)
    for window, words, labels in zip(windows, SENTENCES, LABELS, strict=True):
        row = pad_window(window, 24, tokenizer.pad_id)
        expected = reference(words, is_split_into_words=True, padding="max_length", max_length=24)
        assert row["input_ids"].tolist() == expected["input_ids"]
        assert row["attention_mask"].tolist() == expected["attention_mask"]
        word_ids = expected.word_ids()
        first = [i for i, w in enumerate(word_ids) if w is not None and w != word_ids[i - 1]]
        assert window.word_starts.tolist() == first
        weights = np.zeros(24, np.int32)
        weights[first] = 1
        # Other pieces, [CLS], [SEP] and padding weigh nothing.
        assert row["label_weights"].tolist() == weights.tolist()
        assert row["labels"][first].tolist() == labels
        assert row["labels"][weights == 0].tolist() == [0] * int(np.sum(weights == 0))
    assert len(windows[1].input_ids) > len(SENTENCES[1]) + 2  # some words have several pieces


def test_long_sentences_are_cut_into_windows_of_whole_words_and_every_word_keeps_its_label(
    tokenizer,
):
    words = SENTENCES[0] * 3 + SENTENCES[1] * 2
    labels = LABELS[0] * 3 + LABELS[1] * 2
    windows, split = sentence_windows(tokenizer, [words, SENTENCES[2]], 9, [labels, LABELS[2]])
    assert split == 1
    assert all(len(w.input_ids) <= 9 for w in windows)
    assert [w.sentence for w in windows].count(0) > 2
    covered = [
        w.first_word + i for w in windows if w.sentence == 0 for i in range(len(w.word_starts))
    ]
    assert covered == list(range(len(words)))  # each word once, in order
    got = np.concatenate([w.labels for w in windows if w.sentence == 0])
    assert got.tolist() == labels
    # Per-position values of the rows go back to the words of each sentence.
    rows = np.stack([pad_window(w, 9, 0)["labels"] for w in windows])
    back = word_predictions(windows, rows, [len(words), 3])
    assert back[0].tolist() == labels and back[1].tolist() == LABELS[2]


def test_a_word_longer_than_a_row_keeps_its_first_pieces(tokenizer):
    windows, _ = sentence_windows(tokenizer, [["Berliner-Berliner", "a"]], 5, [[1, 0]])
    assert [len(w.input_ids) for w in windows] == [5, 3]
    assert windows[0].word_starts.tolist() == [1] and windows[1].word_starts.tolist() == [1]


def test_evaluation_batches_keep_order_and_pad_with_rows_of_weight_zero(tokenizer):
    windows, _ = sentence_windows(tokenizer, SENTENCES, 16, LABELS)
    batches = evaluation_batches(windows, max_seq_length=16, pad_id=0, batch_size=2)
    assert [b["input_ids"].shape for b in batches] == [(2, 16), (2, 16)]
    assert batches[1]["label_weights"][1].sum() == 0
    assert batches[0]["labels"][0][batches[0]["label_weights"][0] == 1].tolist() == LABELS[0]


def test_training_batches_resume_from_their_state(tokenizer):
    windows, _ = sentence_windows(tokenizer, SENTENCES * 3, 16, LABELS * 3)

    def make():
        return training_batches(windows, max_seq_length=16, pad_id=0, batch_size=4, seed=3)

    it = make()
    next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(3)]
    resumed = make()
    resumed.set_state(state)
    for x, y in zip(expected, [next(resumed) for _ in range(3)], strict=True):
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])


# ------------------------------------------------------------------------ the demo corpus


def test_demo_corpus_is_seeded_and_dev_holds_entities_training_never_saw():
    train = demo_sentences("train", 600)
    dev = demo_sentences("dev", 200)
    assert [s.words for s in dev] == [s.words for s in demo_sentences("dev", 200)]
    assert [s.words for s in demo_sentences("dev", 200, seed=1)] != [s.words for s in dev]

    def names(sentences):
        return {
            (e.type, " ".join(s.words[e.start : e.end]))
            for s in sentences
            for e in entity_spans(s.tags)
        }

    seen, held = names(train), names(dev)
    assert {t for t, _ in held} == {"PER", "LOC", "ORG"}
    assert len(held - seen) > len(held) / 2
    assert any(len(text.split()) > 1 for _, text in held)  # multi-word entities
    for s in train + dev:
        assert convert_tags(s.tags, "bio") == list(s.tags)  # well-formed BIO


def test_demo_corpus_stands_in_for_files_only_when_asked():
    data = ml_collections.ConfigDict(
        {"ner_train": "", "ner_demo_train_size": 50, "ner_demo_eval_size": 20}
    )
    tagged = TaggedData(data)
    assert len(tagged.sentences("train")) == 50 and len(tagged.sentences("test")) == 20
    assert model_labels(data, tagged.sentences("train")) == [
        "O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"
    ]  # fmt: skip
    data.ner_demo_train_size = 0
    with pytest.raises(UserError, match="--config.data.ner_train"):
        TaggedData(data).sentences("train")
    assert TaggedData(data).sentences("dev") is None
