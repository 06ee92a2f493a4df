"""python -m jaxtrans.compile: train.py's step compiled for TPU slices this machine does
not have (libtpu's compile-only devices), and what the compiler says of it.

A tiny model throughout: libtpu takes 4-5 CPU minutes here to compile configs/base.py's
step, so base on v5e-8 and the Colab notebook's configuration on Colab's v5e-1 are rows
of benchmarks/compile_table.py (docs/accelerators.md), not tests. The layout is checked
against numbers computed here from the parameter count, not against the report itself.
"""

import json
import subprocess
import sys

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache
from paths import REPO
from tiny_configs import TINY_TRANSLATION, tiny_translation_config

from jaxtrans.compiling.compile_report import compile_for_slice, describe
from jaxtrans.errors import UserError
from jaxtrans.tasks import compile_task, load_task

# The tiny run, packed, with rows that split over 8 devices, wide enough that the vectors
# that stay whole (biases, LayerNorm scales) are a small part of the parameters.
TINY = {
    **TINY_TRANSLATION,
    "data.batch_size": 16,
    "data.pack": True,
    "model.d_model": 128,
    "model.num_heads": 4,
    "model.d_ff": 512,
}


@pytest.fixture(scope="module", autouse=True)
def no_persistent_cache():
    """An earlier test of this worker may have turned jax's persistent cache on (it is one
    switch a process, for every backend); libtpu's compile-only client cannot read CPU
    entries back, and jaxtrans.compile never turns the cache on: off for this module."""
    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    yield
    jax.config.update("jax_enable_compilation_cache", enabled)
    compilation_cache.reset_cache()


def tiny(**overrides):
    return tiny_translation_config(10, **{**TINY, **overrides})


@pytest.fixture(scope="module")
def data_parallel():
    """The tiny run on v5e-8, every device a replica (mesh data=8), XLA's attention (the
    default, auto, would take splash on a TPU: the sharded fixture below)."""
    overrides = {"mesh.data": -1, "model.attention_impl": "xla"}
    return compile_for_slice(tiny(**overrides), "v5e-8", decode=False)


def test_a_replicated_step_holds_every_parameter_on_each_device(data_parallel):
    report = data_parallel
    params = report["parameters"]
    assert report["mesh"] == {"data": 8, "fsdp": 1, "tensor": 1}
    assert report["bytes_per_device"]["params"] == params * 4  # float32, whole
    # Adam: two moments of every parameter (and a step count).
    assert abs(report["bytes_per_device"]["optimizer"] - 2 * params * 4) <= 64
    # 2 of the 16 rows per device, 7 int32 arrays of 24 tokens.
    assert report["bytes_per_device"]["batch"] == 2 * 24 * 7 * 4
    assert report["fits"] and report["bytes_per_device"]["total"] < report["hbm_bytes_per_device"]


@pytest.fixture(scope="module")
def sharded():
    """The tiny run on a pod slice of 32 chips on 8 hosts, parameters and optimizer state
    split over fsdp x tensor = 8, splash attention."""
    overrides = {
        "mesh.data": 4,
        "mesh.fsdp": 4,
        "mesh.tensor": 2,
        "data.batch_size": 64,
        "model.attention_impl": "splash",
        "model.attention_dropout_rate": 0.0,
    }
    return compile_for_slice(tiny(**overrides), "v5e-32", decode=False)


def test_fsdp_and_tensor_split_parameters_and_optimizer_by_their_factor(data_parallel, sharded):
    params = data_parallel["parameters"]
    assert sharded["parameters"] == params
    factor = 4 * 2
    per_device = sharded["bytes_per_device"]
    # Within 5% of count x bytes / factor (a few small vectors stay whole).
    assert per_device["params"] == pytest.approx(params * 4 / factor, rel=0.05)
    assert per_device["optimizer"] == pytest.approx(2 * params * 4 / factor, rel=0.05)


def test_a_multi_host_slice_compiles_with_its_hosts(sharded):
    assert (sharded["chips"], sharded["hosts"]) == (32, 8)
    assert sharded["mesh"] == {"data": 4, "fsdp": 4, "tensor": 2}
    assert sharded["fits"]


def test_splash_attention_is_in_the_compiled_tpu_step(sharded):
    assert sharded["attention_kernel"] == {
        "encoder self": "splash",
        "decoder self": "splash",
        "cross": "splash",
    }
    assert "tpu_custom_call" in sharded["custom_calls"]  # the Pallas kernels


def test_compiler_flops_agree_with_the_model_flop_count(data_parallel):
    ratio = data_parallel["compiler_flops_per_step"] / data_parallel["model_flops_per_step"]
    # The compiler counts the softmax, layer norms and the optimizer besides the matmuls.
    assert 0.9 < ratio < 1.5
    assert data_parallel["estimated_step_seconds"] > 0
    assert 0 < data_parallel["estimated_mfu"] < 1


def test_xla_attention_has_no_pallas_kernel(data_parallel):
    assert "tpu_custom_call" not in data_parallel["custom_calls"]


def test_a_step_that_cannot_fit_is_reported_not_fitting():
    # 64k-wide feed-forward layers and 4096 rows on one 16 GiB chip: a float32 hidden
    # layer of 4096 x 24 x 65536 is 24 GiB.
    report = compile_for_slice(
        tiny(**{"model.d_ff": 65536, "data.batch_size": 4096}), "v5e-1", decode=False
    )
    assert not report["fits"]
    assert report["spare_bytes_per_device"] < 0
    # The compiler refused it, and said how much it needed: more than the chip has.
    assert "RESOURCE_EXHAUSTED" in report["out_of_memory"]
    assert report["bytes_per_device"]["total"] > report["hbm_bytes_per_device"]
    assert "DOES NOT FIT" in describe({**report, "compile_seconds": 1.0})


def test_the_batch_shapes_are_the_pipelines(tmp_path):
    """What the step is compiled for is what train.py feeds it."""
    config = tiny()
    task = load_task(config, str(tmp_path))
    batch = next(task.train_iterator(0, 0, 1))
    shapes = compile_task(config).batch_shapes(config.data.batch_size)
    assert set(shapes) == set(batch)
    for key, array in batch.items():
        assert (shapes[key].shape, shapes[key].dtype) == (array.shape, array.dtype), key
    # And the model the compile sizes from data.vocab_size is the one the tokenizer gives.
    assert compile_task(config).model_config == task.model_config


def run_compile(*args):
    return subprocess.run(
        [sys.executable, "-m", "jaxtrans.compile", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def test_the_command_prints_one_json_object():
    overrides = [f"--config.{k}={v}" for k, v in TINY.items()]
    printed = run_compile(
        "--config", "configs/demo.py", "--topology", "v5e-4", "--json", *overrides
    )
    assert printed.returncode == 0, printed.stderr
    assert printed.stderr == ""  # libtpu kept quiet
    report = json.loads(printed.stdout)
    for key in (
        "fits",
        "hbm_bytes_per_device",
        "compiler_flops_per_step",
        "model_flops_per_step",
        "estimated_step_seconds",
        "attention_kernel",
    ):
        assert key in report
    assert set(report["bytes_per_device"]) == {"params", "optimizer", "batch", "temp", "total"}
    assert report["decode"]["fits"] and report["decode"]["program"].startswith("beam 4")


def test_the_table_says_fits_and_labels_the_estimate(data_parallel):
    table = describe({**data_parallel, "compile_seconds": 1.0})
    assert "of 16.00 GiB HBM: fits" in table
    assert "not a measurement" in table


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--topology", "v3-8"], "--topology v3-8: unknown TPU"),
        (["--topology", "v5e-8", "--config.mesh.data=16"], "--topology v5e-8 has 8 devices"),
        ([], "--topology is required"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(args, says):
    result = run_compile("--config", "configs/demo.py", *args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr


def test_without_libtpu_the_error_names_the_install(monkeypatch):
    from jaxtrans.compiling import tpu_topologies

    monkeypatch.setitem(sys.modules, "libtpu", None)  # import libtpu now fails
    with pytest.raises(UserError, match=r"needs libtpu: pip install .*\[tpu-compile\]"):
        tpu_topologies.compile_only_devices(tpu_topologies.slice_named("v5e-8"))


def test_a_step_by_tokens_starts_on_a_v5p_128_with_rows_for_its_64_chips():
    # base's case in small: 96 rows' worth of tokens do not split over 64 chips; the rows
    # are rounded up to 128 (2 a chip), on 16 hosts, with rbg dropout masks in bfloat16.
    overrides = {
        "data.batch_size": 0,
        "data.tokens_per_batch": 96 * 24,
        "model.dtype": "bfloat16",
        "train.dropout_rng_impl": "rbg",
    }
    report = compile_for_slice(tiny(**overrides), "v5p-128", decode=False)
    assert (report["chips"], report["hosts"]) == (64, 16)
    assert report["mesh"] == {"data": 64, "fsdp": 1, "tensor": 1}
    assert report["bytes_per_device"]["batch"] == 2 * 24 * 7 * 4  # 2 rows of 7 int32 arrays
    assert report["fits"]
