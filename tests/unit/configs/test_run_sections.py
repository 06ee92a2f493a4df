"""The run sections are dataclasses: the shipped configs take them from the package, their
own checks are one-line errors, older config.json files are filled in from their
defaults, and a bare --config NAME is a shipped config."""

import dataclasses
import os
import re
import sys
import tomllib

import ml_collections
import pytest
from paths import REPO

if REPO not in sys.path:
    sys.path.insert(0, REPO)

from configs import base, bert_base, demo  # noqa: E402
from jaxtrans.config_sections import complete_section, section_values  # noqa: E402
from jaxtrans.errors import UserError  # noqa: E402
from jaxtrans.inference.options import DEFAULT_OPTIONS  # noqa: E402
from jaxtrans.programs import config_names  # noqa: E402
from jaxtrans.tasks.run_config import complete_run_config, translation_run_config  # noqa: E402
from jaxtrans.tasks.translation.decoding_settings import SECTION_FIELDS  # noqa: E402
from jaxtrans.tasks.translation.eval_section import TranslationEvalConfig  # noqa: E402
from jaxtrans.training.run_sections import MeshConfig, OptimizerConfig, TrainConfig  # noqa: E402


def test_base_is_the_package_default_and_its_sections_the_dataclass_defaults():
    config = base.get_config()
    assert config.to_dict() == translation_run_config().to_dict()
    # The dataclasses' defaults, but for the accelerator recipe's dropout generator (a
    # config.json without the field, of an older run, keeps threefry).
    for name, cls, recipe in (
        ("optimizer", OptimizerConfig, {}),
        ("train", TrainConfig, {"dropout_rng_impl": "rbg"}),
        ("mesh", MeshConfig, {}),
        ("eval", TranslationEvalConfig, {}),
    ):
        assert config[name].to_dict() == dataclasses.asdict(cls(**recipe)), name
    assert TrainConfig().dropout_rng_impl == "threefry"
    # The BERT configs share the optimizer, train and mesh fields (their own values).
    assert list(bert_base.get_config().train) == list(config.train)


def test_decoding_defaults_are_the_eval_section_defaults():
    defaults = dataclasses.asdict(TranslationEvalConfig())
    searched = {name: getattr(DEFAULT_OPTIONS, name) for name in SECTION_FIELDS}
    assert {name: defaults[name] for name in SECTION_FIELDS} == searched
    # Every search setting but sampling's (given, never in a config) is in the section.
    assert set(SECTION_FIELDS) == {
        "beam_size", "alpha", "penalty_form", "max_extra_length", "batch_size",
        "repetition_penalty", "no_repeat_ngram_size",
    }  # fmt: skip


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"log_every": 0}, "--config.train.log_every=0: use a whole number >= 1"),
        ({"checkpoint_every": 1.5}, "--config.train.checkpoint_every=1.5: use a whole number"),
        ({"keep_checkpoints": 0}, "--config.train.keep_checkpoints=0: use a whole number >= 1"),
        ({"num_steps": -1}, "--config.train.num_steps=-1: use a whole number >= 0"),
        ({"num_steps": 5, "num_epochs": 2}, "set one of them, the other to 0"),
        ({"max_minutes": -1.0}, "--config.train.max_minutes=-1.0: use a number of minutes"),
        ({"on_nonfinite": "ignore"}, "on_nonfinite='ignore': use stop or skip"),
        ({"loss_chunk_tokens": -1}, "--config.train.loss_chunk_tokens=-1: use a whole number"),
        ({"loss_chunk_tokens": 2.5}, "--config.train.loss_chunk_tokens=2.5: use a whole number"),
    ],
)
def test_the_train_section_checks_its_own_values(changes, message):
    with pytest.raises(UserError, match=re.escape(message)):
        TrainConfig(**changes)
    assert TrainConfig(keep_checkpoints=None).keep_checkpoints is None


def test_section_values_take_defaults_and_ignore_other_keys():
    train = section_values(TrainConfig, ml_collections.ConfigDict({"num_steps": 7, "x": 1}))
    assert train.num_steps == 7 and train.max_minutes == 0.0
    assert section_values(TranslationEvalConfig, None) == TranslationEvalConfig()


def test_an_older_run_config_is_filled_in_and_keeps_its_values():
    old = ml_collections.ConfigDict(
        {"task": "translation", "model": {}, "train": {"num_steps": 4}, "eval": {"alpha": 1.0}}
    )
    filled = complete_run_config(old)
    assert "max_minutes" not in old.train  # a copy
    assert filled.train.num_steps == 4 and filled.train.max_minutes == 0.0
    assert filled.eval.alpha == 1.0 and filled.eval.penalty_form == "gnmt"
    assert filled.mesh.to_dict() == dataclasses.asdict(MeshConfig())
    bert = complete_run_config(ml_collections.ConfigDict({"task": "bert_pretraining",
                                                          "eval": {"batch_size": 8}}))  # fmt: skip
    assert bert.eval.to_dict() == {"batch_size": 8}  # the BERT eval sections are their own
    section = ml_collections.ConfigDict({"b1": 0.5})
    assert complete_section(section, OptimizerConfig)[:2] == ["name", "b2"]


def test_a_bare_name_is_a_shipped_config_and_paths_stay_paths():
    path = config_names.resolve_config_name("demo")
    assert os.path.samefile(path, os.path.join(REPO, "configs", "demo.py"))
    assert demo.__file__ and "demo" in config_names.shipped_config_names()
    assert "_dataclass_section" not in config_names.shipped_config_names()
    argv = ["train.py", "--config", "demo", "--config=configs/demo.py", "--config=big:x"]
    resolved = config_names.resolve_config_arg(argv)
    assert resolved[2] == path and resolved[3] == "--config=configs/demo.py"
    assert resolved[4].endswith(os.path.join("configs", "big.py") + ":x")
    with pytest.raises(UserError, match="no shipped config of that name.*base, bert_base"):
        config_names.resolve_config_name("nope")


def test_the_wheel_packages_are_every_package_of_jaxtrans_and_the_shipped_configs():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        setuptools = tomllib.load(f)["tool"]["setuptools"]
    found = {
        os.path.relpath(root, REPO).replace(os.sep, ".")
        for root, _, files in os.walk(os.path.join(REPO, "jaxtrans"))
        if "__init__.py" in files
    }
    assert set(setuptools["packages"]) == found | {"jaxtrans.shipped_configs"}
    assert setuptools["package-dir"] == {"jaxtrans.shipped_configs": "configs"}
