"""Words with character offsets (data/tokenizers/words.py) against two independent references:
the pure-Python ``BasicTokenizer`` of transformers' legacy BERT tokenizer (the words) and
the ``tokenizers`` fast BERT pipeline (the offsets of the pieces of each word)."""

import os
import unicodedata

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import transformers
from test_bert_wordpiece import TEXTS, vocab_dir  # noqa: F401  (fixture)
from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer

from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer
from jaxtrans.data.tokenizers.words import encode_words, split_words

MORE_TEXTS = [
    "Steve Jobs founded Apple in Cupertino, California, in 1976.",
    "苹果公司的总部位于加州库比蒂诺。乔布斯在1976年创立了它！",
    "  leading and trailing spaces  ",
    "punctuation...!?--(nested)[brackets]{and}<angles>",
    "e-mail: someone@example.com, cost $3.50/item",
]


@pytest.mark.parametrize("text", TEXTS + MORE_TEXTS)
def test_words_equal_berts_basic_tokenizer_and_offsets_point_at_them(text):
    words = split_words(text)
    reference = BasicTokenizer(do_lower_case=False, strip_accents=False).tokenize(text)
    assert [w.text for w in words] == reference
    for word in words:
        covered = text[word.start : word.end]
        kept = [c for c in covered if c in "\t\n\r" or unicodedata.category(c)[0] != "C"]
        assert "".join(kept) == word.text
    starts = [w.start for w in words]
    assert starts == sorted(starts)


@pytest.mark.parametrize("lowercase", [True, False])
def test_pieces_of_words_equal_the_pieces_of_the_text(vocab_dir, lowercase):  # noqa: F811
    ours = WordPieceTokenizer(vocab_dir / "vocab.txt", lowercase=lowercase)
    fast = transformers.BertTokenizerFast.from_pretrained(vocab_dir, do_lower_case=lowercase)
    # Words are encoded one by one, so a special token written in the text ("[UNK]") is
    # three words here, while the whole-text tokenizer matches it as one token.
    for text in [t for t in TEXTS + MORE_TEXTS if "[UNK]" not in t]:
        words = split_words(text)
        ids, word_index = encode_words(ours, [w.text for w in words])
        encoding = fast(text, add_special_tokens=False, return_offsets_mapping=True)
        assert ids == encoding["input_ids"], text
        # Each piece lies inside the word it is said to belong to.
        for index, (start, end) in zip(word_index, encoding["offset_mapping"], strict=True):
            assert words[index].start <= start and end <= words[index].end, text
        assert sorted(set(word_index)) == list(range(len(words)))


def test_a_word_with_no_piece_becomes_unk(vocab_dir):  # noqa: F811
    tokenizer = WordPieceTokenizer(vocab_dir / "vocab.txt", lowercase=True)
    # A combining accent alone is stripped to nothing by lower-casing BERT.
    assert tokenizer.encode("\u0301") == []
    ids, word_index = encode_words(tokenizer, ["cafe", "\u0301"])
    assert ids[-1] == tokenizer.unk_id and word_index[-1] == 1
    assert encode_words(tokenizer, []) == ([], [])
