"""Whether two translation models share a tokenizer: a digest of the files that define it.

    a workdir           WORKDIR/tokenizer/: its SentencePiece models (shared.model, or
                        source.model and target.model) or its copied Hugging Face files,
                        all but the metadata file tokenizer.json (which records where
                        they came from); a Marian tokenizer's copied files (marian/)
    a Marian directory  its tokenizer files: source.spm, target.spm, vocab.json,
                        target_vocab.json, tokenizer_config.json, special_tokens_map.json

Equal digests mean the same files under the same names, so the same ids for the same
text on both sides; a run fine-tuned from a Marian directory keeps copies of that
directory's files and has its digest.
"""

import hashlib
import os

from jaxtrans.data.tokenizers.marian_tokenizer import (
    CONFIG_FILE,
    MARIAN_DIR,
    SOURCE_SPM,
    SPECIAL_TOKENS_FILE,
    TARGET_SPM,
    TARGET_VOCAB_FILE,
    VOCAB_FILE,
)
from jaxtrans.data.translation.tokenizer import METADATA_FILE, tokenizer_dir
from jaxtrans.errors import UserError

# The files of a Marian directory that make its tokenizer (copy_marian copies these).
MARIAN_FILES = (SOURCE_SPM, TARGET_SPM, VOCAB_FILE, TARGET_VOCAB_FILE, CONFIG_FILE,
                SPECIAL_TOKENS_FILE)  # fmt: skip


def tokenizer_files(path: str) -> tuple[str, list[str]]:
    """(directory, names relative to it, sorted) of the files defining the tokenizer of
    the workdir or Marian directory ``path``."""
    directory = tokenizer_dir(path)
    if not os.path.isfile(os.path.join(directory, METADATA_FILE)):
        directory, names = path, MARIAN_FILES  # a Marian directory
    elif os.path.isdir(os.path.join(directory, MARIAN_DIR)):
        directory, names = os.path.join(directory, MARIAN_DIR), MARIAN_FILES
    else:
        names = [
            os.path.relpath(os.path.join(root, name), directory)
            for root, _, files in os.walk(directory)
            for name in files
        ]
        names = [name for name in names if name != METADATA_FILE]
    found = sorted(n for n in names if os.path.isfile(os.path.join(directory, n)))
    if not found:
        raise UserError(f"{path}: no tokenizer files found; give a workdir or a Marian directory")
    return directory, found


def tokenizer_digest(path: str) -> str:
    """sha256 (hex) over the names and contents of ``tokenizer_files(path)``."""
    directory, names = tokenizer_files(path)
    digest = hashlib.sha256()
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            contents = hashlib.sha256(f.read()).hexdigest()
        digest.update(f"{name}\0{contents}\n".encode())
    return digest.hexdigest()
