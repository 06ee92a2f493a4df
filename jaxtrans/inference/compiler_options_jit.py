"""``jax.jit`` whose XLA compiler options follow each call's arguments.

``jax.jit(fn, compiler_options=...)`` fixes its options for every call; the decoders choose
theirs by their rows (cpu_decoding.compiler_options: XLA's Eigen kernels for few rows on
one core). ``CompilerOptionsJit`` keeps one ``jax.jit`` per set of options and sends each
call to the one its arguments choose, so every program is compiled, and kept in the
persistent compilation cache, with the options of its own shapes. A call goes through
``jax.jit``'s own dispatch: nothing is traced or compiled again that jax.jit would not.
"""

import functools
import inspect
from collections.abc import Callable, Sequence

import jax


class CompilerOptionsJit:
    """``jax.jit(fn, static_argnames=...)``, compiled with the options that
    ``compiler_options(arguments)`` gives a call: arguments by name, defaults applied; None
    for XLA's defaults. Its programs are named ``jit_<fn's name>``, as jax.jit's are."""

    def __init__(
        self,
        fn: Callable,
        static_argnames: Sequence[str],
        compiler_options: Callable[[dict], dict[str, str] | None],
    ):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._signature = inspect.signature(fn)
        self._static_argnames = tuple(static_argnames)
        self._compiler_options = compiler_options
        # One jax.jit of fn per set of options (key: the sorted option items).
        self._jits: dict[tuple, Callable] = {}

    def _jitted(self, args: tuple, kwargs: dict) -> Callable:
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        options = self._compiler_options(bound.arguments)
        key = tuple(sorted((options or {}).items()))
        if key not in self._jits:
            self._jits[key] = jax.jit(
                self._fn, static_argnames=self._static_argnames, compiler_options=options
            )
        return self._jits[key]

    def __call__(self, *args, **kwargs):
        return self._jitted(args, kwargs)(*args, **kwargs)

    def lower(self, *args, **kwargs):
        """The jitted function's ``lower``, with this call's compiler options."""
        return self._jitted(args, kwargs).lower(*args, **kwargs)

    def _cache_size(self) -> int:
        """Programs compiled in this process, as ``jax.jit``'s ``_cache_size``."""
        return sum(jitted._cache_size() for jitted in self._jits.values())
