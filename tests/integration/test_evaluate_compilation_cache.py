"""The persistent compilation cache of decoding: a fresh evaluate.py reads the decoders an
earlier one compiled, Translator.load turns it on, a bad directory is a one-line error."""

import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from paths import REPO

from jaxtrans.compilation_cache import DEFAULT_DIR, DIR_VARIABLE, cache_directory
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.programs.evaluate import main
from jaxtrans.programs.translator import Translator
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta
from jaxtrans.workdirs.checkpoints import Checkpointer

LINES = ["ke tafo miro lesa .", "bodeul jovin kvar ta lumi ko jetalon ku?", "rasiul kalmin ."]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A translation workdir of random weights: config.json (no train section: the
    default cache directory), a tokenizer of the demo corpus, one checkpoint."""
    workdir = tmp_path_factory.mktemp("run")
    data_config = get_data_config()
    data_config.vocab_size = 120
    data_config.demo_train_size = 800
    tokenizer = load_or_train_tokenizer(data_config, str(workdir))
    model = dict(vocab_size=tokenizer.source_vocab_size, target_vocab_size=None,
                 share_embeddings=True, tie_output=True, d_model=16, num_heads=2, d_ff=32,
                 num_encoder_layers=1, num_decoder_layers=1, max_len=64,
                 position="learned")  # fmt: skip
    run_config = {"model": model, "data": data_config.to_dict(), "eval": {"beam_size": 1}}
    (workdir / "config.json").write_text(json.dumps(run_config))
    ids = jnp.ones((1, 4), jnp.int32)
    params = nn.unbox(
        jax.jit(Transformer(TransformerConfig(**model)).init)(jax.random.key(0), ids, ids)
    )
    checkpointer = Checkpointer(str(workdir), async_save=False)
    rng, opt_state = jnp.zeros((2,), jnp.uint32), {"count": jnp.zeros((), jnp.int32)}
    checkpointer.save(10, params["params"], opt_state, rng, CheckpointMeta(10))
    checkpointer.close()
    (workdir / "input.txt").write_text("".join(line + "\n" for line in LINES))
    return workdir


@pytest.fixture
def process_cache_settings():
    """Translator.load turns the cache on for the whole process; restored afterwards."""
    from jax.experimental.compilation_cache import compilation_cache as cc

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")  # fmt: skip
    saved = {name: getattr(jax.config, name) for name in names}
    yield
    for name, value in saved.items():
        jax.config.update(name, value)
    cc.reset_cache()


def evaluate_program(workdir, output, *flags: str, env: dict) -> str:
    """A fresh ``evaluate.py --input``; its stderr (jax logs each cache hit)."""
    command = [sys.executable, "evaluate.py", f"--workdir={workdir}",
               f"--input={workdir / 'input.txt'}", f"--output={output}", *flags]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def decoders(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith("jit_greedy_decode"))


def test_a_second_evaluate_reads_the_decoders_the_first_compiled(workdir, tmp_path):
    cache = tmp_path / "xla"
    # The first run: the run config's default directory, which the environment redirects.
    env = {**os.environ, DIR_VARIABLE: str(cache), "JAX_LOG_COMPILES": "1"}
    first = evaluate_program(workdir, tmp_path / "first.txt", env=env)
    written = decoders(cache)
    assert written, os.listdir(cache)
    assert "Persistent compilation cache hit for 'jit_greedy_decode'" not in first
    # The second: the directory by the flag, the environment elsewhere.
    env[DIR_VARIABLE] = str(tmp_path / "elsewhere")
    second = evaluate_program(
        workdir, tmp_path / "second.txt", f"--compilation_cache_dir={cache}", env=env
    )
    assert "Persistent compilation cache hit for 'jit_greedy_decode'" in second
    assert decoders(cache) == written
    assert not (tmp_path / "elsewhere").exists()
    translations = (tmp_path / "first.txt").read_text().splitlines()
    assert (tmp_path / "second.txt").read_text().splitlines() == translations
    assert len(translations) == len(LINES)


def test_translator_load_keeps_its_decoders_in_the_directory_given(
    workdir, tmp_path, process_cache_settings
):
    translator = Translator.load(str(workdir), compilation_cache_dir=str(tmp_path / "xla"))
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "xla")
    assert len(translator.translate(LINES)) == len(LINES)
    assert decoders(tmp_path / "xla")


def test_no_directory_leaves_the_process_settings_as_they_were(workdir, process_cache_settings):
    before = jax.config.jax_compilation_cache_dir
    Translator.load(str(workdir), compilation_cache_dir="")
    assert jax.config.jax_compilation_cache_dir == before


def test_the_default_directory_is_the_environment_s_where_it_is_set(monkeypatch, tmp_path):
    monkeypatch.setenv(DIR_VARIABLE, str(tmp_path))
    assert cache_directory(DEFAULT_DIR) == str(tmp_path)
    assert cache_directory("~/other") == os.path.expanduser("~/other")
    assert cache_directory("") == ""
    monkeypatch.delenv(DIR_VARIABLE)
    assert cache_directory(DEFAULT_DIR) == os.path.expanduser(DEFAULT_DIR)


def test_a_directory_that_cannot_be_made_is_a_one_line_error(workdir, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate.py", f"--workdir={workdir}", f"--input={workdir / 'input.txt'}",
              f"--compilation_cache_dir={tmp_path / 'file' / 'xla'}"])  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--compilation_cache_dir=" in err, err
    assert "give a writable directory" in err
