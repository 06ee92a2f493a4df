"""Loading a workdir runs no pickle and training or evaluating opens no network connection.

Checkpoints are orbax (TensorStore arrays + JSON), tokenizers SentencePiece protobufs,
configs JSON; Hugging Face weights are safetensors (or pytorch_model.bin through
``torch.load(weights_only=True)``, which refuses anything but tensors and containers).
Config *files* are Python and run when loaded: that is documented, not prevented.
"""

import glob
import os
import re

import pytest
from paths import REPO
from reliability_runs import copy_of_reference, run_program, tiny_flags, train

# Loading arbitrary objects: any of these in the package would be a way to run code from a
# file. (torch.load is allowed only with weights_only=True, checked separately.)
UNSAFE_LOADERS = re.compile(
    r"\bimport (?:pickle|cloudpickle|dill|joblib|shelve)\b"
    r"|\bfrom (?:pickle|cloudpickle|dill|joblib|shelve) import\b"
    r"|\b(?:pickle|cloudpickle|dill|joblib)\.(?:load|loads|Unpickler)\b"
    r"|\bmarshal\.loads?\b|allow_pickle\s*=\s*True|\byaml\.(?:unsafe_)?load\("
)


def package_sources() -> dict[str, str]:
    paths = glob.glob(os.path.join(REPO, "jaxtrans", "**", "*.py"), recursive=True)
    paths += [os.path.join(REPO, name) for name in ("train.py", "evaluate.py")]
    sources = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            sources[os.path.relpath(path, REPO)] = f.read()
    return sources


def test_the_package_has_no_pickle_based_loader():
    found = [
        f"{path}: {match.group(0)}"
        for path, text in package_sources().items()
        for match in UNSAFE_LOADERS.finditer(text)
    ]
    assert found == []


def test_every_torch_load_refuses_pickled_objects():
    calls = [
        (path, call)
        for path, text in package_sources().items()
        for call in re.findall(r"torch\.load\([^)]*\)", text)
    ]
    for path, call in calls:
        assert "weights_only=True" in call, f"{path}: {call}"


# Records the audit events of unpickling a class and of reaching out to the network, each
# with the file that asked for it.
AUDIT = """
import sys
def record(event, args):
    if event == "pickle.find_class" or event in (
        "socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto",
        "urllib.Request", "http.client.connect",
    ):
        frame = sys._getframe(1)
        while frame and frame.f_code.co_filename.endswith(("pickle.py", "copyreg.py")):
            frame = frame.f_back
        caller = frame.f_code.co_filename if frame else "?"
        with open({log!r}, "a") as f:
            f.write(f"{{event}} {{args!r}} from {{caller}}\\n")
sys.addaudithook(record)
"""

# tensorboardX hands the event protos it made (and a stop sentinel) to its writer thread
# through a multiprocessing.Queue, which pickles them in memory: no file is read.
IN_MEMORY_QUEUE = re.compile(r"^pickle\.find_class .* from .*multiprocessing/queues\.py$")


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory) -> list[str]:
    """Audit events of a resumed training and of an evaluation of its workdir (restore,
    decode the dev split, score it with sacreBLEU, write the report)."""
    tmp_path = tmp_path_factory.mktemp("audited")
    log = str(tmp_path / "audit.log")
    prelude = AUDIT.format(log=log)

    # The recorder works: a child that unpickles a class is caught.
    control = str(tmp_path / "control.log")
    probe = AUDIT.format(log=control) + "import pickle; pickle.loads(pickle.dumps(OSError))\n"
    run_program("evaluate.py", ["--split=none"], prelude=probe)
    with open(control) as f:
        assert "pickle.find_class" in f.read()

    workdir = copy_of_reference(tmp_path / "run")
    resumed = train(workdir, *tiny_flags(num_steps=10), prelude=prelude)
    assert resumed.returncode == 0, resumed.stderr
    evaluated = run_program(
        "evaluate.py",
        ["--workdir", workdir, "--split=dev", "--beam_size=1", "--max_extra_length=2"],
        prelude=prelude,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return f.read().splitlines()


def test_resuming_and_evaluating_a_workdir_unpickle_nothing(audit_log):
    unpickled = [line for line in audit_log if line.startswith("pickle")]
    assert [line for line in unpickled if not IN_MEMORY_QUEUE.match(line)] == []


def test_training_and_evaluating_open_no_network_connection(audit_log):
    assert [line for line in audit_log if not line.startswith("pickle")] == []
