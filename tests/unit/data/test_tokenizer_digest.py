"""tokenizer_digest: equal for the same tokenizer files wherever they are (a workdir's, a
Marian directory and a run that copied it), different when a file differs."""

import shutil

import pytest
from marian_directories import GERMAN, SPANISH, corpus, marian_directory

from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer
from jaxtrans.data.translation.tokenizer_digest import tokenizer_digest
from jaxtrans.errors import UserError


def sentencepiece_run(path, **changes) -> str:
    """A workdir with only a SentencePiece tokenizer trained on the demo corpus."""
    data = get_data_config()
    data.update(vocab_size=120, demo_train_size=500, **changes)
    load_or_train_tokenizer(data, str(path))
    return str(path)


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("marian") / "opus-mt-de-es"
    return marian_directory(path, corpus(GERMAN), corpus(SPANISH), separate=False)


def test_runs_with_the_same_tokenizer_files_have_one_digest(tmp_path):
    first = sentencepiece_run(tmp_path / "a")
    copied = shutil.copytree(first, tmp_path / "b")
    assert tokenizer_digest(str(copied)) == tokenizer_digest(first)
    # The metadata file says where the files came from; only the files themselves count.
    (copied / "tokenizer" / "tokenizer.json").write_text('{"shared": true, "note": 1}')
    assert tokenizer_digest(str(copied)) == tokenizer_digest(first)
    other = sentencepiece_run(tmp_path / "c", spm_model_type="bpe")
    assert tokenizer_digest(other) != tokenizer_digest(first)


def test_a_marian_directory_and_a_run_that_copied_its_tokenizer_have_one_digest(
    marian_dir, tmp_path
):
    data = get_data_config()
    data.tokenizer = marian_dir
    load_or_train_tokenizer(data, str(tmp_path / "run"))
    assert tokenizer_digest(str(tmp_path / "run")) == tokenizer_digest(marian_dir)
    changed = shutil.copytree(marian_dir, tmp_path / "changed")
    (changed / "vocab.json").write_text((changed / "vocab.json").read_text().replace("1", "2", 1))
    assert tokenizer_digest(str(changed)) != tokenizer_digest(marian_dir)


def test_a_directory_without_tokenizer_files_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no tokenizer files found"):
        tokenizer_digest(str(tmp_path))
