"""Stored decoders: a program traced once is read back, not traced, by a later process (a
fresh StoredJit stands for one), gives what jax.jit gives, and a change of what it depends
on makes another program."""

import os
import shutil

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_transformer_config

from jaxtrans.inference import stored_decoders
from jaxtrans.inference.decoding import greedy_decode
from jaxtrans.models import Transformer

traces = []


def scaled_sum(x, weights, *, power: int):
    traces.append(power)
    return jnp.sum(x**power * weights["w"], axis=-1)


def new_process_function():
    """A StoredJit with nothing in memory, as a fresh process has."""
    return stored_decoders.StoredJit(scaled_sum, static_argnames=("power",))


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(stored_decoders, "store_directory", lambda: str(tmp_path))
    traces.clear()
    return tmp_path


X = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
WEIGHTS = {"w": np.linspace(-1, 1, 4, dtype=np.float32)}


def expected(power):
    return np.sum(X.astype(np.float64) ** power * WEIGHTS["w"], axis=-1)


def test_a_stored_program_is_read_back_without_tracing(store):
    first = new_process_function()(X, WEIGHTS, power=2)
    assert traces == [2] and len(os.listdir(store)) == 1
    second = new_process_function()(X, WEIGHTS, power=2)
    assert traces == [2], "the second process traced the function again"
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))
    np.testing.assert_allclose(np.asarray(second), expected(2), rtol=1e-6)


def test_static_arguments_and_shapes_make_other_programs(store):
    function = new_process_function()
    function(X, WEIGHTS, power=2)
    np.testing.assert_allclose(function(X, WEIGHTS, power=3), expected(3), rtol=1e-6)
    function(X[:2], WEIGHTS, power=2)
    function(X.astype(np.float16), WEIGHTS, power=2)
    assert traces == [2, 3, 2, 2] and len(os.listdir(store)) == 4


def test_a_damaged_program_is_traced_again_and_rewritten(store):
    new_process_function()(X, WEIGHTS, power=2)
    (path,) = store.iterdir()
    path.write_bytes(b"not a program")
    np.testing.assert_allclose(new_process_function()(X, WEIGHTS, power=2), expected(2), rtol=1e-6)
    assert traces == [2, 2]
    new_process_function()(X, WEIGHTS, power=2)
    assert traces == [2, 2], "the rewritten program was not read back"


def test_without_a_store_it_is_plain_jit(monkeypatch, tmp_path):
    monkeypatch.setattr(stored_decoders, "store_directory", lambda: "")
    traces.clear()
    function = new_process_function()
    np.testing.assert_allclose(function(X, WEIGHTS, power=2), expected(2), rtol=1e-6)
    function(X, WEIGHTS, power=2)
    assert traces == [2] and not os.listdir(tmp_path)


def test_the_key_holds_the_code_jax_and_the_arguments():
    key = stored_decoders.program_key("f", {"power": 2}, (X,), {})
    assert key == stored_decoders.program_key("f", {"power": 2}, (X.copy(),), {})
    assert key != stored_decoders.program_key("g", {"power": 2}, (X,), {})
    assert key != stored_decoders.program_key("f", {"power": 3}, (X,), {})
    assert key != stored_decoders.program_key("f", {"power": 2}, (X.T,), {})
    assert key != stored_decoders.program_key("f", {"power": 2}, (jnp.asarray(2.0),), {})


def test_the_key_changes_with_the_code_digest_and_with_the_jax_version(monkeypatch):
    key = stored_decoders.program_key("f", {"power": 2}, (X,), {})
    assert stored_decoders.library_versions()[0] == jax.__version__

    with monkeypatch.context() as patched:
        patched.setattr(stored_decoders, "code_digest", lambda: "another code")
        assert stored_decoders.program_key("f", {"power": 2}, (X,), {}) != key
    with monkeypatch.context() as patched:
        versions = ("0.0.1", *stored_decoders.library_versions()[1:])
        patched.setattr(stored_decoders, "library_versions", lambda: versions)
        assert stored_decoders.program_key("f", {"power": 2}, (X,), {}) != key
    assert stored_decoders.program_key("f", {"power": 2}, (X,), {}) == key


def test_the_code_digest_changes_with_any_file_of_the_package(monkeypatch, tmp_path):
    package = os.path.dirname(os.path.dirname(stored_decoders.__file__))
    copy = tmp_path / "jaxtrans"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(stored_decoders, "__file__", str(copy / "inference" / "stored_decoders.py"))
    digest = stored_decoders.code_digest.__wrapped__
    assert digest() == stored_decoders.code_digest()  # the same files, the same digest
    with open(copy / "nn" / "attention.py", "a", encoding="utf-8") as f:
        f.write("# a change\n")
    assert digest() != stored_decoders.code_digest()


def test_the_store_is_in_the_compilation_cache_and_off_without_one(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", str(tmp_path))
        assert stored_decoders.store_directory() == str(tmp_path / stored_decoders.FOLDER)
        jax.config.update("jax_compilation_cache_dir", None)
        assert stored_decoders.store_directory() == ""
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_a_stored_greedy_decoder_decodes_as_the_jitted_one(store):
    config = tiny_transformer_config("rope", vocab=40)
    source = np.array([[5, 9, 12, 3, 0, 0], [7, 8, 3, 0, 0, 0]], np.int32)
    params = nn.unbox(Transformer(config).init(jax.random.key(1), source, source))["params"]
    lengths = np.array([10, 6], np.int32)
    assert isinstance(greedy_decode, stored_decoders.StoredJit)

    def decoder():
        return stored_decoders.StoredJit(greedy_decode.__wrapped__, ("config", "max_len"))

    stored = decoder()(params, source, lengths, config=config, max_len=12)
    assert len(os.listdir(store)) == 1
    again = decoder()(params, source, lengths, config=config, max_len=12)
    plain = jax.jit(greedy_decode.__wrapped__, static_argnames=("config", "max_len"))
    reference = plain(params, source, lengths, config=config, max_len=12)
    np.testing.assert_array_equal(np.asarray(stored), np.asarray(reference))
    np.testing.assert_array_equal(np.asarray(again), np.asarray(reference))


def test_a_call_hashes_its_key_once_per_signature(store, monkeypatch):
    hashed = []
    program_key = stored_decoders.program_key

    def counted(*args, **kwargs):
        hashed.append(args[0])
        return program_key(*args, **kwargs)

    monkeypatch.setattr(stored_decoders, "program_key", counted)
    function = new_process_function()
    for _ in range(3):  # numpy or jax arrays alike
        function(X, WEIGHTS, power=2)
        function(jnp.asarray(X), WEIGHTS, power=2)
    assert len(hashed) == 1
    np.testing.assert_allclose(function(X[:2], WEIGHTS, power=3), expected(3)[:2], rtol=1e-6)
    function(jnp.asarray(2.0) * X[:2], WEIGHTS, power=3)  # the same signature again
    assert len(hashed) == 2 and len(os.listdir(store)) == 2


def test_a_stored_shapes_is_read_back_instead_of_computed(store):
    computed = []

    def compute():
        computed.append(1)
        return {
            "w": jax.ShapeDtypeStruct((3, 4), jnp.float32),
            "b": {"c": jax.ShapeDtypeStruct((2,), jnp.int8)},
        }

    first = stored_decoders.stored_shapes("shapes", ["a"], compute)
    assert stored_decoders.stored_shapes("shapes", ["a"], compute) == first
    assert len(computed) == 1
    stored_decoders.stored_shapes("shapes", ["b"], compute)  # another key: computed
    assert len(computed) == 2
    assert len(list(store.iterdir())) == 2


def test_without_a_store_a_result_is_computed(monkeypatch):
    monkeypatch.setattr(stored_decoders, "store_directory", lambda: "")
    computed = []
    for _ in range(2):
        stored_decoders.stored_shapes("shapes", ["a"], lambda: computed.append(1) or {})
    assert computed == [1, 1]


def test_a_result_that_is_not_shapes_is_computed_each_time(store):
    computed = []
    for _ in range(2):
        stored_decoders.stored_shapes("other", ["a"], lambda: computed.append(1) or {"x": [1]})
    assert computed == [1, 1] and not list(store.iterdir())
