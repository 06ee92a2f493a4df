"""SentencePiece training, one function for both tokenizers: the reserved ids, errors, and
the same models as the 0996837 version trained for the same text and settings."""

import json
import pathlib
import random

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


def chinese_lines(distinct: int = 2000, count: int = 400, seed: int = 0) -> list[str]:
    """Random lines of ``distinct`` CJK ideographs (U+4E00...), every one of them used."""
    rng = random.Random(seed)
    characters = [chr(0x4E00 + i) for i in range(distinct)]
    lines = ["".join(characters[i : i + 20]) for i in range(0, distinct, 20)]
    lines += ["".join(rng.choices(characters, k=30)) for _ in range(count)]
    return lines


def test_a_vocabulary_smaller_than_the_characters_names_both_keys_and_the_sizes(tmp_path):
    with pytest.raises(UserError) as error:
        train_sentencepiece(
            chinese_lines(), tmp_path / "m.model", vocab_size=500, model_type="unigram",
            character_coverage=1.0,
        )  # fmt: skip
    message = str(error.value)
    # 2000 ideographs and "▁" (SentencePiece's space mark), plus the 7 reserved pieces.
    assert "--config.data.vocab_size=500 is too small" in message
    assert "2001 characters" in message and "--config.data.vocab_size=2008 or more" in message
    assert "--config.data.character_coverage" in message and "\n" not in message
    assert "INTERNAL" not in message and "trainer_interface" not in message


def test_the_suggested_vocabulary_size_trains(tmp_path):
    size = train_sentencepiece(
        chinese_lines(), tmp_path / "m.model", vocab_size=2008, model_type="unigram",
        character_coverage=1.0,
    )  # fmt: skip
    assert size >= 2008


def test_a_bert_run_on_chinese_text_says_which_key_to_change(tmp_path):
    data = ml_collections.ConfigDict(
        dict(vocab_size=300, spm_model_type="unigram", character_coverage=0.9995,
             spm_max_sentences=10_000, hf_checkpoint="")
    )  # fmt: skip
    documents = [chinese_lines(distinct=1000, count=100)]
    with pytest.raises(UserError, match=r"--config.data.vocab_size=300 is too small .*"
                       r"--config.data.vocab_size=\d+ or more, or lower "
                       r"--config.data.character_coverage"):  # fmt: skip
        load_or_train_bert_tokenizer(data, str(tmp_path), documents)
    assert not (tmp_path / "bert_tokenizer").exists()


def test_an_exact_vocabulary_larger_than_the_text_allows_names_the_largest(tmp_path):
    with pytest.raises(UserError) as error:
        train_sentencepiece(
            SENTENCES, tmp_path / "m.model", vocab_size=5000, model_type="unigram",
            character_coverage=1.0, hard_vocab_limit=True,
        )  # fmt: skip
    message = str(error.value)
    largest = int(message.split("the largest vocabulary it allows is ")[1].split(":")[0])
    assert "--config.data.vocab_size=5000 is more pieces than the training text gives" in message
    assert f"set --config.data.vocab_size={largest} or less" in message and "\n" not in message
    # The size named trains exactly, one more does not.
    exact = dict(model_type="unigram", character_coverage=1.0, hard_vocab_limit=True)
    assert train_sentencepiece(SENTENCES, tmp_path / "a", vocab_size=largest, **exact) == largest
    with pytest.raises(UserError, match=f"allows is {largest}"):
        train_sentencepiece(SENTENCES, tmp_path / "b", vocab_size=largest + 1, **exact)


@pytest.mark.parametrize("coverage", [0.5, 0.97, 1.5, 0.0])
def test_a_character_coverage_out_of_range_names_the_key_and_the_range(tmp_path, coverage):
    with pytest.raises(UserError) as error:
        train_sentencepiece(
            SENTENCES, tmp_path / "m.model", vocab_size=30, model_type="unigram",
            character_coverage=coverage,
        )  # fmt: skip
    message = str(error.value)
    key = f"--config.data.character_coverage={coverage}"
    assert message.startswith(f"SentencePiece training failed: {key} is out of range")
    assert "0.98 to 1.0" in message and "\n" not in message
