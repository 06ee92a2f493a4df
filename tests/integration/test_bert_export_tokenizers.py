"""The tokenizer files of a BERT export (jaxtrans.data.tokenizers.huggingface_tokenizer_files)
for each kind of run tokenizer, without a run: transformers' AutoTokenizer gives the ids
jaxtrans gives (a BPE SentencePiece model; WordPiece, lowercasing or not), and a
SentencePiece model that cannot be converted (char) says why in the notes, nothing written.
A trained run's export is tests/integration/test_bert_export.py's."""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built and read locally

import numpy as np
import pytest
import transformers

from jaxtrans.data.tokenizers.bert_tokenizer import SentencePieceBertTokenizer
from jaxtrans.data.tokenizers.huggingface_tokenizer_files import write_huggingface_tokenizer
from jaxtrans.data.tokenizers.sentencepiece_training import train_sentencepiece
from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer


def test_a_bpe_sentencepiece_tokenizer_converts_exactly_and_a_char_one_says_why_not(tmp_path):
    rng = np.random.default_rng(0)
    words = ["the", "old", "woman", "walked", "to", "a", "river", ",", "café", "naïve"]
    words += ["Ärger", "東京", "big", "city", "①", "ｆｕｌｌ"]
    sentences = [" ".join(rng.choice(words, size=8)) for _ in range(300)]
    odd = [*words, "zzq", "Q"]
    texts = [" ".join(rng.choice(odd, size=rng.integers(0, 12))) for _ in range(300)]
    texts += ["  x  y ", "tab\there", "theriver", "walkedwalked", "the [MASK] walked"]
    for kind, vocab_size in (("bpe", 80), ("char", 40)):
        run, output = tmp_path / kind / "bert_tokenizer", tmp_path / kind / "exported"
        run.mkdir(parents=True)
        output.mkdir()
        train_sentencepiece(
            sentences, run / "spm.model", vocab_size=vocab_size, model_type=kind,
            character_coverage=1.0,
        )  # fmt: skip
        notes = write_huggingface_tokenizer(run, output, max_length=24)
        if kind == "char":
            assert notes == [
                f"tokenizer.json is not written: {run}/spm.model is a char SentencePiece model "
                "and only unigram and bpe models are converted; tokenize with sentencepiece and "
                "that file"
            ]
            assert not (output / "tokenizer.json").exists()
            continue
        assert notes == []
        ours = SentencePieceBertTokenizer(run / "spm.model")
        theirs = transformers.AutoTokenizer.from_pretrained(output)
        for text in texts[:-1]:
            assert theirs(text, add_special_tokens=False)["input_ids"] == ours.encode(text), text
        the, walked = ours.encode("the"), ours.encode("walked")
        assert theirs(texts[-1], add_special_tokens=False)["input_ids"] == [
            *the, ours.mask_id, *walked
        ]  # fmt: skip


@pytest.mark.parametrize("lowercase", [True, False])
def test_the_exported_wordpiece_tokenizer_keeps_the_runs_options(tmp_path, lowercase):
    run = tmp_path / "bert_tokenizer"
    run.mkdir()
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "The", "river", "##s"]
    pieces += ["walk", "##ed", "café", "cafe", ",", "."]
    (run / "vocab.txt").write_text("\n".join(pieces) + "\n")
    (run / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lowercase}))
    output = tmp_path / "exported"
    output.mkdir()
    assert write_huggingface_tokenizer(run, output, max_length=24) == []
    ours = WordPieceTokenizer.from_huggingface(run)
    theirs = transformers.AutoTokenizer.from_pretrained(output)
    for text in ("The rivers walked, Café.", "the [MASK] walked"):
        assert theirs(text, add_special_tokens=False)["input_ids"] == ours.encode(text)
