"""data.tokenizer = a Hugging Face tokenizer: its special tokens on jaxtrans's reserved
ids, readable decoding, one-line errors, and a tiny run through train.py and evaluate.py
with a WordPiece vocabulary laid out like bert-base-multilingual-cased's."""

import json
import os
import subprocess
import sys

import pytest
import tokenizers
from paths import REPO
from tiny_configs import TINY_TRANSLATION
from tokenizers.implementations import BertWordPieceTokenizer

from jaxtrans.data.reserved_pieces import BOS_ID, EOS_ID, PAD_ID
from jaxtrans.data.tokenizers.pretrained_tokenizer import (
    PretrainedTokenizer,
    PretrainedVocabulary,
    read_pretrained,
)
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.sources import training_pairs
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer, load_tokenizer
from jaxtrans.errors import UserError

CHINESE = ["我们喜欢猫。", "他们在花园里唱歌。", "猫喜欢唱歌吗？"]


def demo_texts(size: int = 300) -> list[str]:
    data = get_data_config()
    data.demo_train_size = size
    pairs = training_pairs(data)
    return [side for i in range(len(pairs)) for side in pairs[i]] + CHINESE


def write_multilingual_style_vocab(directory, texts) -> str:
    """vocab.txt as bert-base-multilingual-cased lays it out: [PAD] 0, [unused1..99],
    [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, then the learned pieces (cased)."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    learner = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    learner.train_from_iterator(texts, vocab_size=400, special_tokens=specials)
    learned = sorted(learner.get_vocab().items(), key=lambda item: item[1])
    pieces = [token for token, _ in learned if token not in specials]
    lines = ["[PAD]", *(f"[unused{i}]" for i in range(1, 100)), *specials[1:], *pieces]
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": False}, f)
    return str(directory)


def vocab_lines(directory) -> list[str]:
    with open(os.path.join(directory, "vocab.txt"), encoding="utf-8") as f:
        return f.read().split()


@pytest.fixture(scope="module")
def wordpiece_dir(tmp_path_factory):
    return write_multilingual_style_vocab(tmp_path_factory.mktemp("mbert"), demo_texts())


def test_bert_style_special_tokens_take_the_reserved_ids(wordpiece_dir):
    tokenizer = PretrainedVocabulary(read_pretrained(wordpiece_dir), "test")
    assert tokenizer.special_tokens == {"pad": "[PAD]", "eos": "[SEP]", "bos": "[CLS]"}
    assert [tokenizer.to_model[i] for i in (0, 102, 101)] == [PAD_ID, EOS_ID, BOS_ID]
    lines = vocab_lines(wordpiece_dir)
    assert tokenizer.vocab_size == len(lines)
    assert sorted(tokenizer.to_model) == list(range(len(lines)))
    ids = tokenizer.encode_batch(demo_texts(50))
    assert not {PAD_ID, EOS_ID, BOS_ID} & {i for row in ids for i in row}


def test_decoding_joins_word_pieces_and_chinese_characters(wordpiece_dir):
    tokenizer = PretrainedTokenizer(PretrainedVocabulary(read_pretrained(wordpiece_dir), "test"))
    english = demo_texts(5)[1]
    glued = "".join(english.split()[:3])  # one word the vocabulary has only in pieces
    pieces = read_pretrained(wordpiece_dir).encode(glued, add_special_tokens=False).tokens
    assert len(pieces) > 1 and pieces[1].startswith("##")
    for text in (english, f"{english} {glued}"):
        ids = tokenizer.encode_target(text)
        assert tokenizer.decode_target([BOS_ID, *ids, EOS_ID, 7, 8]) == text
    for sentence in CHINESE:
        assert tokenizer.decode_target(tokenizer.encode_target(sentence)) == sentence


def test_a_tokenizer_json_without_a_start_token_gets_one_more_id(tmp_path):
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<pad>", "</s>"]
    )
    bpe.train_from_iterator(demo_texts(100), trainer)
    bpe.save(str(tmp_path / "tokenizer.json"))
    tokenizer = PretrainedVocabulary(read_pretrained(str(tmp_path / "tokenizer.json")), "test")
    size = bpe.get_vocab_size()
    assert tokenizer.vocab_size == size + 1 and tokenizer.special_tokens["bos"] is None
    assert [tokenizer.to_model[i] for i in (1, 2, size)] == [PAD_ID, EOS_ID, BOS_ID]
    text = demo_texts(3)[0] + " 我们喜欢猫。"
    assert tokenizer.decode(tokenizer.encode_batch([text])[0]) == text


@pytest.mark.parametrize("tokens, missing", [(["[UNK]", "[SEP]"], "padding"), (["[PAD]"], "end")])
def test_a_vocabulary_without_pad_or_end_token_is_a_one_line_error(tmp_path, tokens, missing):
    (tmp_path / "vocab.txt").write_text("\n".join([*tokens, "[UNK]", "a", "b"]) + "\n")
    with pytest.raises(UserError, match=f"no {missing} token") as error:
        PretrainedVocabulary(read_pretrained(str(tmp_path)), str(tmp_path))
    assert "\n" not in str(error.value)


def test_a_missing_tokenizer_path_is_a_one_line_error(tmp_path):
    with pytest.raises(UserError, match="no such file or directory"):
        read_pretrained(str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match="neither tokenizer.json nor vocab.txt"):
        read_pretrained(str(tmp_path))


def run(program: str, *flags: str) -> None:
    result = subprocess.run([sys.executable, program, *flags], capture_output=True, text=True,
                            timeout=300, cwd=REPO)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow
def test_a_tiny_run_with_a_wordpiece_vocabulary_trains_and_evaluates(wordpiece_dir, tmp_path):
    workdir = tmp_path / "run"
    overrides = {**TINY_TRANSLATION, "train.num_steps": 4, "train.compilation_cache_dir": ""}
    run("train.py", "--config", "configs/demo.py", f"--workdir={workdir}",
        f"--config.data.tokenizer={wordpiece_dir}",
        *(f"--config.{k}={v}" for k, v in overrides.items()))  # fmt: skip
    copied = workdir / "tokenizer" / "huggingface"
    assert (copied / "tokenizer.json").is_file() and (copied / "vocab.txt").is_file()
    config = json.loads((workdir / "config.json").read_text())
    lines = vocab_lines(wordpiece_dir)
    assert config["model"]["vocab_size"] == len(lines)
    os.rename(wordpiece_dir, wordpiece_dir + ".moved")  # the workdir must need nothing else
    try:
        run("evaluate.py", f"--workdir={workdir}", "--split=test", "--beam_size=1",
            "--max_extra_length=3")  # fmt: skip
    finally:
        os.rename(wordpiece_dir + ".moved", wordpiece_dir)
    (report,) = (workdir / "eval").glob("test-step4-*.json")
    assert (
        json.loads(report.read_text())["num_sentences"] == TINY_TRANSLATION["data.demo_test_size"]
    )


def test_a_target_tokenizer_of_its_own_gives_the_target_side_its_vocabulary(
    wordpiece_dir, tmp_path
):
    english = [t for t in demo_texts(100) if t.isascii()]
    target_dir = write_multilingual_style_vocab(tmp_path / "target", english[:50])
    data = get_data_config()
    data.update(tokenizer=wordpiece_dir, target_tokenizer=target_dir, demo_train_size=50)
    tokenizer = load_or_train_tokenizer(data, str(tmp_path / "run"))
    assert not tokenizer.shared
    assert tokenizer.target_vocab_size == len(vocab_lines(target_dir))
    assert tokenizer.source_vocab_size == len(vocab_lines(wordpiece_dir))
    restored = load_tokenizer(str(tmp_path / "run"))
    text = english[0]
    assert restored.decode_target(restored.encode_target(text)) == text
    assert restored.encode_target(text) == tokenizer.encode_target(text)
