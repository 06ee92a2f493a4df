"""The question-answering demo learns with a seed that once did not: configs/bert_qa_demo.py
as shipped, seed 2, trained by train.py for 800 of its 2000 steps (the schedule decaying
over those 800), dev exact match at step 800 (one dev evaluation: the step-400 one showed
only where the run stood on the way).

Seed 2 is the one the demo's two training-only question kinds were added for (without the
job questions it stopped at dev exact match 0.78 after 2000 steps; docs/bert.md). Measured
on a 2-core CPU: 0.566 at step 400, 1.000 at step 800; without the name and job questions
the same 800 steps end far lower, which this test catches. It adds about 100 s to the slow
suite on an idle 2-core machine (800 steps of a 4-layer, 64-wide BERT and a dev evaluation
of 500 questions).
"""

import json
import os
import subprocess
import sys

from paths import REPO

STEPS = 800


def dev_records(workdir) -> dict[int, dict]:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return {r["step"]: r for r in records if r.get("split") == "dev"}


def test_seed_2_leaves_the_plateau_and_answers_every_dev_question_kind(tmp_path):
    overrides = {
        "seed": 2,
        "train.num_steps": STEPS,
        "train.eval_every": STEPS,
        "train.checkpoint_every": STEPS,
    }
    flags = [f"--config.{key}={value}" for key, value in overrides.items()]
    command = ["train.py", "--config", "configs/bert_qa_demo.py", *flags, "--workdir", tmp_path]
    run = subprocess.run(
        [sys.executable, *map(str, command)], cwd=REPO, capture_output=True, text=True,
        timeout=3600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]

    dev = dev_records(tmp_path)
    assert sorted(dev) == [STEPS]
    final = dev[STEPS]
    # Both kinds of answerable question (a surname after a name, a person after a job) and
    # the unanswerable ones: a model that learned one kind alone stays near 0.5-0.8.
    assert final["exact_match"] >= 0.95, final
    assert final["HasAns_exact"] >= 0.95 and final["NoAns_exact"] >= 0.95, final
