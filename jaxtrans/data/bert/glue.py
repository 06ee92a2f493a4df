"""GLUE classification tasks from a prepared TFDS dataset, e.g. ``glue/sst2``, ``glue/mrpc``.

The TFDS ``glue`` builder downloads the data when it prepares a dataset, which this
library never does at run time: prepare it once where the internet is reachable,

    tfds build glue/sst2 --file_format=array_record --data_dir DIR

and point ``--config.data.tfds_data_dir`` at DIR. Reading uses TFDS's random-access data
source (array_record files) and needs no TensorFlow. ``stsb`` (a regression task) and the
test-only configs (``ax``, ``mnli_matched``, ``mnli_mismatched``) are not classification
training sets; GLUE's test labels are not public, so ``test`` cannot be scored.
"""

from jaxtrans.data.bert.classification import LabelledText
from jaxtrans.data.tfds_source import random_access_source, text_of
from jaxtrans.errors import UserError

# GLUE config -> (feature of text, feature of text_b or None).
TEXT_FEATURES = {
    "cola": ("sentence", None),
    "sst2": ("sentence", None),
    "mrpc": ("sentence1", "sentence2"),
    "qqp": ("question1", "question2"),
    "mnli": ("premise", "hypothesis"),
    "qnli": ("question", "sentence"),
    "rte": ("sentence1", "sentence2"),
    "wnli": ("sentence1", "sentence2"),
}
# Our split names -> TFDS split names (MNLI's dev set is "validation_matched").
SPLITS = {"train": "train", "dev": "validation", "test": "test"}


def _config_name(tfds_name: str) -> str:
    name = tfds_name.partition("/")[2]
    if name not in TEXT_FEATURES:
        raise UserError(
            f"--config.data.classification_tfds={tfds_name!r}: {name or 'no config'} is not a "
            f"GLUE classification task; use glue/ with one of {', '.join(TEXT_FEATURES)}"
        )
    return name


def _prepared_builder(tfds_name: str, data_dir: str):
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise UserError(
            "--config.data.classification_tfds needs tensorflow-datasets: "
            "pip install 'jaxtrans[tfds]'"
        ) from None
    try:
        builder = tfds.builder(tfds_name, data_dir=data_dir or None)
    except Exception as e:  # DatasetNotFoundError, bad config name, ...
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"TFDS dataset {tfds_name!r}: {first_line}") from None
    if not builder.is_prepared():
        raise UserError(
            f"TFDS dataset {tfds_name!r} is not prepared in {builder.data_dir} and is not "
            f"downloaded at run time; prepare it where the internet is reachable (tfds build "
            f"{tfds_name} --file_format=array_record) and set --config.data.tfds_data_dir, or "
            "give TSV/JSONL files"
        )
    return builder


def glue_labels(tfds_name: str, data_dir: str = "") -> list[str]:
    """The label names of a GLUE task in TFDS's order: label i is ``glue_labels(...)[i]``."""
    _config_name(tfds_name)
    return list(_prepared_builder(tfds_name, data_dir).info.features["label"].names)


def glue_examples(tfds_name: str, split: str, data_dir: str = "") -> list[LabelledText]:
    """Every example of the "train", "dev" or "test" split, in stored order."""
    name = _config_name(tfds_name)
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use train, dev or test")
    builder = _prepared_builder(tfds_name, data_dir)
    tfds_split = SPLITS[split]
    if name == "mnli" and split != "train":
        tfds_split += "_matched"
    if tfds_split not in builder.info.splits:
        raise UserError(
            f"TFDS dataset {tfds_name!r} has no {tfds_split!r} split "
            f"(it has {', '.join(builder.info.splits)})"
        )
    source = random_access_source(builder, tfds_name, tfds_split)
    names = builder.info.features["label"].names
    text, text_b = TEXT_FEATURES[name]
    examples = []
    for i in range(len(source)):
        record = source[i]
        label = int(record["label"])
        if label < 0:
            raise UserError(
                f"TFDS dataset {tfds_name!r} split {tfds_split!r} has no labels (GLUE test "
                "labels are not public); evaluate the dev split"
            )
        examples.append(
            LabelledText(
                names[label],
                text_of(record[text]),
                text_of(record[text_b]) if text_b else None,
            )
        )
    return examples
