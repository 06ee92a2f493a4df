"""What a fresh decoding process imports: evaluate.py, the Translator and the translation
task start without the training loop, its input pipeline (grain, 0.06 s), TensorBoard or
torch (tensorboardX imports torch where it is installed, about a second of every fresh
evaluate.py; benchmarks/decode_cold_start.py)."""

import subprocess
import sys

import pytest

HEAVY = ("jaxtrans.training.loop", "jaxtrans.training.metrics", "grain", "tensorboardX", "torch")
DECODING = [
    "evaluate",
    "jaxtrans.programs.translator",
    "jaxtrans.tasks.translation.translation_task",
]


@pytest.mark.parametrize("module", DECODING)
def test_decoding_does_not_import_training_or_torch(module):
    code = f"import sys, {module}\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == "", f"importing {module} imported {out}"


def test_training_still_writes_tensorboard():
    # The guard above must not hide a broken import: the writer's module is importable and
    # the metrics writer makes its TensorBoard writer on demand.
    code = (
        "import sys, tempfile\n"
        "from jaxtrans.training.metrics import MetricsWriter\n"
        "w = MetricsWriter(tempfile.mkdtemp())\n"
        "w.write(1, {'loss': 1.0})\n"
        "print('tensorboardX' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out.endswith("True")
