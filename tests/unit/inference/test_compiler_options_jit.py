"""CompilerOptionsJit: jax.jit with the compiler options each call's arguments choose,
computing what jax.jit computes, compiling once per shape and set of options."""

import re

import jax
import jax.numpy as jnp
import numpy as np

from jaxtrans.inference.compiler_options_jit import CompilerOptionsJit

X = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
WEIGHTS = {"w": np.linspace(-1, 1, 4, dtype=np.float32)}


def scaled_sum(x, weights, *, power: int = 2):
    return jnp.sum(x**power * weights["w"], axis=-1)


def expected(x, power):
    return np.sum(x.astype(np.float64) ** power * WEIGHTS["w"], axis=-1)


def by_rows(dump: str, chosen: list | None = None):
    """Options by the rows of x: XLA's defaults for one row; for more, XLA writes the
    programs it compiles to the folder ``dump`` (an option that changes no result)."""

    def options(arguments):
        if chosen is not None:
            chosen.append((arguments["x"].shape[0], arguments["power"]))
        return None if arguments["x"].shape[0] == 1 else {"xla_dump_to": dump}

    return options


def test_it_computes_what_jax_jit_computes_and_chooses_by_the_arguments_with_defaults(tmp_path):
    chosen = []
    jitted = CompilerOptionsJit(scaled_sum, ("power",), by_rows(str(tmp_path), chosen))
    for x, power in [(X, 2), (X[:1], 3), (X[:2], 2)]:
        got = np.asarray(jitted(x, WEIGHTS, power=power))
        np.testing.assert_allclose(got, expected(x, power), rtol=1e-6)
        plain = jax.jit(scaled_sum, static_argnames=("power",))(x, WEIGHTS, power=power)
        np.testing.assert_array_equal(got, np.asarray(plain))
    jitted(X, WEIGHTS)  # power's default
    assert chosen == [(3, 2), (1, 3), (2, 2), (3, 2)]


def test_each_shape_compiles_once_and_each_set_of_options_is_its_own_jit(tmp_path):
    def fresh(x, weights, *, power: int = 2):  # jax.jit's caches hold scaled_sum's already
        return scaled_sum(x, weights, power=power)

    jitted = CompilerOptionsJit(fresh, ("power",), by_rows(str(tmp_path)))
    for _ in range(3):
        jitted(X, WEIGHTS, power=2)
        jitted(X[:1], WEIGHTS, power=2)
    assert jitted._cache_size() == 2
    assert len(jitted._jits) == 2  # XLA's defaults and the dump's
    jitted(X[:2], WEIGHTS, power=2)  # a new shape with options already seen
    assert jitted._cache_size() == 3 and len(jitted._jits) == 2


def test_each_program_is_compiled_with_the_options_of_its_own_call(tmp_path):
    # power 5: programs no other test compiles (the suite's persistent cache would skip a
    # compile, hence the dump, of one it had).
    jitted = CompilerOptionsJit(scaled_sum, ("power",), by_rows(str(tmp_path)))
    assert jitted.__wrapped__ is scaled_sum and jitted.__name__ == "scaled_sum"
    jitted(X[:1], WEIGHTS, power=5)  # XLA's defaults: nothing written
    assert not list(tmp_path.iterdir())
    jitted.lower(X, WEIGHTS, power=5).compile()  # lowered alike: the dump's options
    (program,) = tmp_path.glob("*.before_optimizations.txt")
    assert program.name.endswith(".jit_scaled_sum.before_optimizations.txt")  # jax.jit's name
    assert re.findall(r"(f32\[\d+,4\])\{1,0\} parameter\(0\)", program.read_text()) == ["f32[3,4]"]
