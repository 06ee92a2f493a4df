"""Sentence pairs from a TFDS translation dataset, e.g. ``wmt14_translate/de-en``.

Read through TFDS's random-access data source (array_record files), which needs no
TensorFlow once the dataset is prepared; training reads the train split once, in order
and in chunks (``read_range``), into the run's id shards. A dataset not yet prepared is
prepared on first use in array_record format (most builders need TensorFlow to download
and convert).
``tensorflow-datasets`` is the optional ``tfds`` extra: ``pip install 'jaxtrans[tfds]'``.
"""

from collections.abc import Sequence

from jaxtrans.data.records import TranslationPair
from jaxtrans.errors import UserError

# Our split names -> TFDS split names.
TFDS_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


def _import_tfds():
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise UserError(
            "--config.data.tfds_name needs tensorflow-datasets: pip install 'jaxtrans[tfds]'"
        ) from None
    return tfds


def language_pair(data_config) -> tuple[str, str]:
    """(source feature, target feature): from source_lang/target_lang or the config name.

    ``wmt14_translate/de-en`` gives ("de", "en"); ``reverse`` swaps them.
    """
    source, target = data_config.source_lang, data_config.target_lang
    if not (source and target):
        config_name = data_config.tfds_name.partition("/")[2]
        languages = config_name.split("-")
        if len(languages) != 2:
            raise UserError(
                f"cannot tell the languages of {data_config.tfds_name!r}; set "
                "--config.data.source_lang and --config.data.target_lang"
            )
        source, target = source or languages[0], target or languages[1]
    return (target, source) if data_config.reverse else (source, target)


def _builder(data_config):
    tfds = _import_tfds()
    try:
        builder = tfds.builder(data_config.tfds_name, data_dir=data_config.tfds_data_dir or None)
    except Exception as e:  # DatasetNotFoundError, bad config name, ...
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"TFDS dataset {data_config.tfds_name!r}: {first_line}") from None
    if not builder.is_prepared():
        try:
            builder.download_and_prepare(file_format="array_record")
        except ImportError as e:
            raise UserError(
                f"TFDS dataset {data_config.tfds_name!r} is not prepared in {builder.data_dir} "
                f"and preparing it needs {e.name or 'TensorFlow'}; pip install tensorflow, "
                "or prepare it where TensorFlow is installed: tfds build "
                f"{data_config.tfds_name} --file_format=array_record"
            ) from None
    return builder


def random_access_source(builder, tfds_name: str, split: str):
    """The split of a prepared TFDS dataset as a random-access source (array_record)."""
    try:
        return builder.as_data_source(split=split)
    except ValueError as e:  # prepared only as TFRecord, which has no random access
        raise UserError(
            f"TFDS dataset {tfds_name!r} has no array_record files in {builder.data_dir}; "
            f"rebuild it: tfds build {tfds_name} --file_format=array_record "
            f"({str(e).splitlines()[0]})"
        ) from None


class TfdsPairs(Sequence):
    """Random access to one split of a prepared TFDS translation dataset."""

    def __init__(self, data_config, split: str):
        if split not in TFDS_SPLITS:
            raise UserError(f"unknown split {split!r}; use train, dev or test")
        builder = _builder(data_config)
        tfds_split = TFDS_SPLITS[split]
        if tfds_split not in builder.info.splits:
            raise UserError(
                f"TFDS dataset {data_config.tfds_name!r} has no {tfds_split!r} split "
                f"(it has {', '.join(builder.info.splits)}); give a file with "
                f"--config.data.{split}=PATH"
                + (" or set --config.train.eval_every=0" if split == "dev" else "")
            )
        self.source_lang, self.target_lang = language_pair(data_config)
        features = set(builder.info.features.keys())
        for lang in (self.source_lang, self.target_lang):
            if lang not in features:
                raise UserError(
                    f"TFDS dataset {data_config.tfds_name!r} has no language {lang!r} "
                    f"(it has {', '.join(sorted(features))}); set --config.data.source_lang "
                    "and --config.data.target_lang"
                )
        self._source = random_access_source(builder, data_config.tfds_name, tfds_split)

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: int) -> TranslationPair:
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._pair(self._source[index])

    def read_range(self, start: int, stop: int) -> list[TranslationPair]:
        """Pairs [start, stop) in order, read together (the data source's batched read of
        its array_record files), as the id shards are prepared."""
        read_many = getattr(self._source, "__getitems__", None)
        indices = range(start, stop)
        examples = read_many(indices) if read_many else [self._source[i] for i in indices]
        return [self._pair(example) for example in examples]

    def _pair(self, example) -> TranslationPair:
        return TranslationPair(
            text_of(example[self.source_lang]).strip(), text_of(example[self.target_lang]).strip()
        )


def text_of(value) -> str:
    """A TFDS text feature (bytes or str) as str."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
