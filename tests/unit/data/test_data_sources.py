"""Local file sources: TSV, JSONL, gzip, direction flip, malformed lines, source selection."""

import gzip
import json

import pytest

from jaxtrans.data.records import TranslationPair
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.sources import (
    NoSplit,
    load_split,
    read_split,
    source_kind,
    training_pairs,
)
from jaxtrans.data.translation.text_files import IndexedTextFile, line_format_for, read_pairs
from jaxtrans.errors import UserError

PAIRS = [
    ("Hallo Welt", "Hello world"),
    ("Guten Morgen", "Good morning"),
    ("Wie geht's?", "How are you?"),
    ("你好，世界", "Hello, world"),
]


def write_tsv(path, pairs=PAIRS, newline="\n"):
    path.write_bytes("".join(f"{s}\t{t}{newline}" for s, t in pairs).encode())
    return str(path)


def config(**overrides):
    data = get_data_config()
    data.update(overrides)
    return data


def all_pairs(source):
    return [source[i] for i in range(len(source))]


def test_tsv_file_reads_every_pair_in_order(tmp_path):
    path = write_tsv(tmp_path / "train.tsv")
    assert all_pairs(training_pairs(config(train=path))) == [TranslationPair(*p) for p in PAIRS]


def test_gzipped_tsv_reads_the_same_pairs(tmp_path):
    path = tmp_path / "train.tsv.gz"
    path.write_bytes(gzip.compress("".join(f"{s}\t{t}\n" for s, t in PAIRS).encode()))
    assert all_pairs(training_pairs(config(train=str(path)))) == [
        TranslationPair(*p) for p in PAIRS
    ]


def test_crlf_and_missing_final_newline_read_the_same_pairs(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(b"a b\tA B\r\nc\tC")
    assert all_pairs(training_pairs(config(train=str(path)))) == [("a b", "A B"), ("c", "C")]


def test_jsonl_reads_the_configured_fields(tmp_path):
    # The translation2019zh layout.
    path = tmp_path / "train.jsonl"
    lines = [json.dumps({"english": en, "chinese": zh}, ensure_ascii=False) for zh, en in PAIRS]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = config(train=str(path), jsonl_source_field="english", jsonl_target_field="chinese")
    assert all_pairs(training_pairs(data)) == [TranslationPair(en, zh) for zh, en in PAIRS]


def test_direction_flag_swaps_source_and_target(tmp_path):
    path = tmp_path / "train.jsonl.gz"
    lines = [json.dumps({"english": en, "chinese": zh}) for zh, en in PAIRS]
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    data = config(
        train=str(path), jsonl_source_field="english", jsonl_target_field="chinese", reverse=True
    )
    assert all_pairs(training_pairs(data)) == [TranslationPair(*p) for p in PAIRS]


def test_several_training_files_are_read_one_after_another(tmp_path):
    first = write_tsv(tmp_path / "a.tsv", PAIRS[:2])
    second = write_tsv(tmp_path / "b.tsv", PAIRS[2:])
    source = training_pairs(config(train=f"{first}, {second}"))
    assert all_pairs(source) == [TranslationPair(*p) for p in PAIRS]


def test_random_access_equals_streaming_the_file(tmp_path):
    path = write_tsv(tmp_path / "dev.tsv", PAIRS * 3)
    fmt = line_format_for(path, config())
    assert all_pairs(IndexedTextFile(path, fmt)) == list(read_pairs(path, fmt))


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("bad.tsv", b"a\tA\nno tab here\nc\tC\n", "tab-separated"),
        ("bad.tsv", b"a\tA\nb\tB\textra\n", "tab-separated"),
        ("bad.jsonl", b'{"source": "a", "target": "A"}\n{"source": "b", \n', "bad JSON"),
        ("bad.jsonl", b'{"source": "a", "target": "A"}\n{"src": "b", "target": "B"}\n', "field"),
        ("bad.tsv", b"a\tA\nb\xff\xfe\tB\n", "invalid UTF-8"),
    ],
)
def test_malformed_line_error_names_file_and_line(tmp_path, name, content, reason):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError, match=rf"{path}:2: malformed line: .*{reason}"):
        all_pairs(training_pairs(config(train=str(path))))
    with pytest.raises(UserError, match=rf"{path}:2: malformed line"):
        load_split(config(train=str(path), dev=str(path)), "dev")


def test_skip_malformed_reads_malformed_lines_as_none(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(b"a\tA\nno tab\nb\xff\tB\nc\tC\n")
    data = config(train=str(path), dev=str(path), skip_malformed=True)
    assert all_pairs(training_pairs(data)) == [("a", "A"), None, None, ("c", "C")]
    assert load_split(data, "dev") == [("a", "A"), ("c", "C")]


def test_skipped_dev_and_test_lines_are_counted(tmp_path):
    path = tmp_path / "test.tsv.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"a\tA\nno tab\nb\xff\tB\nc\tC\n\tD\n")
    split = read_split(config(test=str(path), skip_malformed=True), "test")
    assert split.pairs == [("a", "A"), ("c", "C")]
    assert (split.lines_read, split.lines_skipped) == (5, 3)


def test_a_clean_split_counts_every_line_read_and_none_skipped(tmp_path):
    split = read_split(config(dev=write_tsv(tmp_path / "dev.tsv")), "dev")
    assert (len(split.pairs), split.lines_read, split.lines_skipped) == (4, 4, 0)
    demo = read_split(config(demo_dev_size=7), "dev")
    assert (len(demo.pairs), demo.lines_read, demo.lines_skipped) == (7, 7, 0)


def test_a_split_file_of_only_malformed_lines_is_a_user_error(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"no tab\nnone here\n")
    with pytest.raises(UserError, match=r"dev=.*dev.tsv: the file holds no sentence pairs, all 2"):
        read_split(config(dev=str(path), skip_malformed=True), "dev")


def test_only_a_split_the_run_does_not_have_is_no_split(tmp_path):
    train = write_tsv(tmp_path / "train.tsv")
    with pytest.raises(NoSplit, match="config.data.dev=PATH"):
        read_split(config(train=train), "dev")
    for dev in (str(tmp_path / "dve.tsv"), str(tmp_path / "dev.csv")):  # configured, broken
        with pytest.raises(UserError) as raised:
            read_split(config(train=train, dev=dev), "dev")
        assert not isinstance(raised.value, NoSplit)


def test_unknown_file_type_is_a_user_error(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("a,A\n")
    with pytest.raises(UserError, match="unknown data file type"):
        training_pairs(config(train=str(path)))


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such data file"):
        training_pairs(config(train=str(tmp_path / "missing.tsv")))


def test_source_is_chosen_tfds_then_files_then_demo(tmp_path):
    assert source_kind(config()) == "demo"
    assert source_kind(config(train="x.tsv")) == "files"
    assert source_kind(config(tfds_name="wmt14_translate/de-en")) == "tfds"
    with pytest.raises(UserError, match="both"):
        source_kind(config(train="x.tsv", tfds_name="wmt14_translate/de-en"))


def test_eval_split_the_source_lacks_is_a_user_error(tmp_path):
    data = config(train=write_tsv(tmp_path / "train.tsv"))
    with pytest.raises(UserError, match="config.data.test=PATH"):
        load_split(data, "test")
    with pytest.raises(UserError, match="unknown evaluation split"):
        load_split(data, "train")


def test_dev_file_is_read_in_file_order(tmp_path):
    data = config(dev=write_tsv(tmp_path / "dev.tsv", PAIRS[::-1]))
    assert load_split(data, "dev") == [TranslationPair(*p) for p in PAIRS[::-1]]
