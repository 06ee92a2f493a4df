"""WordPiece tokenisation equals Hugging Face's BERT tokenizers on the same vocab.txt.

Two references: ``BertTokenizerFast`` (the ``tokenizers`` pipeline) and the pure-Python
``BertTokenizerLegacy``, which shares no code with the library we wrap.
"""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the references load from local files only

import pytest
import transformers
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer
from jaxtrans.errors import UserError

SPECIALS = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def words(text: str) -> list[str]:
    return text.split()


WORDS = words(
    "the a quick brown fox jump over lazy dog run walk talk cafe café naive un affordable "
    "token ize data set Data The Quick , . ! ? ' - ( ) 中 文 语 言 0 1 2 3 4 5 6 7 8 9"
)
PIECES = words("##s ##ed ##ing ##ly ##able ##ization ##ize ##set ##afford ##er ##x")
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Unaffordable tokenization!  Data-sets (dataset) walked, talking; runner?",
    "Café naïve CAFÉ, É\u0301 accents and \t tabs \n newlines",
    "中文语言 mixed with English 2024 and 3.14",
    "emoji 🙂 and symbols § ¶ ™ become [UNK]s, zzzzqx too",
    "control\u0000chars\u200b and \u00a0 spaces",
    "",
]


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("wordpiece")
    pieces = SPECIALS + WORDS + PIECES + LETTERS + ["##" + c for c in LETTERS]
    (directory / "vocab.txt").write_text("\n".join(dict.fromkeys(pieces)) + "\n")
    return directory


@pytest.mark.parametrize("lowercase", [True, False])
def test_ids_equal_huggingface_fast_and_legacy_tokenizers(vocab_dir, lowercase):
    ours = WordPieceTokenizer(vocab_dir / "vocab.txt", lowercase=lowercase)
    fast = transformers.BertTokenizerFast.from_pretrained(vocab_dir, do_lower_case=lowercase)
    legacy = BertTokenizerLegacy(str(vocab_dir / "vocab.txt"), do_lower_case=lowercase)
    for text in TEXTS:
        expected = fast.encode(text, add_special_tokens=False)
        assert ours.encode(text) == expected, text
        assert legacy.encode(text, add_special_tokens=False) == expected, text
    assert ours.encode_batch(TEXTS) == [ours.encode(t) for t in TEXTS]
    # The sample exercises continuations and unknown words, not only whole words.
    pieces = fast.convert_ids_to_tokens(ours.encode(" ".join(TEXTS)))
    assert any(p.startswith("##") for p in pieces) and "[UNK]" in pieces


def test_special_ids_come_from_the_vocabulary(vocab_dir):
    tok = WordPieceTokenizer(vocab_dir / "vocab.txt")
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 3, 4, 5, 6)
    assert tok.special_ids == frozenset(range(7))  # [unusedN] are special too
    assert tok.vocab_size == len((vocab_dir / "vocab.txt").read_text().splitlines())


def test_checkpoint_directory_options_are_honoured(vocab_dir):
    (vocab_dir / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    try:
        cased = WordPieceTokenizer.from_huggingface(vocab_dir)
    finally:
        (vocab_dir / "tokenizer_config.json").unlink()
    uncased = WordPieceTokenizer.from_huggingface(vocab_dir)
    assert cased.encode("The Quick") != uncased.encode("The Quick")
    assert uncased.encode("The Quick") == uncased.encode("the quick")


def test_missing_vocab_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="vocab.txt"):
        WordPieceTokenizer.from_huggingface(tmp_path)


def test_vocab_without_bert_specials_is_a_user_error(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(UserError, match=r"\[CLS\]"):
        WordPieceTokenizer(tmp_path / "vocab.txt")
