"""SentencePiece training, one function for both tokenizers: the reserved ids, errors, and
the same models as the 0996837 version trained for the same text and settings."""

import json
import pathlib

import ml_collections
import pytest
import sentencepiece as spm
from paths import FIXTURES

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.data.bert import bert_pipeline
from jaxtrans.data.tokenizers.bert_tokenizer import load_or_train_bert_tokenizer
from jaxtrans.data.tokenizers.sentencepiece_training import sample_indices, train_sentencepiece
from jaxtrans.data.translation.tokenizer import train_tokenizer
from jaxtrans.errors import UserError

OLD_WORKDIRS = pathlib.Path(FIXTURES) / "workdirs_0996837"
SENTENCES = ["the dog sees a cat", "a cat sees the dog", "the bird sings"] * 20


def train(sentences, path, vocab_size: int = 30) -> int:
    return train_sentencepiece(
        sentences, path, vocab_size=vocab_size, model_type="unigram", character_coverage=1.0
    )


def old_data_config(name: str) -> ml_collections.ConfigDict:
    config = json.loads((OLD_WORKDIRS / name / "config.json").read_text())
    return ml_collections.ConfigDict(config["data"])


def test_translation_tokenizer_is_the_one_the_old_version_trained(tmp_path):
    train_tokenizer(old_data_config("translation"), str(tmp_path))
    for name in ("shared.model", "tokenizer.json"):
        old = (OLD_WORKDIRS / "translation" / "tokenizer" / name).read_bytes()
        assert (tmp_path / "tokenizer" / name).read_bytes() == old, name


def test_bert_tokenizer_is_the_one_the_old_version_trained(tmp_path):
    data = old_data_config("bert_pretraining")
    documents = bert_pipeline.pretraining_documents(data, "train")
    load_or_train_bert_tokenizer(data, str(tmp_path), documents)
    old = (OLD_WORKDIRS / "bert_pretraining" / "bert_tokenizer" / "spm.model").read_bytes()
    assert (tmp_path / "bert_tokenizer" / "spm.model").read_bytes() == old


def test_trained_model_keeps_the_reserved_ids_and_reports_its_size(tmp_path):
    path = tmp_path / "m.model"
    size = train(SENTENCES, path)
    model = spm.SentencePieceProcessor(model_file=str(path))
    assert size == model.get_piece_size()
    pieces = [model.id_to_piece(i) for i in range(vocab.NUM_RESERVED_IDS)]
    assert pieces == ["<pad>", "</s>", "<s>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert (model.pad_id(), model.eos_id(), model.bos_id(), model.unk_id()) == (
        vocab.PAD_ID,
        vocab.EOS_ID,
        vocab.BOS_ID,
        vocab.UNK_ID,
    )


def test_a_small_corpus_gives_fewer_pieces_than_asked(tmp_path):
    size = train(SENTENCES, tmp_path / "m.model", vocab_size=5000)
    assert vocab.NUM_RESERVED_IDS < size < 5000


def test_an_error_while_reading_the_text_comes_out_as_itself(tmp_path):
    def sentences():
        yield from SENTENCES
        raise UserError("train.tsv:7: expected source<TAB>target")

    with pytest.raises(UserError, match=r"^train.tsv:7: expected source<TAB>target$"):
        train(sentences(), tmp_path / "m.model")


def test_failed_training_is_a_one_line_user_error(tmp_path):
    with pytest.raises(UserError, match="^SentencePiece training failed: .*vocab_size") as error:
        train(SENTENCES, tmp_path / "m.model", vocab_size=5)
    assert "\n" not in str(error.value)


def test_sample_is_every_index_or_a_sorted_fixed_subset():
    assert sample_indices(5, 10).tolist() == [0, 1, 2, 3, 4]
    sample = sample_indices(1000, 50)
    assert len(set(sample.tolist())) == 50 and sorted(sample.tolist()) == sample.tolist()
    assert sample.tolist() == sample_indices(1000, 50).tolist()
