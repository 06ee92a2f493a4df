"""The wheel, installed into a fresh venv with no checkout in sight, trains, evaluates and
draws with the shipped configs by name: ``jaxtrans-train --config demo`` finds
configs/demo.py inside the package (jaxtrans.shipped_configs), and
``python -m jaxtrans.plot schedule`` its default config.

No network: the wheel is built without build isolation and installed with --no-deps into
a venv that sees the system site-packages (the dependencies). The commands run from a
directory outside the checkout; the test checks that ``jaxtrans`` then is the venv's copy,
not the checkout's editable install. The transcript goes to WHEEL_TRANSCRIPT.txt in the
test's temporary directory and to stdout (``pytest -s``)."""

import os
import shutil
import subprocess
import sys

import pytest
from paths import REPO
from tiny_configs import TINY_TRANSLATION

# What the wheel is built from (a copy, so that the build leaves nothing in the checkout).
SOURCES = ("pyproject.toml", "README.md", "jaxtrans", "configs")


class Transcript:
    def __init__(self, path):
        self.path, self.lines = path, []

    def run(self, command: list[str], cwd, env, timeout: float = 600) -> str:
        shown = " ".join(str(part) for part in command)
        done = subprocess.run(
            [str(part) for part in command], cwd=cwd, env=env, capture_output=True,
            text=True, timeout=timeout,
        )  # fmt: skip
        output = (done.stdout + done.stderr).strip()
        self.lines += [f"$ {shown}", output, f"(exit {done.returncode})", ""]
        with open(self.path, "w", encoding="utf-8") as f:
            f.write("\n".join(self.lines))
        assert done.returncode == 0, f"{shown} failed:\n{output[-4000:]}"
        return output


@pytest.mark.slow
def test_the_installed_wheel_trains_evaluates_and_plots_with_shipped_configs(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        origin = os.path.join(REPO, name)
        if os.path.isdir(origin):
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(origin, source / name)
    dist, venv, outside = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["JAX_PLATFORMS"] = "cpu"
    log = Transcript(tmp_path / "WHEEL_TRANSCRIPT.txt")
    log.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "-q", "-w", dist, "."], cwd=source, env=env)  # fmt: skip
    (wheel,) = dist.glob("jaxtrans-*.whl")
    log.run([sys.executable, "-m", "venv", "--system-site-packages", venv], tmp_path, env)
    log.run([venv / "bin" / "pip", "install", "--no-deps", "--no-index", "-q", wheel],
            tmp_path, env)  # fmt: skip
    where = log.run(
        [venv / "bin" / "python", "-c", "import jaxtrans; from jaxtrans.programs import "
         "config_names; print(jaxtrans.__file__); print(config_names.shipped_config_dir())"],
        outside, env,
    )  # fmt: skip
    package_file, configs_dir = where.splitlines()[-2:]
    for path in (package_file, configs_dir):
        assert path.startswith(str(venv)) and not path.startswith(REPO), where
    assert configs_dir.endswith(os.path.join("jaxtrans", "shipped_configs"))

    workdir = outside / "runs" / "demo"
    tiny = [f"--config.{key}={value}" for key, value in TINY_TRANSLATION.items()]
    log.run([venv / "bin" / "jaxtrans-train", "--config", "demo", "--workdir", workdir, *tiny,
             "--config.train.num_steps=3", "--config.train.compilation_cache_dir="],
            outside, env)  # fmt: skip
    assert (workdir / "config.json").is_file()
    evaluated = log.run([venv / "bin" / "jaxtrans-evaluate", "--workdir", workdir], outside, env)
    assert "BLEU" in evaluated or "bleu" in evaluated
    assert list((workdir / "eval").glob("test-step3-*.json"))
    picture = outside / "schedule.png"
    log.run([venv / "bin" / "python", "-m", "jaxtrans.plot", "schedule", "--output", picture],
            outside, env)  # fmt: skip
    assert picture.stat().st_size > 0
    unknown = subprocess.run(
        [venv / "bin" / "jaxtrans-train", "--config", "nope", "--workdir", workdir],
        cwd=outside, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    log.lines += [f"$ jaxtrans-train --config nope --workdir {workdir}", unknown.stderr.strip(),
                  f"(exit {unknown.returncode})"]  # fmt: skip
    assert unknown.returncode == 2 and "demo" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    print("\n".join(log.lines))
