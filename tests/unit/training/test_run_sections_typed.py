"""A run reads its sections as typed fields: converted once at set-up, an older config.json's
missing fields take the dataclass defaults, a key that is no field is ignored (and stays in
the config), and what the loop starts from follows the checkpoint's metadata."""

import dataclasses
import json
import math
import os

import jax.numpy as jnp
import ml_collections
import pytest
from paths import FIXTURES

from jaxtrans.errors import UserError
from jaxtrans.tasks.run_config import complete_run_config
from jaxtrans.training.run_sections import MeshConfig, OptimizerConfig, RunSections, TrainConfig
from jaxtrans.training.run_setup import Run, check_resumable, starting_point
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta
from jaxtrans.workdirs.workdir import load_run_config

OLD_WORKDIRS = os.path.join(FIXTURES, "workdirs_0996837")
SECTIONS = {"optimizer": OptimizerConfig, "train": TrainConfig, "mesh": MeshConfig}


@pytest.mark.parametrize("name", ["translation", "bert_pretraining"])
def test_an_old_config_json_reads_its_own_values_and_the_defaults_of_the_rest(name):
    workdir = os.path.join(OLD_WORKDIRS, name)
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
        saved = json.load(f)  # the file itself: the reference
    sections = RunSections.of(load_run_config(workdir))
    assert sections.seed == saved["seed"]
    missing = []
    for section, cls in SECTIONS.items():
        typed = getattr(sections, section)
        assert isinstance(typed, cls)
        for field in dataclasses.fields(cls):
            if field.name in saved[section]:
                assert getattr(typed, field.name) == saved[section][field.name], field.name
            else:
                assert getattr(typed, field.name) == field.default, field.name
                missing.append(f"{section}.{field.name}")
    # That version wrote none of these: they are the dataclasses' defaults here.
    assert {"train.keep_best", "train.patience", "train.dropout_rng_impl", "mesh.rules"} <= set(
        missing
    )
    assert sections.train.patience == 0 and sections.train.dropout_rng_impl == "threefry"


def test_a_key_that_is_no_field_is_ignored_and_stays_in_the_config():
    config = load_run_config(os.path.join(OLD_WORKDIRS, "translation"))
    with config.unlocked():
        config.train.retired_setting = 7
    sections = RunSections.of(config)
    assert not hasattr(sections.train, "retired_setting")
    assert complete_run_config(config).train.retired_setting == 7  # config.json keeps it


@pytest.mark.parametrize(
    "section, changes, message",
    [
        ("train", {"patience": -1}, "--config.train.patience=-1"),
        ("train", {"dropout_rng_impl": "philox"}, "--config.train.dropout_rng_impl='philox'"),
        ("top", {"seed": "0"}, "--config.seed='0': use a whole number"),
    ],
)
def test_a_bad_value_is_one_line_when_the_sections_are_read(section, changes, message):
    values = load_run_config(os.path.join(OLD_WORKDIRS, "translation")).to_dict()
    (values if section == "top" else values[section]).update(changes)  # as JSON may say
    config = ml_collections.ConfigDict(values)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("[", r"\[")):
        RunSections.of(config)


def test_run_holds_one_config_and_derives_the_rest():
    names = {field.name for field in dataclasses.fields(Run)}
    assert "config" in names and "run_config" not in names
    # Derived, not stored: each follows from a field.
    for derived in ("rules", "accum", "batch_sharding", "replicated", "step_flops", "peak"):
        assert derived not in names and hasattr(Run, derived)
    assert Run.__dataclass_fields__["config"].type is RunSections


class _State:
    step = jnp.asarray(40)


@pytest.mark.parametrize(
    "meta, timed, keep_best, expected",
    [
        # A new run: step 0 of the state, nothing carried.
        (None, False, "", (40, 100, 0, None)),
        # A resumed run: its skipped steps; a step-count schedule keeps its own length.
        ({"skipped_steps": 3, "schedule_steps": 70}, False, "", (40, 100, 3, None)),
        # A timed schedule keeps the length the first run fit it to.
        ({"skipped_steps": 1, "schedule_steps": 70}, True, "", (40, 70, 1, None)),
        # keep_best: the checkpoint's best and the count since it go on.
        (
            {"best": {"metric": "bleu", "step": 30, "value": 9.5, "evals_since": 2}},
            False,
            "bleu",
            (40, 100, 0, (30, 9.5, 2)),
        ),
    ],
)
def test_the_loop_starts_where_the_checkpoint_says(meta, timed, keep_best, expected):
    train = TrainConfig(keep_best=keep_best, eval_every=10)
    meta = None if meta is None else CheckpointMeta.from_json({"step": 40, **meta})
    rs = starting_point(_State(), 100, timed, meta, train, is_main=False)
    best = None if rs.best is None or rs.best.step is None else rs.best
    got = (rs.step, rs.num_steps, rs.skipped_steps)
    got += ((best.step, best.value, best.evals_since) if best else None,)
    assert got == expected
    assert (rs.best is not None) == bool(keep_best)


def test_a_new_timed_run_has_no_step_count_until_it_is_fit():
    rs = starting_point(_State(), math.inf, True, None, TrainConfig(), is_main=False)
    assert rs.num_steps == math.inf


class _Task:
    shape_fields = ("d_model",)

    def __init__(self, config):
        self.config = config


def _config(**top) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({"model": {"d_model": 8}, **top})


def test_a_config_json_without_a_task_resumes_as_translation():
    check_resumable(_Task(_config(task="translation")), _config(), "/w")  # no error
    with pytest.raises(UserError, match="task='translation'"):
        check_resumable(_Task(_config(task="bert_pretraining")), _config(), "/w")
    with pytest.raises(UserError, match=r"d_model=8 \(config now says 16\)"):
        check_resumable(
            _Task(ml_collections.ConfigDict({"model": {"d_model": 16}})), _config(), "/w"
        )
