"""Which source feeds each split: TFDS, local files or the built-in demo corpus.

Training: ``tfds_name`` set -> TFDS; else ``train`` set -> files; else the demo corpus.
Dev/test: the file in ``data.dev`` / ``data.test`` when set; else the split of the TFDS
dataset or of the demo corpus; a file-trained run without a dev/test file has none
(``NoSplit``, the one error that means "none" rather than "broken").
"""

import dataclasses

from jaxtrans.data.records import PairSource, TranslationPair, swapped
from jaxtrans.data.translation import demo as demo_corpus
from jaxtrans.data.translation import text_files
from jaxtrans.errors import UserError

EVAL_SPLITS = ("dev", "test")


class NoSplit(UserError):
    """The run has no such split: training reads files and no dev/test file is given.

    Every other error reading a split (a missing or unreadable file, a malformed line)
    is a plain UserError: the split is configured but broken."""


@dataclasses.dataclass(frozen=True)
class SplitPairs:
    """The pairs of a dev/test split and how many lines were read to get them."""

    # The pairs, in file order.
    pairs: list[TranslationPair]
    # Lines (TFDS: examples) read; malformed lines skipped with ``skip_malformed`` count.
    lines_read: int
    # Malformed lines skipped (``skip_malformed``); lines_read - len(pairs).
    lines_skipped: int


def source_kind(data_config) -> str:
    """ "tfds", "files" or "demo"."""
    if data_config.tfds_name and data_config.train:
        raise UserError(
            "both --config.data.tfds_name and --config.data.train are set; "
            "train on one source (clear the other with an empty value)"
        )
    if data_config.tfds_name:
        return "tfds"
    if data_config.train:
        return "files"
    return "demo"


def _demo(data_config, split: str) -> list[TranslationPair]:
    sizes = {
        "train": data_config.demo_train_size,
        "dev": data_config.demo_dev_size,
        "test": data_config.demo_test_size,
    }
    pairs = demo_corpus.demo_split(
        split,
        size=sizes[split],
        seed=data_config.demo_seed,
        held_out_sizes=(sizes["dev"], sizes["test"]),
    )
    return [swapped(p) for p in pairs] if data_config.reverse else pairs


def training_pairs(data_config) -> PairSource:
    """Random-access training pairs (None marks a skipped malformed line)."""
    kind = source_kind(data_config)
    if kind == "tfds":
        from jaxtrans.data.tfds_source import TfdsPairs  # optional dependency

        return TfdsPairs(data_config, "train")
    if kind == "files":
        pairs = text_files.indexed_files(data_config.train, data_config)
        if len(pairs) == 0:
            raise UserError(
                f"--config.data.train={data_config.train}: the files hold no lines; give files "
                "of SOURCE<TAB>TARGET lines (.tsv) or JSON objects (.jsonl)"
            )
        return pairs
    return _demo(data_config, "train")


def read_split(data_config, split: str) -> SplitPairs:
    """All pairs of "dev" or "test", in file order, with the count of malformed lines
    skipped (``skip_malformed``). Raises NoSplit when the run has no such split, and
    UserError when a configured file is missing, unreadable, malformed (without
    ``skip_malformed``) or holds no pair at all."""
    if split not in EVAL_SPLITS:
        raise UserError(f"unknown evaluation split {split!r}; use dev or test")
    path = data_config[split]
    if path:
        fmt = text_files.line_format_for(path, data_config)
        read = list(text_files.read_pairs(path, fmt))
        pairs = [p for p in read if p is not None]
        if not pairs:
            skipped = f", all {len(read)} malformed and skipped" if read else ""
            raise UserError(
                f"--config.data.{split}={path}: the file holds no sentence pairs{skipped}; "
                "give a file of SOURCE<TAB>TARGET lines (.tsv) or JSON objects (.jsonl)"
            )
        return SplitPairs(pairs, lines_read=len(read), lines_skipped=len(read) - len(pairs))
    kind = source_kind(data_config)
    if kind == "tfds":
        from jaxtrans.data.tfds_source import TfdsPairs  # optional dependency

        source = TfdsPairs(data_config, split)
        pairs = [source[i] for i in range(len(source))]
    elif kind == "files":
        raise NoSplit(
            f"no {split} data: training reads files, so give one with --config.data.{split}=PATH"
        )
    else:
        pairs = _demo(data_config, split)
    return SplitPairs(pairs, lines_read=len(pairs), lines_skipped=0)


def load_split(data_config, split: str) -> list[TranslationPair]:
    """The pairs of ``read_split``, without the counts."""
    return read_split(data_config, split).pairs


def read_dev_split(data_config) -> SplitPairs | None:
    """The dev split, or None when the run has none (training files, no ``data.dev``).
    A dev split that is configured but cannot be read raises its UserError."""
    try:
        return read_split(data_config, "dev")
    except NoSplit:
        return None
