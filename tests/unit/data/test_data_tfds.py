"""TFDS translation datasets, offline: a tiny builder written in array_record, no TensorFlow."""

import pytest

tfds = pytest.importorskip(
    "tensorflow_datasets", reason="tensorflow-datasets (the tfds extra) is not installed"
)

from jaxtrans.data.records import TranslationPair  # noqa: E402
from jaxtrans.data.translation.data_config import get_data_config  # noqa: E402
from jaxtrans.data.translation.pipeline import train_iterator  # noqa: E402
from jaxtrans.data.translation.sources import load_split, training_pairs  # noqa: E402
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer  # noqa: E402
from jaxtrans.errors import UserError  # noqa: E402

TRAIN = [(f"hallo nummer {i}", f"hello number {i}") for i in range(30)]
VALIDATION = [(f"guten tag {i}", f"good day {i}") for i in range(5)]


class JaxtransTinyTranslate(tfds.core.GeneratorBasedBuilder):
    """German-English pairs with the layout of wmt14_translate/de-en (train, validation)."""

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="de-en")]

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.Translation(languages=("de", "en")),
            supervised_keys=("de", "en"),
        )

    def _split_generators(self, dl_manager):
        return {
            "train": self._generate_examples(TRAIN),
            "validation": self._generate_examples(VALIDATION),
        }

    def _generate_examples(self, pairs):
        for i, (de, en) in enumerate(pairs):
            yield i, {"de": de, "en": en}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    # Not prepared yet: the first read prepares it (array_record, no TensorFlow needed).
    return str(tmp_path_factory.mktemp("tfds"))


def config(data_dir, **overrides):
    data = get_data_config()
    data.update(tfds_name="jaxtrans_tiny_translate/de-en", tfds_data_dir=data_dir, vocab_size=60)
    data.update(overrides)
    return data


def test_dataset_is_prepared_on_first_use_and_read_by_random_access(data_dir):
    pairs = training_pairs(config(data_dir))
    assert len(pairs) == len(TRAIN)
    # TFDS stores examples in its own (hashed) order; every pair is there once.
    assert sorted(pairs[i] for i in range(len(pairs))) == sorted(TranslationPair(*p) for p in TRAIN)


def test_dev_is_the_validation_split_in_stored_order(data_dir):
    pairs = load_split(config(data_dir), "dev")
    direct = tfds.data_source(
        "jaxtrans_tiny_translate/de-en", split="validation", data_dir=data_dir
    )
    expected = [
        TranslationPair(direct[i]["de"].decode(), direct[i]["en"].decode())
        for i in range(len(direct))
    ]
    assert pairs == expected
    assert sorted(pairs) == sorted(TranslationPair(*p) for p in VALIDATION)


def test_direction_flag_and_explicit_languages_pick_the_source(data_dir):
    reversed_pairs = load_split(config(data_dir, reverse=True), "dev")
    explicit = load_split(config(data_dir, source_lang="en", target_lang="de"), "dev")
    forward = load_split(config(data_dir), "dev")
    assert reversed_pairs == explicit == [TranslationPair(t, s) for s, t in forward]


def test_split_the_dataset_lacks_is_a_user_error(data_dir):
    with pytest.raises(UserError, match="no 'test' split"):
        load_split(config(data_dir), "test")


def test_language_the_dataset_lacks_is_a_user_error(data_dir):
    with pytest.raises(UserError, match="no language 'fr'"):
        training_pairs(config(data_dir, target_lang="fr"))


def test_unknown_dataset_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no_such_dataset"):
        training_pairs(config(str(tmp_path), tfds_name="no_such_dataset/de-en"))


def test_training_batches_come_from_the_tfds_dataset(data_dir, tmp_path):
    data = config(data_dir, batch_size=2, pack=False, max_source_length=16)
    tokenizer = load_or_train_tokenizer(data, str(tmp_path))
    batch = next(train_iterator(data, tokenizer, seed=0))
    assert tokenizer.decode_source(batch["source"][0]).startswith("hallo nummer")
    assert tokenizer.decode_target(batch["target_out"][0]).startswith("hello number")


def test_the_id_shards_of_a_tfds_split_hold_its_pairs_in_stored_order(data_dir, tmp_path):
    """Prepared in chunks (read_range: the data source's batched reads), the shards equal
    the pairs read one index at a time."""
    from jaxtrans.data.translation.id_shards import ensure_id_shards

    data = config(data_dir, max_source_length=16, workers=0)
    workdir = str(tmp_path / "run")
    tokenizer = load_or_train_tokenizer(data, workdir)
    pairs = training_pairs(data)
    assert pairs.read_range(3, 9) == [pairs[i] for i in range(3, 9)]
    shards = ensure_id_shards(data, tokenizer, workdir, say=lambda line: None)
    assert len(shards) == len(TRAIN)
    for i in range(len(pairs)):
        assert shards.ids(0, i).tolist() == tokenizer.encode_source(pairs[i].source)
        assert shards.ids(1, i).tolist() == tokenizer.encode_target(pairs[i].target)
