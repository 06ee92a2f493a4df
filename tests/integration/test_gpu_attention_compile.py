"""The GPU attention kernels compiled for an H100 this machine does not have (jax's CUDA
plugin, compile-only devices: tests/helpers/h100_target.py), read back from the compiled
HLO: Triton's kernels in the train step where the start-up line says triton, and cuDNN
given the mask type its arguments ask for (what tests/unit/nn/test_gpu_attention.py can
only record on CPU).

One subprocess (the plugin needs JAX_PLATFORMS=cpu and its constraints check off before
jax starts) compiles every program; the tests read its JSON.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from h100_target import GPU_COMPILE_ENV
from paths import HELPERS, xla_flags

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("jax_plugins.xla_cuda12") is None,
    reason="compiling for a GPU needs jax's CUDA plugin: pip install 'jax[cuda12]'",
)

FORWARD, BACKWARD = "__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"
# mha's custom VJP: a forward kernel (keeping the log-sum-exp), then for the gradient a
# preprocessing kernel (sum of out * d_out per query) and the fused dq/dk/dv kernel.
TRITON_PASSES = ("mha_forward", "mha_preprocess_backward", "mha_backward")


@pytest.fixture(scope="module")
def compiled():
    result = subprocess.run(
        [sys.executable, os.path.join(HELPERS, "gpu_attention_compile.py")],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **GPU_COMPILE_ENV, "XLA_FLAGS": xla_flags()},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_the_devices_are_h100s(compiled):
    assert (compiled["device"], compiled["platform"]) == ("NVIDIA H100 80GB HBM3", "gpu")


def test_the_train_step_runs_triton_in_both_self_attentions_forward_and_backward(compiled):
    """The tiny model's bfloat16 step on packed rows, attention_impl=auto: the kernels
    the start-up line names are the ones in the program, one forward and one backward
    per attention named triton, none for cross-attention (xla) and no cuDNN."""
    step = compiled["train step"]["packed"]
    assert step["kernels"] == {"encoder self": "triton", "decoder self": "triton", "cross": "xla"}
    triton_attentions = sum(kernel == "triton" for kernel in step["kernels"].values())
    assert step["triton"] == dict.fromkeys(TRITON_PASSES, triton_attentions)
    assert step["cudnn"] == []


def test_split_over_two_gpus_the_step_runs_triton_in_a_shard_map(compiled):
    """Rows split over two H100s (mesh data=2): the kernels run on each device's rows
    inside a shard_map (the compiler cannot split a Pallas kernel), one forward and one
    backward per self-attention as on one device."""
    split = compiled["train step"]["two devices"]
    assert split["mesh"] == {"data": 2, "fsdp": 1, "tensor": 1}
    assert split["shard_map"]
    assert split["triton"] == dict.fromkeys(TRITON_PASSES, 2)
    assert split["cudnn"] == []


def test_unpacked_rows_are_the_same_program_and_the_start_up_line_says_so(compiled):
    """Translation batches carry segment ids packed or not, so an unpacked run's step is
    the packed one, and its start-up line names the same kernels (not cuDNN, which takes
    no segments)."""
    step = compiled["train step"]
    assert step["same program"]
    assert step["unpacked"]["kernels"] == step["packed"]["kernels"]


def test_an_encoder_with_a_key_padding_mask_runs_cudnn_with_padding(compiled):
    layer = compiled["encoder layer"]
    assert layer["kernels"] == {"encoder self": "cudnn"}
    assert layer["cudnn"] == [f"{FORWARD} PADDING", f"{BACKWARD} PADDING"]
    assert layer["triton"] == {}


@pytest.mark.parametrize(
    ("mask", "mask_type"),
    [
        ("padding", "PADDING"),  # key lengths given
        ("padding+causal", "PADDING_CAUSAL"),  # key lengths and is_causal
        ("causal", "CAUSAL"),  # is_causal, no lengths
        ("none", "NO_MASK"),
    ],
)
def test_cudnn_compiles_with_the_mask_type_its_arguments_ask_for(compiled, mask, mask_type):
    assert compiled[f"cudnn {mask}"] == {
        "triton": {},
        "cudnn": [f"{FORWARD} {mask_type}", f"{BACKWARD} {mask_type}"],
    }


@pytest.mark.parametrize(
    "program",
    ["causal+segments 12x8", "segments 200x64", "causal+segments 200x128"],
)
def test_triton_compiles_for_ragged_lengths_small_and_largest_heads(compiled, program):
    """Length 12 (one 16-wide tile) with head_dim 8 (padded to 16), and 200 (two tiles of
    128 forward, eight of 32 backward) with head_dim 64 and 128 (the largest taken):
    each compiles to its three kernels, shared memory included."""
    assert compiled[f"triton {program}"] == {
        "triton": dict.fromkeys(TRITON_PASSES, 1),
        "cudnn": [],
    }
