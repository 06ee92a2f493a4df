"""A BERT directory saved by transformers 5 (tokenizer.json, no vocab.txt) numbers text
exactly as ``transformers.AutoTokenizer`` does, and is exported the same way."""

import json
import os
import random

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the references load from local files only

import pytest
import transformers

from jaxtrans.data.tokenizers.huggingface_tokenizer_files import write_huggingface_tokenizer
from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer
from jaxtrans.errors import UserError
from jaxtrans.tasks.bert import bert_init


def words(text: str) -> list[str]:
    return text.split()


SPECIALS = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = words(
    "the a quick brown fox jump over lazy dog run walk talk cafe café naive un affordable "
    "token ize data set Data The Quick Ünïcode ÉCOLE école , . ! ? ' - ( ) ; : "
    "中 文 语 言 汉 字 北 京 0 1 2 3 4 5 6 7 8 9"
)
PIECES = words("##s ##ed ##ing ##ly ##able ##ization ##ize ##set ##afford ##er ##x ##é")
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
UNKNOWN = ["zebra", "Ωmega", "naïveté", "ÀÉÎÕÜ", "🙂", "§", "Straße", "İstanbul"]
PUNCTUATION = list(",.!?;:'-()\"[]{}")
CHINESE = ["北京是中文汉字的城市。", "我爱 北京 天安门！", "汉字abc语言123，文字"]


def random_texts(seed: int, count: int = 40) -> list[str]:
    """Words of the vocabulary (some upper-cased or glued to a continuation), unknown
    words, punctuation and accents, joined by spaces or nothing."""
    rng = random.Random(seed)
    choices = WORDS + [w + p[2:] for w in WORDS[:20] for p in PIECES[:4]] + UNKNOWN + PUNCTUATION
    texts = []
    for _ in range(count):
        words = [rng.choice(choices) for _ in range(rng.randint(1, 12))]
        words = [w.upper() if rng.random() < 0.2 else w for w in words]
        texts.append("".join(w + rng.choice([" ", " ", "", "  "]) for w in words))
    return texts


def saved_directory(directory, lowercase: bool):
    """What ``BertTokenizerFast(vocab_file).save_pretrained`` writes, without vocab.txt."""
    vocab_file = directory.parent / f"{directory.name}-vocab.txt"
    pieces = SPECIALS + WORDS + PIECES + LETTERS + ["##" + c for c in LETTERS]
    vocab_file.write_text("\n".join(dict.fromkeys(pieces)) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizerFast(str(vocab_file), do_lower_case=lowercase)
    tokenizer.save_pretrained(directory)
    (directory / "vocab.txt").unlink(missing_ok=True)
    assert (directory / "tokenizer.json").is_file() and not (directory / "vocab.txt").exists()
    return directory


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def saved(request, tmp_path_factory):
    return saved_directory(tmp_path_factory.mktemp("saved"), request.param), request.param


def test_ids_equal_transformers_on_random_and_chinese_text(saved):
    directory, lowercase = saved
    ours = WordPieceTokenizer.from_huggingface(directory)
    reference = transformers.AutoTokenizer.from_pretrained(directory)
    assert reference.do_lower_case is lowercase
    texts = random_texts(seed=int(lowercase)) + CHINESE
    for text in texts:
        assert ours.encode(text) == reference.encode(text, add_special_tokens=False), text
    assert ours.encode_batch(texts) == [ours.encode(t) for t in texts]
    assert ours.vocab_size == len(reference)
    ids = (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id)
    names = ("pad", "unk", "cls", "sep", "mask")
    assert ids == tuple(getattr(reference, f"{n}_token_id") for n in names)
    # The sample exercises continuations, unknown words and case, not only whole words.
    pieces = reference.convert_ids_to_tokens(ours.encode(" ".join(texts)))
    assert any(p.startswith("##") for p in pieces) and "[UNK]" in pieces
    cased_pair = [ours.encode(t) for t in ("The Quick", "the quick")]
    assert (cased_pair[0] == cased_pair[1]) is lowercase


def test_tokenizer_config_wins_over_the_normalizer_in_tokenizer_json(tmp_path):
    # transformers rebuilds the normaliser from tokenizer_config.json; so do we.
    directory = saved_directory(tmp_path / "mixed", lowercase=False)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": True}))
    ours = WordPieceTokenizer.from_huggingface(directory)
    reference = transformers.AutoTokenizer.from_pretrained(directory)
    for text in random_texts(seed=5, count=10):
        assert ours.encode(text) == reference.encode(text, add_special_tokens=False), text


def test_a_directory_without_vocab_txt_or_tokenizer_json_names_both(tmp_path):
    for load in (WordPieceTokenizer.from_huggingface, bert_init.huggingface_tokenizer_files):
        with pytest.raises(UserError, match="neither vocab.txt nor tokenizer.json") as error:
            load(tmp_path)
        assert "\n" not in str(error.value)


def test_a_tokenizer_json_of_another_model_kind_is_a_user_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {}}}))
    with pytest.raises(UserError, match="holds no WordPiece model"):
        WordPieceTokenizer.from_huggingface(tmp_path)


def test_the_run_installs_and_exports_tokenizer_json_numbered_alike(tmp_path):
    source = saved_directory(tmp_path / "source", lowercase=False)
    files = bert_init.huggingface_tokenizer_files(source)
    assert [f.name for f in files] == ["tokenizer.json", "tokenizer_config.json"]
    workdir = tmp_path / "run"
    run_tokenizer = bert_init.install_tokenizer(files, workdir)
    assert bert_init.has_run_tokenizer(workdir)
    exported = tmp_path / "exported"
    exported.mkdir()
    notes = write_huggingface_tokenizer(bert_init.tokenizer_dir(workdir), exported, 128)
    assert notes == []
    reference = transformers.AutoTokenizer.from_pretrained(exported)
    assert reference.model_max_length == 128
    for text in random_texts(seed=7, count=20) + CHINESE:
        expected = run_tokenizer.encode(text)
        assert reference.encode(text, add_special_tokens=False) == expected, text
