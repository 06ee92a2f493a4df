"""The BERT demo corpus, the SentencePiece tokenizer trained on it, and the data config
path a training run takes (documents -> tokenizer -> batches)."""

import os
import re

import numpy as np
import pytest

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.data.bert.bert_data_config import get_bert_data_config
from jaxtrans.data.bert.bert_pipeline import (
    local_batch_size,
    pretraining_documents,
    pretraining_eval_batches,
    pretraining_train_iterator,
)
from jaxtrans.data.bert.demo import NAMES, demo_documents, write_demo_corpus
from jaxtrans.data.bert.pretraining_examples import BATCH_KEYS, read_documents
from jaxtrans.data.tokenizers.bert_tokenizer import (
    SentencePieceBertTokenizer,
    load_or_train_bert_tokenizer,
)
from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer
from jaxtrans.errors import UserError


@pytest.fixture(scope="module")
def data_config():
    data = get_bert_data_config()
    data.demo_documents = 300
    data.demo_dev_documents = 40
    data.vocab_size = 400
    data.max_seq_length = 64
    data.max_predictions_per_seq = 10
    data.batch_size = 16
    data.prefetch_batches = 0
    return data


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("bert_run"))


@pytest.fixture(scope="module")
def tokenizer(data_config, workdir):
    return load_or_train_bert_tokenizer(
        data_config, workdir, pretraining_documents(data_config, "train")
    )


def names_in(text: str) -> set[str]:
    return set(re.findall(r"[A-Z][a-z]+", text)) & set(NAMES)


def test_demo_corpus_is_a_pure_function_of_the_seed():
    assert demo_documents(50, seed=7) == demo_documents(50, seed=7)
    assert demo_documents(50, seed=7) != demo_documents(50, seed=8)


def test_each_demo_document_tells_one_animals_story():
    documents = demo_documents(200, seed=0)
    for doc in documents:
        assert len(doc) >= 5
        (subject,) = names_in(doc[0])  # the first sentence introduces the animal
        mentions = sum(subject in sentence for sentence in doc)
        assert mentions >= len(doc) // 2
    assert len({doc[0] for doc in documents}) > 190  # documents differ


def test_written_demo_corpus_reads_back_as_the_same_documents(tmp_path):
    write_demo_corpus(tmp_path / "demo.txt", num_documents=30, seed=3)
    assert read_documents([tmp_path / "demo.txt"]) == demo_documents(30, seed=3)


def test_sentencepiece_tokenizer_keeps_the_reserved_bert_ids(tokenizer, data_config):
    assert isinstance(tokenizer, SentencePieceBertTokenizer)
    assert (tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (
        vocab.PAD_ID,
        vocab.CLS_ID,
        vocab.SEP_ID,
        vocab.MASK_ID,
    )
    model = tokenizer._model
    assert [model.id_to_piece(i) for i in (4, 5, 6)] == ["[CLS]", "[SEP]", "[MASK]"]
    sentences = [s for doc in pretraining_documents(data_config, "train")[:50] for s in doc]
    for sentence, ids in zip(sentences, tokenizer.encode_batch(sentences), strict=True):
        assert not set(ids) & tokenizer.special_ids  # text never encodes to a special id
        assert tokenizer.decode(ids) == sentence


def test_tokenizer_is_trained_once_per_workdir(tokenizer, data_config, workdir):
    model_file = os.path.join(workdir, "bert_tokenizer", "spm.model")
    before = os.stat(model_file).st_mtime_ns
    again = load_or_train_bert_tokenizer(data_config, workdir, documents=[])
    assert os.stat(model_file).st_mtime_ns == before
    assert again.encode("Mira is a fox.") == tokenizer.encode("Mira is a fox.")


def test_hf_checkpoint_selects_its_wordpiece_vocabulary(tmp_path, data_config):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nfox\n")
    config = data_config.copy_and_resolve_references()
    config.hf_checkpoint = str(tmp_path)
    chosen = load_or_train_bert_tokenizer(config, str(tmp_path / "run"), documents=[])
    assert isinstance(chosen, WordPieceTokenizer) and chosen.encode("Fox") == [5]


def test_next_sentence_is_predictable_from_the_demo_text(tokenizer, data_config):
    # "B names an animal of A (or none)" already separates true from random
    # continuations far better than chance: the task is learnable.
    documents = pretraining_documents(data_config, "train")
    batches = pretraining_train_iterator(data_config, tokenizer, documents, seed=0)
    hits = total = 0
    for _ in range(16):
        batch = next(batches)
        for i in range(len(batch["input_ids"])):
            ids = batch["input_ids"][i].copy()
            chosen = batch["masked_weights"][i] == 1
            ids[batch["masked_positions"][i][chosen]] = batch["masked_ids"][i][chosen]
            real, types = batch["attention_mask"][i] == 1, batch["token_type_ids"][i]
            a = names_in(tokenizer.decode(ids[real & (types == 0)].tolist()))
            b = names_in(tokenizer.decode(ids[real & (types == 1)].tolist()))
            guess = 0 if (a & b or not b) else 1
            hits += guess == batch["next_sentence_label"][i]
            total += 1
    assert hits / total > 0.75


def test_training_batches_and_fixed_dev_batches(tokenizer, data_config):
    documents = pretraining_documents(data_config, "train")
    batch = next(pretraining_train_iterator(data_config, tokenizer, documents, seed=0))
    assert sorted(batch) == sorted(BATCH_KEYS)
    assert batch["input_ids"].shape == (16, 64) and batch["masked_ids"].shape == (16, 10)
    dev_documents = pretraining_documents(data_config, "dev")
    assert not {s for d in dev_documents for s in d[:1]} & {s for d in documents for s in d[:1]}
    dev = pretraining_eval_batches(data_config, tokenizer, dev_documents, 2, 8)
    again = pretraining_eval_batches(data_config, tokenizer, dev_documents, 2, 8)
    for x, y in zip(dev, again, strict=True):
        np.testing.assert_array_equal(x["input_ids"], y["input_ids"])


def test_configured_text_files_replace_the_demo(tmp_path, data_config):
    write_demo_corpus(tmp_path / "a.txt", num_documents=5, seed=1)
    config = data_config.copy_and_resolve_references()
    config.train = f"{tmp_path / 'a.txt'},"
    assert pretraining_documents(config, "train") == demo_documents(5, seed=1)
    config.train = str(tmp_path / "missing.txt")
    with pytest.raises(UserError, match="not found"):
        pretraining_documents(config, "train")


def test_global_batch_must_split_evenly_over_processes():
    assert local_batch_size(32, 4) == 8
    with pytest.raises(UserError, match="not divisible"):
        local_batch_size(30, 4)
