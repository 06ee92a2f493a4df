"""The best dev evaluation so far and early stopping (training/best.py), decided without
training: which value is better, ties, NaNs, the patience count, what checkpoints carry;
and the train.keep_best / train.patience settings and what they make due."""

import math

import pytest

from jaxtrans.errors import UserError
from jaxtrans.training.best import (
    Best,
    after_evaluation,
    describe_patience,
    from_meta,
    lower_is_better,
    patience_spent,
)
from jaxtrans.training.due import due_after_step
from jaxtrans.training.run_sections import TrainConfig
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta


def evaluate(metric: str, values: list[float]) -> list[Best]:
    """The best after each evaluation of ``values`` at steps 1, 2, ..."""
    best, seen = Best(metric), []
    for step, value in enumerate(values, start=1):
        best = after_evaluation(best, step, {"split": "dev", metric: value})
        seen.append(best)
    return seen


@pytest.mark.parametrize("metric", ["loss", "nll", "perplexity", "mlm_loss", "nsp_loss"])
def test_losses_are_better_lower(metric):
    assert lower_is_better(metric)


@pytest.mark.parametrize(
    "metric", ["bleu", "chrf", "accuracy", "f1", "exact_match", "HasAns_f1", "mlm_accuracy"]
)
def test_scores_are_better_higher(metric):
    assert not lower_is_better(metric)


def test_the_first_evaluation_is_the_best_so_far():
    assert evaluate("bleu", [3.0]) == [Best("bleu", step=1, value=3.0, evals_since=0)]


def test_a_higher_bleu_improves_a_lower_one_does_not():
    assert [b.step for b in evaluate("bleu", [1.0, 5.0, 4.0, 6.0])] == [1, 2, 2, 4]


def test_a_lower_loss_improves_a_higher_one_does_not():
    assert [b.step for b in evaluate("loss", [5.0, 4.0, 4.5, 3.0])] == [1, 2, 2, 4]


def test_a_tie_does_not_improve_so_the_first_of_equal_evaluations_stays_the_best():
    seen = evaluate("loss", [2.0, 2.0, 2.0])
    assert [(b.step, b.evals_since) for b in seen] == [(1, 0), (1, 1), (1, 2)]


def test_a_nan_never_improves_and_counts_as_an_evaluation_without_improvement():
    seen = evaluate("loss", [math.nan, 3.0, math.nan])
    assert [(b.step, b.evals_since) for b in seen] == [(None, 1), (2, 0), (2, 1)]


def test_the_count_is_of_evaluations_since_the_best_and_restarts_at_each_improvement():
    seen = evaluate("bleu", [1.0, 0.5, 0.5, 2.0, 1.0])
    assert [b.evals_since for b in seen] == [0, 1, 2, 0, 1]


def test_patience_is_spent_after_that_many_evaluations_without_improvement():
    seen = evaluate("bleu", [1.0, 0.5, 0.5, 0.9])
    assert [patience_spent(b, 3) for b in seen] == [False, False, False, True]
    assert [patience_spent(b, 2) for b in seen] == [False, False, True, True]


def test_patience_0_never_stops_nor_does_a_run_without_keep_best():
    assert not patience_spent(Best("loss", step=1, value=1.0, evals_since=100), 0)
    assert not patience_spent(None, 3)


def test_a_metric_the_dev_evaluation_does_not_report_is_a_user_error_naming_those_it_does():
    with pytest.raises(UserError, match=r"reports no bleu; use one of loss, accuracy$"):
        after_evaluation(Best("bleu"), 5, {"split": "dev", "loss": 2.0, "accuracy": 0.5})


def test_keep_best_in_a_run_without_a_dev_evaluation_is_a_user_error():
    with pytest.raises(UserError, match="this run has no dev evaluation"):
        after_evaluation(Best("loss"), 5, None)


def test_a_checkpoints_best_resumes_as_it_was():
    best = Best("bleu", step=40, value=23.5, evals_since=2)
    saved = CheckpointMeta(60, best=best).to_json()
    assert saved["best"] == {"metric": "bleu", "step": 40, "value": 23.5, "evals_since": 2}
    assert from_meta(CheckpointMeta.from_json(saved), "bleu") == (best, None)


def test_a_checkpoint_without_a_best_resumes_with_none_yet():
    assert from_meta(CheckpointMeta.from_json({"step": 60}), "loss") == (Best("loss"), None)
    assert from_meta(None, "loss") == (Best("loss"), None)


def test_a_best_by_another_metric_is_chosen_anew_and_said():
    saved = CheckpointMeta(60, best=Best("bleu", step=40, value=23.5, evals_since=2))
    best, note = from_meta(saved, "loss")
    assert best == Best("loss")
    assert "chosen anew" in note and "bleu" in note


def test_the_stop_names_the_best_step_its_value_and_the_patience():
    best = Best("bleu", step=40, value=23.456, evals_since=3)
    assert describe_patience(best, 3) == (
        "3 dev evaluations in a row did not improve on step 40's bleu 23.46 (train.patience=3)"
    )
    assert "gave no finite loss" in describe_patience(Best("loss", evals_since=3), 3)


# ------------------------------------------------------------------------ the settings


def test_keep_best_and_patience_are_off_by_default():
    config = TrainConfig()
    assert config.keep_best == "" and config.patience == 0


def test_patience_without_keep_best_is_a_user_error():
    with pytest.raises(UserError, match=r"train.patience=3 .* set --config.train.keep_best"):
        TrainConfig(patience=3)


@pytest.mark.parametrize("patience", [-1, 1.5, True, "3"])
def test_patience_must_be_a_whole_number_at_least_0(patience):
    with pytest.raises(UserError, match="train.patience"):
        TrainConfig(keep_best="loss", patience=patience)


@pytest.mark.parametrize("metric", ["dev loss", "1bleu", "bleu-4", None])
def test_keep_best_must_be_a_metric_name(metric):
    with pytest.raises(UserError, match="use a dev metric's name"):
        TrainConfig(keep_best=metric)


def test_keep_best_without_dev_evaluations_is_a_user_error():
    with pytest.raises(UserError, match="needs dev evaluations: set --config.train.eval_every"):
        TrainConfig(keep_best="bleu", eval_every=0)


def test_with_keep_best_an_evaluated_step_is_also_a_checkpoint():
    every = {"log_every": 2, "checkpoint_every": 6, "eval_every": 4}
    assert not due_after_step(4, 20, **every).checkpoint
    due = due_after_step(4, 20, **every, keep_best=True)
    assert due.evaluate and due.checkpoint and due.log
    assert not due_after_step(5, 20, **every, keep_best=True).checkpoint
