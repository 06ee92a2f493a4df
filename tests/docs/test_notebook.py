"""notebooks/colab_tpu.ipynb: a valid notebook whose code is plain Python, run top to bottom
on CPU with the demo config and a tiny model in place of WMT14 base."""

import ast
import glob
import json
import os
import shlex
import tempfile
import types

import pip_resolve
import pytest
from paths import REPO

NOTEBOOK = os.path.join(REPO, "notebooks", "colab_tpu.ipynb")

# Cells this test does not run, by tag, and why.
NOT_RUN = {
    "install": "pip-installs jaxtrans and JAX (network, minutes); the test runs where the "
    "checkout is installed already",
    "tensorboard": "starts a TensorBoard server that would outlive the test",
}

# The settings cell (tagged "parameters") is replaced by these: the demo corpus, a tiny
# model and two steps, so that the run takes seconds on a CPU.
TINY_OVERRIDES = [
    "--config.model.d_model=16",
    "--config.model.num_heads=2",
    "--config.model.d_ff=32",
    "--config.model.num_encoder_layers=1",
    "--config.model.num_decoder_layers=1",
    "--config.data.demo_train_size=600",
    "--config.data.demo_dev_size=4",
    "--config.data.demo_test_size=4",
    "--config.data.vocab_size=200",
    "--config.data.batch_size=8",
    "--config.train.num_steps=2",
    "--config.train.log_every=1",
    "--config.train.checkpoint_every=2",
    "--config.train.eval_every=0",
    "--config.train.compilation_cache_dir=",
    "--config.eval.beam_size=1",
    "--config.eval.max_extra_length=4",
]


def load_notebook() -> dict:
    with open(NOTEBOOK, encoding="utf-8") as f:
        return json.load(f)


def source(cell: dict) -> str:
    return "".join(cell["source"])


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def test_notebook_is_nbformat_4_json_without_outputs():
    notebook = load_notebook()
    assert notebook["nbformat"] == 4 and notebook["nbformat_minor"] >= 5
    assert notebook["metadata"]["kernelspec"]["language"] == "python"
    ids = [cell["id"] for cell in notebook["cells"]]
    assert len(set(ids)) == len(ids)
    for cell in notebook["cells"]:
        assert cell["cell_type"] in ("markdown", "code")
        assert isinstance(cell["source"], list) and all(isinstance(s, str) for s in cell["source"])
        if cell["cell_type"] == "code":
            # Committed clean: no outputs from someone's machine.
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_every_code_cell_is_plain_python():
    # No IPython magics or shell escapes: the cells parse, and run in any Python.
    for cell in load_notebook()["cells"]:
        if cell["cell_type"] == "code":
            ast.parse(source(cell))


def test_notebook_covers_install_devices_tfds_mesh_tensorboard_training_and_bleu():
    code = "\n".join(source(c) for c in load_notebook()["cells"] if c["cell_type"] == "code")
    for needed in (
        "pip install -q -c {shlex.quote(JAX_PINS)} -e '.[{EXTRAS}]'",
        '"tfds,tpu"',
        '"tfds,cuda12"',
        "jax.devices()",
        "tfds build wmt14_translate/de-en --file_format=array_record",
        "configs/base.py",
        "--config.mesh.data=-1",
        "--config.model.dtype=float32",  # on a CPU only: base computes in bfloat16
        "tensorboard",
        "train.py",
        "-m jaxtrans.plot",
        "evaluate.py",
        "--checkpoint avg:5",
        "--plot_attention",
    ):
        assert needed in code, needed
    tagged = [t for c in load_notebook()["cells"] for t in tags(c)]
    assert sorted(tagged) == sorted(["parameters", *NOT_RUN])


@pytest.mark.slow
def test_notebook_runs_top_to_bottom_on_cpu_with_the_demo_config(tmp_path, monkeypatch):
    workdir = str(tmp_path / "run")
    parameters = (
        f"DEMO = True\nUSE_DRIVE = False\nREPO_URL = ''\nWORKDIR = {workdir!r}\n"
        f"OVERRIDES = {TINY_OVERRIDES!r}\nSENTENCE = 'tu vako ta sul dormirit.'\n"
    )
    monkeypatch.chdir(REPO)  # the notebook runs inside the checkout
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    # The notebook's programs run as subprocesses and inherit the suite's fast-compile
    # XLA_FLAGS (tests/conftest.py).
    namespace: dict = {"__name__": "__main__"}
    ran = 0
    for cell in load_notebook()["cells"]:
        if cell["cell_type"] != "code" or set(tags(cell)) & set(NOT_RUN):
            continue
        code = parameters if "parameters" in tags(cell) else source(cell)
        exec(compile(code, f"{NOTEBOOK}:{cell['id']}", "exec"), namespace)
        ran += 1
    assert ran == 9
    assert namespace["CONFIG"] == "configs/demo.py"
    # What the notebook promises: a trained run, its curves, a BLEU report, attention.
    assert os.path.isdir(os.path.join(workdir, "checkpoints", "2"))
    assert glob.glob(os.path.join(workdir, "tensorboard", "events.out.tfevents.*"))
    with open(os.path.join(workdir, "metrics.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(workdir, "eval", "test-step2-greedy.json"), encoding="utf-8") as f:
        report = json.load(f)
    assert report["num_sentences"] == 4 and 0.0 <= report["bleu"] <= 100.0
    for png in ("attention.png", "attention-masks.png"):
        with open(os.path.join(workdir, "eval", png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


# The packages that carry JAX to each runtime's chip, which the install keeps at the pins.
JAX_PACKAGES = {
    "tpu": ("jax", "jaxlib", "libtpu"),
    "cuda12": ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt"),
}


def install_command(runtime: str, monkeypatch, directory: str) -> tuple[str, dict[str, str]]:
    """The install cell run inside the checkout on a ``runtime`` ("tpu", "cuda12" or
    "cpu") Colab, its shell commands recorded instead of run: (the one pip command, the
    pins of the constraints file it writes into ``directory``, by canonical name)."""
    [cell] = [c for c in load_notebook()["cells"] if "install" in tags(c)]
    commands: list[str] = []
    tpu_devices = {"/dev/accel*": ["/dev/accel0"]} if runtime == "tpu" else {}
    namespace = {
        "os": os,
        "shlex": shlex,
        "PYTHON": "python",
        "REPO_URL": "",
        "sh": commands.append,
        "glob": types.SimpleNamespace(glob=lambda pattern: tpu_devices.get(pattern, [])),
        "shutil": types.SimpleNamespace(
            which=lambda name: "/usr/bin/nvidia-smi" if runtime == "cuda12" else None
        ),
    }
    monkeypatch.chdir(REPO)  # the notebook opened inside a checkout: no clone
    monkeypatch.setattr(tempfile, "tempdir", directory)
    exec(compile(source(cell), f"{NOTEBOOK}:{cell['id']}", "exec"), namespace)
    [command] = commands
    pins_file = shlex.split(command)[shlex.split(command).index("-c") + 1]
    assert os.path.dirname(pins_file) == directory
    with open(pins_file, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    return command, {name: version for name, version in (line.split("==") for line in lines)}


@pytest.mark.parametrize("runtime", ["tpu", "cuda12", "cpu"])
def test_install_cell_keeps_jax_and_the_accelerator_packages_at_the_pins(
    runtime, monkeypatch, tmp_path
):
    command, pinned = install_command(runtime, monkeypatch, str(tmp_path))
    extras = "tfds" if runtime == "cpu" else f"tfds,{runtime}"
    assert command.startswith("python -m pip install -q -c ")
    assert command.endswith(f"-e '.[{extras}]'")
    assert "-U" not in shlex.split(command)
    # The pins are constraints.txt's own lines: jax, jaxlib and every plugin and NVIDIA
    # wheel the extras bring; not the rest, which Colab's TensorFlow shares.
    pins = pip_resolve.pins()
    assert pinned == {name: pins[name] for name in pinned}
    assert set(JAX_PACKAGES["tpu"] + JAX_PACKAGES["cuda12"]) <= set(pinned)
    assert {name for name in pins if name.startswith("nvidia-")} <= set(pinned)
    assert not {"numpy", "protobuf", "tensorflow-datasets"} & set(pinned)


@pytest.fixture(scope="module")
def cell_resolutions(tmp_path_factory):
    """The install cell's command of a TPU and of a GPU runtime, dry-run against the
    package index at once, each from a checkout copy: {runtime: (its pins, resolved)}."""
    unreachable = pip_resolve.index_unreachable()
    if unreachable:
        pytest.skip(f"the package index is unreachable from here ({unreachable})")
    started = {}
    for runtime in ("tpu", "cuda12"):
        directory = str(tmp_path_factory.mktemp(f"cell-{runtime}"))
        with pytest.MonkeyPatch.context() as monkeypatch:
            command, pinned = install_command(runtime, monkeypatch, directory)
        checkout = pip_resolve.copy_checkout(directory)
        report = os.path.join(checkout, "report.json")
        process = pip_resolve.start_resolving(command, checkout, report)
        started[runtime] = (pinned, process, report)
    return {
        runtime: (pinned, pip_resolve.resolved(process, report))
        for runtime, (pinned, process, report) in started.items()
    }


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["tpu", "cuda12"])
def test_install_cell_resolves_jax_to_the_pins(runtime, cell_resolutions):
    # About two minutes where the index serves no separate metadata and pip downloads the
    # wheels (1.5 GB for CUDA); the two runtimes resolve side by side.
    pinned, resolved = cell_resolutions[runtime]
    for package in JAX_PACKAGES[runtime]:
        assert resolved.get(package) == pinned[package], (package, resolved.get(package))
    accelerator = {
        name: version
        for name, version in resolved.items()
        if name != "jaxtrans" and name.startswith(("jax", "nvidia-", "libtpu"))
    }
    assert accelerator == {name: pinned.get(name) for name in accelerator}
