"""The same sentences give the same SentencePiece model file on any machine: trained in
subprocesses pinned to 1 and to 2 cores, each one told that the machine has that many
(``os.cpu_count`` is the machine's count whatever the affinity), and one told it has 16.

Before the thread count was fixed (jaxtrans/data/tokenizers/sentencepiece_training.py),
the unigram models of these three runs had the same pieces with three different sets of
scores.
"""

import os
import subprocess
import sys

import pytest
from paths import REPO

TRAIN = """
import os, sys
os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(",")})
os.cpu_count = lambda: int(sys.argv[2])
from jaxtrans.data.tokenizers.sentencepiece_training import train_sentencepiece
from jaxtrans.data.translation.demo import demo_split
pairs = demo_split("train", size=4000, seed=0, held_out_sizes=(40, 40))
sentences = [side for pair in pairs for side in (pair[0], pair[1])]
train_sentencepiece(sentences, sys.argv[4], vocab_size=800, model_type=sys.argv[3],
                    character_coverage=1.0)
"""


def trained(tmp_path, model_type: str, cores: str, cpu_count: int) -> bytes:
    path = tmp_path / f"{model_type}-{cores}-{cpu_count}.model"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run(
        [sys.executable, "-c", TRAIN, cores, str(cpu_count), model_type, str(path)],
        env=env,
        check=True,
        timeout=600,
    )
    return path.read_bytes()


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="pins processes to two cores",
)
@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_the_model_file_is_the_same_on_1_2_and_16_cores(tmp_path, model_type):
    first, second = sorted(os.sched_getaffinity(0))[:2]
    one = trained(tmp_path, model_type, f"{first}", 1)
    two = trained(tmp_path, model_type, f"{first},{second}", 2)
    sixteen = trained(tmp_path, model_type, f"{first},{second}", 16)
    assert one == two == sixteen
