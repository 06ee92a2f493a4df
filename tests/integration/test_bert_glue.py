"""GLUE sentence pairs from a prepared TFDS dataset, offline: pairs and label names read,
the unlabelled test split and an unprepared dataset refused (never a download)."""

import numpy as np
import pytest

from jaxtrans.errors import UserError


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    tfds = pytest.importorskip("tensorflow_datasets")

    class JaxtransTinyGlue(tfds.core.GeneratorBasedBuilder):
        """Sentence pairs with the features and splits of glue/mrpc."""

        VERSION = tfds.core.Version("1.0.0")
        BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="mrpc")]

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {
                        "sentence1": tfds.features.Text(),
                        "sentence2": tfds.features.Text(),
                        "label": tfds.features.ClassLabel(names=["not_equivalent", "equivalent"]),
                        "idx": np.int32,
                    }
                ),
            )

        def _split_generators(self, dl_manager):
            return {
                "train": self._generate_examples(6, labelled=True),
                "validation": self._generate_examples(3, labelled=True),
                "test": self._generate_examples(2, labelled=False),
            }

        def _generate_examples(self, n, labelled):
            for i in range(n):
                yield (
                    i,
                    {
                        "sentence1": f"first {i}",
                        "sentence2": f"second {i}",
                        "label": i % 2 if labelled else -1,
                        "idx": i,
                    },
                )

    directory = str(tmp_path_factory.mktemp("tfds"))
    tfds.builder("jaxtrans_tiny_glue/mrpc", data_dir=directory).download_and_prepare(
        file_format="array_record"
    )
    return directory


def test_glue_pairs_and_label_names_come_from_a_prepared_tfds_dataset(glue_dir):
    from jaxtrans.data.bert.glue import glue_examples, glue_labels

    assert glue_labels("jaxtrans_tiny_glue/mrpc", glue_dir) == ["not_equivalent", "equivalent"]
    dev = glue_examples("jaxtrans_tiny_glue/mrpc", "dev", glue_dir)
    assert sorted((e.text, e.text_b, e.label) for e in dev) == [
        ("first 0", "second 0", "not_equivalent"),
        ("first 1", "second 1", "equivalent"),
        ("first 2", "second 2", "not_equivalent"),
    ]
    assert len(glue_examples("jaxtrans_tiny_glue/mrpc", "train", glue_dir)) == 6
    with pytest.raises(UserError, match="not public"):
        glue_examples("jaxtrans_tiny_glue/mrpc", "test", glue_dir)


def test_an_unprepared_glue_task_is_a_user_error_not_a_download(glue_dir, tmp_path):
    from jaxtrans.data.bert.glue import glue_examples

    with pytest.raises(UserError, match="not prepared .*tfds build"):
        glue_examples("jaxtrans_tiny_glue/mrpc", "train", str(tmp_path))
    with pytest.raises(UserError, match="stsb is not a GLUE classification task"):
        glue_examples("glue/stsb", "train", glue_dir)
