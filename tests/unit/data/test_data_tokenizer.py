"""SentencePiece tokenizers: reserved ids, round trip, reuse from the workdir, vocab checks."""

import ast
import os
import pathlib

import pytest
from paths import REPO

from jaxtrans.data.reserved_pieces import BOS_ID, CLS_ID, EOS_ID, MASK_ID, PAD_ID, SEP_ID, UNK_ID
from jaxtrans.data.tokenizers.sentencepiece_training import sample_indices
from jaxtrans.data.translation import tokenizer as tokenizer_module
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.sources import training_pairs
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer, load_tokenizer
from jaxtrans.errors import UserError


def small_demo_config(**overrides):
    data = get_data_config()
    data.update(dict(demo_train_size=1500, demo_dev_size=50, demo_test_size=50, vocab_size=300))
    data.update(overrides)
    return data


@pytest.fixture(scope="module")
def demo_workdir(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("run"))
    load_or_train_tokenizer(small_demo_config(), workdir)
    return workdir


def test_reserved_ids_are_fixed_in_every_model(demo_workdir):
    model = load_tokenizer(demo_workdir)._source
    expected = {
        PAD_ID: "<pad>",
        EOS_ID: "</s>",
        BOS_ID: "<s>",
        UNK_ID: "<unk>",
        CLS_ID: "[CLS]",
        SEP_ID: "[SEP]",
        MASK_ID: "[MASK]",
    }
    assert {i: model.id_to_piece(i) for i in expected} == expected
    assert (PAD_ID, EOS_ID, BOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert (CLS_ID, SEP_ID, MASK_ID) == (4, 5, 6)


def test_each_reserved_id_is_defined_once_in_jaxtrans():
    names = {"PAD_ID", "EOS_ID", "BOS_ID", "UNK_ID", "CLS_ID", "SEP_ID", "MASK_ID"}
    package = pathlib.Path(REPO) / "jaxtrans"
    definitions = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id in names:
                    definitions.append(f"{path.relative_to(package)}:{target.id}")
    defined = [d.split(":")[1] for d in definitions]
    assert sorted(defined) == sorted(names), definitions  # each once, wherever that is


def test_decode_of_encode_gives_the_text_back(demo_workdir):
    tokenizer = load_tokenizer(demo_workdir)
    for pair in list(training_pairs(small_demo_config()))[:200]:
        assert tokenizer.decode_target(tokenizer.encode_target(pair.target)) == pair.target
        assert tokenizer.decode_source(tokenizer.encode_source(pair.source)) == pair.source


def test_chinese_round_trips_with_full_character_coverage(tmp_path):
    train = tmp_path / "train.tsv"
    lines = [
        "你好，世界\tHello, world",
        "今天天气很好。\tThe weather is nice today.",
        "谢谢\tThanks",
    ]
    train.write_text("\n".join(lines * 20) + "\n", encoding="utf-8")
    data = small_demo_config(train=str(train), vocab_size=100, character_coverage=1.0)
    tokenizer = load_or_train_tokenizer(data, str(tmp_path / "run"))
    for line in lines:
        chinese, english = line.split("\t")
        assert UNK_ID not in tokenizer.encode_source(chinese)
        assert tokenizer.decode_source(tokenizer.encode_source(chinese)) == chinese
        assert tokenizer.decode_target(tokenizer.encode_target(english)) == english


def test_decode_stops_at_eos_and_drops_pad_and_bos(demo_workdir):
    tokenizer = load_tokenizer(demo_workdir)
    ids = tokenizer.encode_target("The dog sees a cat.")
    noisy = [BOS_ID, *ids[:2], PAD_ID, *ids[2:], EOS_ID, *ids, PAD_ID]
    assert tokenizer.decode_target(noisy) == "The dog sees a cat."


def test_tokenizer_is_trained_once_and_reused(demo_workdir, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("retrained")

    monkeypatch.setattr(tokenizer_module, "train_tokenizer", fail)
    tokenizer = load_or_train_tokenizer(small_demo_config(), demo_workdir)
    assert tokenizer.source_vocab_size == 300
    assert sorted(os.listdir(demo_workdir)) == ["tokenizer"]


def test_separate_vocabularies_train_one_model_per_side(tmp_path):
    data = small_demo_config(shared_vocab=False, vocab_size=200)
    tokenizer = load_or_train_tokenizer(data, str(tmp_path))
    assert not tokenizer.shared
    assert tokenizer.source_vocab_size == tokenizer.target_vocab_size == 200
    # Kelen words are pieces of the source model only.
    source_pieces = tokenizer._source.encode("kanoul", out_type=str)
    target_pieces = tokenizer._target.encode("kanoul", out_type=str)
    assert len(source_pieces) < len(target_pieces)


def test_vocab_size_mismatch_with_checkpoint_is_a_user_error(demo_workdir):
    tokenizer = load_tokenizer(demo_workdir)
    tokenizer.check_vocab_size(300)
    with pytest.raises(UserError, match="vocabulary sizes"):
        tokenizer.check_vocab_size(8000)


def test_workdir_without_tokenizer_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no tokenizer"):
        load_tokenizer(str(tmp_path))


@pytest.mark.parametrize("content, held", [("[]", "an array"), ("null", "null"), ("3", "a number")])
def test_a_tokenizer_json_that_is_not_an_object_is_a_user_error(tmp_path, content, held):
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "tokenizer.json").write_text(content)
    with pytest.raises(UserError, match=f"tokenizer.json holds {held}, not an object"):
        load_tokenizer(str(tmp_path))


def test_training_sample_is_bounded_by_spm_max_sentences(tmp_path):
    data = small_demo_config(spm_max_sentences=400)
    load_or_train_tokenizer(data, str(tmp_path))
    metadata = (tmp_path / "tokenizer" / "tokenizer.json").read_text()
    assert '"sampled_pairs": 200' in metadata  # shared: 200 pairs = 400 sentences
    indices = sample_indices(10_000, 400)
    assert len(set(indices.tolist())) == 400
    assert indices.max() > 9000  # spread over the whole corpus, not its head
