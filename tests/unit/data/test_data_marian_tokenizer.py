"""data.tokenizer = a Marian (opus-mt) directory: the ids and texts of
transformers.MarianTokenizer through the reserved-id permutation, the workdir copy, one-line
errors; and the inverse, a run's SentencePiece tokenizer written as Marian files that
MarianTokenizer reads to the run's own ids.

The Marian directories are built here as transformers' conversion script builds them from
a Marian model: SentencePiece models for cutting, and a vocabulary of their pieces in
Marian's order (``</s>`` 0, ``<unk>`` 1, then by frequency, ``<pad>`` added last).
"""

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import transformers
from marian_directories import (
    CHINESE,
    GERMAN,
    SPANISH,
    corpus,
    marian_directory,
    write_json,
)

from jaxtrans.data.reserved_pieces import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from jaxtrans.data.tokenizers.marian_tokenizer import read_marian
from jaxtrans.data.tokenizers.pretrained_tokenizer import reserved_ids_permutation
from jaxtrans.data.tokenizers.sentencepiece_training import train_sentencepiece
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.marian_tokenizer_files import (
    huggingface_rows,
    write_marian_tokenizer,
)
from jaxtrans.data.translation.tokenizer import (
    METADATA_FILE,
    Tokenizer,
    load_or_train_tokenizer,
    tokenizer_dir,
)
from jaxtrans.data.translation.tokenizer import load_tokenizer as load_workdir_tokenizer
from jaxtrans.errors import UserError
from jaxtrans.models import TransformerConfig
from jaxtrans.models.marian.marian_from_huggingface import marian_to_model_ids
from jaxtrans.models.marian.marian_to_huggingface import token_rows

# MarianTokenizer asks for sacremoses, which it does not use to cut text.
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

UNSEEN = "Жж 😀 ∑ ﷺ"


def random_text(count: int, seed: int = 1) -> list[str]:
    """Strings of characters drawn from the three languages, digits, punctuation, spaces
    and characters no model has seen."""
    alphabet = "".join(set("".join(GERMAN + SPANISH + CHINESE))) + "0123456789 ,.!?-'\"" + UNSEEN
    rng = random.Random(seed)
    return ["".join(rng.choices(alphabet, k=rng.randint(1, 40))) for _ in range(count)]


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory):
    """German -> Spanish, one vocabulary, target language codes, the piece ▁Z left out."""
    german, spanish = corpus(GERMAN), corpus(SPANISH)
    path = tmp_path_factory.mktemp("marian") / "opus-mt-de-es"
    codes = (">>spa<<", ">>deu<<")
    return marian_directory(path, german, spanish, separate=False, codes=codes, drop=("▁Z",))


@pytest.fixture(scope="module")
def separate_dir(tmp_path_factory):
    """Chinese -> German, a vocabulary each."""
    chinese, german = corpus(CHINESE), corpus(GERMAN)
    path = tmp_path_factory.mktemp("marian") / "opus-mt-zh-de"
    return marian_directory(path, chinese, german, separate=True)


def reference(directory) -> transformers.MarianTokenizer:
    return transformers.MarianTokenizer.from_pretrained(directory)


def to_model(vocabulary, ids) -> list[int]:
    return [int(vocabulary.to_model[i]) for i in ids]


def assert_same_ids(directory, texts) -> None:
    """Our ids, with EOS appended, are MarianTokenizer's mapped through the permutation,
    for both sides."""
    ours, theirs = read_marian(directory), reference(directory)
    source_ids = theirs(texts).input_ids
    target_ids = theirs(text_target=texts).input_ids
    for text, source, target in zip(texts, source_ids, target_ids, strict=True):
        assert ours.encode_source(text) + [EOS_ID] == to_model(ours.source_vocabulary, source)
        assert ours.encode_target(text) + [EOS_ID] == to_model(ours.target_vocabulary, target)
    assert ours.encode_source_batch(texts) == [ours.encode_source(t) for t in texts]


def test_permutation_puts_pad_eos_and_the_decoder_start_on_the_reserved_ids():
    size = 10  # </s> 0, <unk> 1, ..., <pad> 9; the decoder start is the extra id 10
    to_model = reserved_ids_permutation(size, size - 1, 0, None).tolist()
    assert to_model == [1, 9, 10, 3, 4, 5, 6, 7, 8, 0, 2]


def test_the_tokenizer_numbers_tokens_as_the_model_loader_numbers_rows(shared_dir, separate_dir):
    for directory in (shared_dir, separate_dir):
        tokenizer = read_marian(directory)
        for side in (tokenizer.source_vocabulary, tokenizer.target_vocabulary):
            pieces = side.pieces
            expected = marian_to_model_ids(len(pieces), pieces["<pad>"], pieces["</s>"])
            np.testing.assert_array_equal(side.to_model, expected)
    for size, pad, eos in [(10, 9, 0), (10, 0, 1), (10, 2, 5), (5, 1, 0), (8, 4, 2)]:
        np.testing.assert_array_equal(
            reserved_ids_permutation(size, pad, eos, None), marian_to_model_ids(size, pad, eos)
        )


def test_source_and_target_ids_equal_marian_tokenizer_on_real_text(shared_dir):
    assert_same_ids(shared_dir, GERMAN + SPANISH + CHINESE[:5] + ["", "  ", "Ich. ¿Qué?"])


def test_source_and_target_ids_equal_marian_tokenizer_on_random_text(shared_dir):
    assert_same_ids(shared_dir, random_text(200))


def test_language_codes_are_one_piece_known_or_unknown(shared_dir):
    texts = [">>spa<< Ich habe Zeit.", ">>deu<<Hoy.", ">>fra<< Der Hund.", ">>spa<<", ">> no code"]
    assert_same_ids(shared_dir, texts)
    tokenizer = read_marian(shared_dir)
    unk = tokenizer.source_vocabulary.to_model[tokenizer.source_vocabulary.pieces["<unk>"]]
    spa = tokenizer.source_vocabulary.to_model[tokenizer.source_vocabulary.pieces[">>spa<<"]]
    assert tokenizer.encode_source(">>spa<< Ich")[0] == spa
    assert tokenizer.encode_source(">>fra<< Ich")[0] == unk  # a code the vocabulary lacks


def test_unknown_pieces_and_special_tokens_in_text_are_numbered_as_marian_does(shared_dir):
    texts = [f"Zeit {UNSEEN} Zug", "Zug</s>Zeit", "a <unk> b <pad>", "<pad>>>spa<< Hoy"]
    assert_same_ids(shared_dir, texts)
    tokenizer = read_marian(shared_dir)
    pieces = tokenizer.source_vocabulary.pieces
    unk = tokenizer.source_vocabulary.to_model[pieces["<unk>"]]
    assert "▁Z" not in pieces and tokenizer.encode_source("Zug")[0] == unk
    assert tokenizer.encode_source("a <pad>")[-1] == PAD_ID


def test_decoding_equals_marian_decode_skipping_special_tokens(shared_dir):
    ours, theirs = read_marian(shared_dir), reference(shared_dir)
    texts = SPANISH + [f"{SPANISH[0]} {UNSEEN}", ">>spa<< Hoy", "<pad> Hoy", ""]
    for text in texts + random_text(50):
        marian_ids = theirs(text_target=text).input_ids
        expected = theirs.decode(marian_ids, skip_special_tokens=True)
        assert ours.decode_target(to_model(ours.target_vocabulary, marian_ids)) == expected


def test_decoding_cleans_up_spaces_when_the_config_says_so(shared_dir, tmp_path):
    copy = changed_copy(
        shared_dir,
        tmp_path,
        edit_json("tokenizer_config.json", lambda c: c.update(clean_up_tokenization_spaces=True)),
    )
    ours, theirs = read_marian(copy), reference(copy)
    for text in ["Hoy no tengo tiempo .", "¿ Puede ayudarme , por favor ?", "es 's"]:
        marian_ids = theirs(text_target=text).input_ids
        expected = theirs.decode(marian_ids, skip_special_tokens=True)
        assert ours.decode_target(to_model(ours.target_vocabulary, marian_ids)) == expected
    assert ours.decode_target(ours.encode_target("Hoy no tengo tiempo .")) == "Hoy no tengo tiempo."


def test_decoding_with_separate_vocabularies_joins_the_target_vocabularys_pieces(separate_dir):
    """As MarianTokenizer.convert_tokens_to_string joins the pieces of its target
    vocabulary. (Its decode, in transformers 5, numbers the special tokens by the source
    vocabulary, so it takes the target piece on the source <pad>'s id for <pad>.)"""
    ours, theirs = read_marian(separate_dir), reference(separate_dir)
    specials = {theirs.target_encoder[p] for p in ("</s>", "<unk>", "<pad>")}
    for text in GERMAN + [f"{GERMAN[0]} {UNSEEN}", ">>deu<< Hallo", ""] + random_text(50):
        marian_ids = theirs(text_target=text).input_ids
        pieces = [theirs.decoder[i] for i in marian_ids if i not in specials]
        expected = theirs.convert_tokens_to_string(pieces)
        assert ours.decode_target(to_model(ours.target_vocabulary, marian_ids)) == expected


def test_separate_vocabularies_number_each_side_by_its_own(separate_dir):
    assert_same_ids(separate_dir, CHINESE + GERMAN + random_text(100, seed=2))
    tokenizer = read_marian(separate_dir)
    with open(os.path.join(separate_dir, "target_vocab.json"), encoding="utf-8") as f:
        target_size = len(json.load(f))
    assert not tokenizer.shared and tokenizer.target_vocab_size == target_size + 1
    assert tokenizer.source_vocab_size != tokenizer.target_vocab_size


def test_shared_vocabulary_is_one_id_space_of_vocab_size_plus_the_start(shared_dir):
    tokenizer = read_marian(shared_dir)
    size = len(reference(shared_dir).encoder)
    assert tokenizer.shared
    assert tokenizer.source_vocab_size == tokenizer.target_vocab_size == size + 1


def test_the_workdir_copy_is_self_contained(shared_dir, tmp_path):
    copy = shutil.copytree(shared_dir, tmp_path / "opus-mt")
    data = get_data_config()
    data.tokenizer = str(copy)
    workdir = str(tmp_path / "run")
    first = load_or_train_tokenizer(data, workdir)
    shutil.rmtree(copy)
    again = load_workdir_tokenizer(workdir)
    assert sorted(os.listdir(os.path.join(tokenizer_dir(workdir), "marian"))) == sorted(
        os.listdir(shared_dir)
    )
    with open(os.path.join(tokenizer_dir(workdir), METADATA_FILE)) as f:
        assert json.load(f)["kind"] == "marian"
    assert again.encode_source_batch(GERMAN) == first.encode_source_batch(GERMAN)
    assert again.encode_target_batch(SPANISH) == read_marian(shared_dir).encode_target_batch(
        SPANISH
    )
    again.check_vocab_size(first.source_vocab_size)


def changed_copy(directory, tmp_path, change) -> str:
    copy = str(shutil.copytree(directory, tmp_path / "broken"))
    change(copy)
    return copy


def edit_json(name, edit):
    def change(copy):
        path = os.path.join(copy, name)
        with open(path, encoding="utf-8") as f:
            contents = json.load(f)
        edit(contents)
        write_json(path, contents)

    return change


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: os.remove(os.path.join(d, "source.spm")), "source.spm: no such file"),
        (lambda d: os.remove(os.path.join(d, "vocab.json")), "vocab.json: no such file"),
        (edit_json("vocab.json", lambda v: v.pop("</s>")), "vocab.json: has no </s>"),
        (edit_json("vocab.json", lambda v: v.pop("<pad>")), "vocab.json: has no <pad>"),
        (edit_json("vocab.json", lambda v: v.pop("▁")), "the ids are not 0.."),
        (edit_json("vocab.json", lambda v: v.update(x="1")), "the id of 'x' is not an integer"),
        (
            lambda d: Path(d, "vocab.json").write_text("{"),
            "vocab.json: not readable JSON",
        ),
        (
            lambda d: Path(d, "target.spm").write_bytes(b"not a model"),
            "target.spm: not a SentencePiece model",
        ),
        (
            edit_json("tokenizer_config.json", lambda c: c.update(separate_vocabs=True)),
            "target_vocab.json: no such file, but tokenizer_config.json says separate_vocabs",
        ),
        (
            edit_json("special_tokens_map.json", lambda c: c.update(eos_token="<eos>")),
            "special_tokens_map.json: eos_token is '<eos>'",
        ),
    ],
)
def test_a_broken_directory_is_a_one_line_error_naming_the_file(
    shared_dir, tmp_path, change, message
):
    copy = changed_copy(shared_dir, tmp_path, change)
    data = get_data_config()
    data.tokenizer = copy
    with pytest.raises(UserError) as raised:
        load_or_train_tokenizer(data, str(tmp_path / "run"))
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert not os.path.exists(tokenizer_dir(str(tmp_path / "run")))


def test_a_marian_directory_with_a_target_tokenizer_is_an_error(shared_dir, tmp_path):
    data = get_data_config()
    data.tokenizer, data.target_tokenizer = shared_dir, shared_dir
    with pytest.raises(UserError, match="leave --config.data.target_tokenizer empty"):
        load_or_train_tokenizer(data, str(tmp_path / "run"))


# The inverse: a run's SentencePiece tokenizer as Marian files.


def sentencepiece_workdir(path, shared: bool, sizes=(200, 200)) -> str:
    """A workdir whose tokenizer/ jaxtrans trained (German -> Chinese), as train_tokenizer
    lays it out; ``sizes``: the (source, target) models' vocabulary sizes."""
    directory = os.path.join(path, "tokenizer")
    os.makedirs(directory)
    sides = {
        "source.model": (corpus(GERMAN), sizes[0]),
        "target.model": (corpus(CHINESE), sizes[1]),
    }
    if shared:
        sides = {"shared.model": (corpus(GERMAN) + corpus(CHINESE), sizes[0])}
    for name, (lines, size) in sides.items():
        train_sentencepiece(
            lines,
            os.path.join(directory, name),
            vocab_size=size,
            model_type="unigram",
            character_coverage=1.0,
        )
    write_json(os.path.join(directory, METADATA_FILE), {"shared": shared})
    return str(path)


@pytest.mark.parametrize("shared", [True, False])
def test_exported_files_give_the_runs_ids_through_marian_tokenizer(tmp_path, shared):
    workdir = sentencepiece_workdir(tmp_path / "run", shared)
    output = tmp_path / "export"
    os.makedirs(output)
    exported = write_marian_tokenizer(tokenizer_dir(workdir), str(output), "de", "zh")
    ours = load_workdir_tokenizer(workdir)
    assert isinstance(ours, Tokenizer)
    theirs = reference(str(output))
    texts = GERMAN + CHINESE + SPANISH[:10] + random_text(200, seed=3) + ["", "[MASK] <s>"]
    source_ids = theirs(texts).input_ids
    target_ids = theirs(text_target=texts).input_ids
    for text, source, target in zip(texts, source_ids, target_ids, strict=True):
        assert to_model(exported.source_vocabulary, source) == ours.encode_source(text) + [1]
        assert to_model(exported.target_vocabulary, target) == ours.encode_target(text) + [1]
        assert exported.encode_source(text) == ours.encode_source(text)
        assert exported.encode_target(text) == ours.encode_target(text)
    for text in GERMAN + CHINESE:  # without unknown pieces: Marian drops <unk> in decoding
        ids = ours.encode_target(text)
        if UNK_ID not in ids:
            assert ours.decode_target(ids) == exported.decode_target(ids)
    assert (exported.source_vocab_size, exported.target_vocab_size, exported.shared) == (
        ours.source_vocab_size,
        ours.target_vocab_size,
        ours.shared,
    )
    with open(output / "tokenizer_config.json") as f:
        config = json.load(f)
    assert (config["source_lang"], config["target_lang"]) == ("de", "zh")


def test_separate_vocabularies_of_two_sizes_are_exported_with_one_pad_id(tmp_path):
    """Marian's one pad id: <pad> at the smaller vocabulary's last id in both files, the
    rows the model's export writes (token_rows); MarianTokenizer gives the run's ids."""
    workdir = sentencepiece_workdir(tmp_path / "run", shared=False, sizes=(200, 150))
    os.makedirs(tmp_path / "export")
    exported = write_marian_tokenizer(tokenizer_dir(workdir), str(tmp_path / "export"), "a", "b")
    ours = load_workdir_tokenizer(workdir)
    sizes = (ours.source_vocab_size, ours.target_vocab_size)
    assert sizes[0] > sizes[1]
    sides = (exported.source_vocabulary, exported.target_vocabulary)
    assert sides[0].pieces["<pad>"] == sides[1].pieces["<pad>"] == sizes[1] - 2
    config = TransformerConfig(
        vocab_size=sizes[0], target_vocab_size=sizes[1], share_embeddings=False
    )
    for side, rows in zip(sides, token_rows(config), strict=True):
        np.testing.assert_array_equal(huggingface_rows(side), rows)
    theirs = reference(str(tmp_path / "export"))
    texts = GERMAN + CHINESE + random_text(100, seed=4)
    for text, source, target in zip(
        texts, theirs(texts).input_ids, theirs(text_target=texts).input_ids, strict=True
    ):
        assert to_model(sides[0], source) == ours.encode_source(text) + [EOS_ID]
        assert to_model(sides[1], target) == ours.encode_target(text) + [EOS_ID]


def test_exported_rows_load_back_to_the_runs_rows_with_the_start_row_as_padding(tmp_path):
    workdir = sentencepiece_workdir(tmp_path / "run", shared=True)
    os.makedirs(tmp_path / "export")
    exported = write_marian_tokenizer(tokenizer_dir(workdir), str(tmp_path / "export"), "a", "b")
    side = exported.target_vocabulary
    size = side.vocab_size - 1
    table = np.arange(side.vocab_size) * 10  # row i of a run's table holds 10 * i
    rows = table[huggingface_rows(side)]  # as written to the Hugging Face model
    assert rows.shape == (size,) and rows[side.pieces["<pad>"]] == 10 * BOS_ID
    # jaxtrans.models.marian.from_huggingface reading them back: the start row copies <pad>'s.
    extended = np.concatenate([rows, rows[size - 1 : size]])
    loaded = extended[np.argsort(marian_to_model_ids(size, size - 1, 0))]
    assert loaded[PAD_ID] == 10 * BOS_ID
    np.testing.assert_array_equal(loaded[1:], table[1:])


def test_a_marian_workdir_exports_its_own_files(shared_dir, tmp_path):
    data = get_data_config()
    data.tokenizer = shared_dir
    workdir = str(tmp_path / "run")
    ours = load_or_train_tokenizer(data, workdir)
    output = tmp_path / "export"
    os.makedirs(output)
    exported = write_marian_tokenizer(tokenizer_dir(workdir), str(output), "x", "y")
    assert sorted(os.listdir(output)) == sorted(os.listdir(shared_dir))
    assert exported.encode_target_batch(SPANISH) == ours.encode_target_batch(SPANISH)


def test_a_huggingface_workdir_has_no_marian_form(tmp_path):
    directory = tmp_path / "tokenizer"
    os.makedirs(directory)
    write_json(directory / METADATA_FILE, {"kind": "huggingface", "shared": True})
    with pytest.raises(UserError, match="has no Marian form"):
        write_marian_tokenizer(str(directory), str(tmp_path), "de", "zh")
