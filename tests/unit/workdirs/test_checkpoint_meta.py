"""A checkpoint's metadata as one typed object (jaxtrans.workdirs.checkpoint_meta): the
JSON a checkpoint holds, written out field by field, and every older checkpoint's read."""

import json

from paths import REPO

from jaxtrans.workdirs.checkpoint_meta import Best, CheckpointMeta

OLD = f"{REPO}/tests/fixtures/workdirs_0996837"


def test_the_json_object_holds_every_field_but_the_data_position():
    meta = CheckpointMeta(
        step=40,
        model={"d_model": 16, "position": "rope"},
        skipped_steps=2,
        dropout_rng_impl="rbg",
        schedule_steps=120,
        best=Best("bleu", step=30, value=23.5, evals_since=1),
        data={"position": 7},
    )
    assert meta.to_json() == {
        "step": 40,
        "model": {"d_model": 16, "position": "rope"},
        "skipped_steps": 2,
        "dropout_rng_impl": "rbg",
        "schedule_steps": 120,
        "best": {"metric": "bleu", "step": 30, "value": 23.5, "evals_since": 1},
    }


def test_unset_optional_fields_are_left_out():
    assert CheckpointMeta(3).to_json() == {
        "step": 3,
        "model": {},
        "skipped_steps": 0,
        "dropout_rng_impl": "threefry",
    }


def test_the_json_reads_back_as_the_same_metadata():
    meta = CheckpointMeta(
        7, {"vocab_size": 120}, 1, "unsafe_rbg", 99, Best("loss", 5, 1.25, 2), [{"p": 1}]
    )
    written = json.loads(json.dumps(meta.to_json()))  # as orbax stores it
    assert CheckpointMeta.from_json(written, data=[{"p": 1}]) == meta
    # A best of a run not yet evaluated: no step, no value.
    unevaluated = CheckpointMeta(7, best=Best("bleu"))
    assert CheckpointMeta.from_json(unevaluated.to_json()) == unevaluated


def test_older_checkpoints_metadata_reads_with_the_defaults_of_their_time():
    for task in ("translation", "bert_pretraining"):
        with open(f"{OLD}/{task}/checkpoints/4/meta/metadata", encoding="utf-8") as f:
            saved = json.load(f)
        meta = CheckpointMeta.from_json(saved)
        assert meta.step == 4 and meta.model == saved["model"]
        assert meta.skipped_steps == 0 and meta.dropout_rng_impl == "threefry"
        assert meta.best is None and meta.schedule_steps is None
        assert meta.data == [saved["data"]]  # process 0's position, as a list of one


def test_a_checkpoint_data_item_is_preferred_to_the_older_in_object_position():
    saved = {"step": 2, "data": {"old": True}}
    assert CheckpointMeta.from_json(saved, data=[{"a": 0}, {"b": 1}]).data == [{"a": 0}, {"b": 1}]
    # An object without a step (a test's, or one written by hand) takes the checkpoint's.
    assert CheckpointMeta.from_json({}, step=9) == CheckpointMeta(9)
