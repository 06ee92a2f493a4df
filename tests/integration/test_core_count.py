"""The same translations on one core as on two: a process pinned to one core (``taskset -c
0``, which sizes XLA's thread pool) and one on two (``taskset -c 0,1``) decode alike, greedy
and beam 4, each compiling its own decoders with XLA's default optimisation
(tests/helpers/core_count_decoding.py).

Needs taskset (util-linux) and two cores, as the CI machine has: a machine without them
fails here rather than skipping.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
from paths import FAST_COMPILE, REPO
from tiny_configs import TINY_TRANSLATION

HELPER = os.path.join(REPO, "tests", "helpers", "core_count_decoding.py")
# configs/demo.py as shipped (d_model 128, 2+2 layers) but for its training length: 150
# steps make translations with near-ties, where rounding would show.
DEMO_STEPS = 150


def _one_and_two_cores(*args: str) -> tuple[dict, dict]:
    """The helper's output pinned to core 0 and to cores 0 and 1, the two processes at
    once (what is compared is their results, not their speed)."""
    assert shutil.which("taskset"), "taskset (util-linux) is needed to pin a process to cores"
    assert len(os.sched_getaffinity(0)) >= 2, "two cores are needed to compare one with two"
    # XLA's own optimisation, as a user's process compiles (the suite's FAST_COMPILE off).
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if f not in FAST_COMPILE]
    env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(flags)}
    pinned = [
        subprocess.Popen(
            ["taskset", "-c", cores, sys.executable, HELPER, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for cores in ("0", "0,1")
    ]
    found = []
    for process in pinned:
        stdout, stderr = process.communicate()
        assert process.returncode == 0, stderr[-3000:]
        found.append(json.loads(stdout.strip().splitlines()[-1]))
    one, two = found
    assert (one.pop("cores"), two.pop("cores")) == (1, 2)
    return one, two


@pytest.fixture(scope="module")
def trained_demo(tmp_path_factory):
    """configs/demo.py trained DEMO_STEPS steps through train.py."""
    workdir = str(tmp_path_factory.mktemp("demo"))
    flags = [
        f"--config.train.num_steps={DEMO_STEPS}",
        f"--config.train.checkpoint_every={DEMO_STEPS}",
        "--config.train.eval_every=0",
        f"--config.data.workers={TINY_TRANSLATION['data.workers']}",
        "--config.train.compilation_cache_dir=",
    ]
    command = [sys.executable, "train.py", "--config", "configs/demo.py", *flags]
    env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [*command, "--workdir", workdir], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def test_a_trained_demo_translates_its_test_set_alike_on_one_core_and_two(trained_demo):
    one, two = _one_and_two_cores("demo", trained_demo)
    assert len(one["greedy"]) == 500 and len(set(one["greedy"])) > 400  # real translations
    assert one["beam4"] != one["greedy"]  # the searches differ somewhere
    for way in ("greedy", "beam4", "beam4 scores"):
        differ = [i for i, (a, b) in enumerate(zip(one[way], two[way], strict=True)) if a != b]
        assert not differ, f"{way}: {len(differ)} sentences differ, e.g. {differ[:5]}"


def test_a_marian_shaped_model_decodes_alike_on_one_core_and_two():
    one, two = _one_and_two_cores("marian")
    assert len({tuple(row) for row in one["greedy"]}) == len(one["greedy"])  # no collapse
    assert one == two
