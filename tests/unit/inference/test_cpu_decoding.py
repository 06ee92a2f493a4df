"""Decoders of up to EIGEN_ROWS rows on CPU in a process of one core: compiled without
YNNPACK, a tied projection read transposed, and the same results."""

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_transformer_config

from jaxtrans.inference import cpu_decoding
from jaxtrans.inference.decoding import beam_decode, greedy_decode, model_decoder
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.stored_decoders import StoredJit
from jaxtrans.models import Transformer
from jaxtrans.models.transformer import OUTPUT_KERNEL
from jaxtrans.nn.attention import MEMORY_CACHE
from jaxtrans.nn.attention_kernels import target_platform
from jaxtrans.vocab import BOS_ID, PAD_ID

FEW = cpu_decoding.EIGEN_ROWS
CORES = cpu_decoding.cores  # before the fixture below replaces it


@pytest.fixture(autouse=True)
def one_core(monkeypatch):
    """The rule holds in a process of one core: every test here runs as in one."""
    monkeypatch.setattr(cpu_decoding, "cores", lambda: 1)


def test_few_rows_on_cpu_take_the_eigen_kernels_and_many_the_defaults():
    assert jax.default_backend() == "cpu"
    assert cpu_decoding.compiler_options(FEW) == {"xla_cpu_experimental_ynn_fusion_type": ""}
    assert cpu_decoding.compiler_options(FEW + 1) is None
    assert cpu_decoding.transposed_output(1) and not cpu_decoding.transposed_output(FEW + 1)


def test_a_process_of_several_cores_keeps_the_defaults(monkeypatch):
    monkeypatch.setattr(cpu_decoding, "cores", lambda: 2)
    assert cpu_decoding.compiler_options(1) is None
    assert not cpu_decoding.transposed_output(1)


def test_the_cores_are_those_the_process_may_run_on():
    assert CORES() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("platform", ["gpu", "tpu"])
def test_other_platforms_keep_the_defaults(platform):
    with target_platform(platform):  # as python -m jaxtrans.compile traces for a TPU
        assert cpu_decoding.compiler_options(1) is None
        assert not cpu_decoding.transposed_output(1)


def _tied_model():
    config = tiny_transformer_config("rope", vocab=11, tie_output=True, final_logits_bias=True)
    source = jnp.asarray(np.random.default_rng(0).integers(3, 11, size=(3, 5)), jnp.int32)
    params = nn.unbox(Transformer(config).init(jax.random.key(1), source, source))["params"]
    params["final_logits_bias"] = jnp.linspace(-1.0, 1.0, 11)
    return config, params, source


def test_a_tied_projection_is_read_transposed_by_few_rows_and_gives_the_teacher_forced_logits():
    config, params, source = _tied_model()
    target = np.random.default_rng(2).integers(3, 11, size=(3, 6))
    target[:, 0] = BOS_ID
    expected = Transformer(config).apply({"params": params}, source, jnp.asarray(target))

    @jax.jit
    def cached(params):
        step, cache, _ = model_decoder(config, params, source, max_len=6)
        logits = []
        for t in range(6):
            step_logits, cache = step(cache, jnp.asarray(target[:, t]), jnp.array(t))
            logits.append(step_logits)
        return jnp.stack(logits, axis=1)

    kernel = Transformer(config).apply({"params": params}, method=Transformer.output_kernel)
    table = params.get("target_embedding", params["source_embedding"])["embedding"]
    np.testing.assert_array_equal(np.asarray(kernel), np.asarray(table).T)
    np.testing.assert_allclose(np.asarray(cached(params)), np.asarray(expected), atol=1e-5)


def test_the_transposed_kernel_is_in_the_memory_cache_only_for_few_rows(monkeypatch):
    config, params, source = _tied_model()
    seen = []
    original = Transformer._project

    def spy(self, y):
        if self.config.decode and not self.is_initializing():
            seen.append(self.has_variable(MEMORY_CACHE, OUTPUT_KERNEL))
        return original(self, y)

    monkeypatch.setattr(Transformer, "_project", spy)
    for beam_size, expected in [(1, True), (FEW // 3 + 1, False)]:
        step, cache, _ = model_decoder(config, params, source, 4, beam_size)
        seen.clear()  # the steps' projections, not those of the calls that set them up
        step(cache, jnp.full((source.shape[0] * beam_size,), BOS_ID), jnp.array(0))
        assert seen == [expected], (beam_size, seen)


def test_a_stored_decoder_compiles_each_call_with_the_options_of_its_rows():
    calls = []

    def options(arguments):
        calls.append(arguments["rows"].shape[0] * arguments["scale"])
        return cpu_decoding.compiler_options(calls[-1])

    def matmul(rows, weights, *, scale=1):
        return rows @ weights * scale

    stored = StoredJit(matmul, static_argnames=("scale",), compiler_options=options)
    weights = jnp.ones((64, 256))
    few = stored.lower(jnp.ones((4, 64)), weights).compile().as_text()
    many = stored.lower(jnp.ones((FEW + 1, 64)), weights, scale=2).compile().as_text()
    assert calls == [4, 2 * (FEW + 1)]  # defaults applied: scale 1 for the first
    assert "ynn" not in few and "ynn" in many
    np.testing.assert_array_equal(np.asarray(stored(jnp.ones((4, 64)), weights)), 64.0)


@pytest.mark.slow
def test_a_tied_model_decodes_the_same_with_few_rows_and_many():
    """Greedy and beam search of three sentences (few rows) equal the same sentences
    decoded among padding rows that make the batch many (the default kernels)."""
    config, params, source = _tied_model()
    lengths = jnp.array([6, 4, 6])
    many = FEW + 1
    padded = jnp.concatenate([source, jnp.full((many - 3, 5), PAD_ID, jnp.int32)])
    padded_lengths = jnp.concatenate([lengths, jnp.zeros((many - 3,), jnp.int32)])
    few_tokens = greedy_decode(params, source, lengths, config=config, max_len=6)
    many_tokens = greedy_decode(params, padded, padded_lengths, config=config, max_len=6)
    np.testing.assert_array_equal(np.asarray(few_tokens), np.asarray(many_tokens)[:3])
    beam = dict(config=config, max_len=6)
    options = SearchOptions(beam_size=2, alpha=0.6)
    few_beams, few_scores = beam_decode(params, source, lengths, options, **beam)
    many_beams, many_scores = beam_decode(params, padded, padded_lengths, options, **beam)
    np.testing.assert_array_equal(np.asarray(few_beams), np.asarray(many_beams)[:3])
    np.testing.assert_allclose(np.asarray(few_scores), np.asarray(many_scores)[:3], rtol=1e-5)
