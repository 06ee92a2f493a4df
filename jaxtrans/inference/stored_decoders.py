"""Decoders traced once and kept on disk: a fresh process reads the traced program instead of
tracing it again.

jax's persistent compilation cache (jaxtrans.compilation_cache) spares a fresh
``evaluate.py`` or ``Translator`` the XLA compile of its decoders, but not the Python
tracing and lowering that come first: about a second per decoder shape for the demo
model, more than the decoding of a thousand sentences. ``StoredJit`` is ``jax.jit``
that also keeps each traced program (``jax.export``, serialized) in
``<compilation cache>/jaxtrans-decoders/``, under a key of everything the program depends
on: the code of jaxtrans, the versions of jax, jaxlib and flax, the settings that change a
trace (64-bit types, the default matmul precision), the platform, the function, its static
arguments (the model config, the length, the beam size...) and the shapes and dtypes of
its array arguments. A later process with the
same key deserializes it and runs it through the compilation cache, without tracing. Any
change of code or jax makes another key. ``stored_shapes`` keeps another traced result
the same way, as JSON: the shapes of a model's parameters, which a checkpoint's restore would
otherwise trace from the model's init (0.24 s of a fresh evaluate.py for the demo).

Stored programs are used where the compilation cache is on and the process has one
device (a program exported for one device layout is not one for another); everywhere
else, and where a program cannot be stored, it is plain ``jax.jit``. A stored file that
cannot be read is traced again and rewritten.
"""

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import export

# The folder, inside the compilation cache directory, that holds the stored programs.
FOLDER = "jaxtrans-decoders"


@functools.cache
def code_digest() -> str:
    """A digest of every Python file of the jaxtrans package."""
    digest = hashlib.sha256()
    root = pathlib.Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def library_versions() -> tuple[str, ...]:
    """The versions of the libraries a traced decoder comes from."""
    return tuple(importlib.metadata.version(name) for name in ("jax", "jaxlib", "flax"))


def store_directory() -> str:
    """Where programs are stored now: "" when the compilation cache is off or the process
    has more than one device."""
    cache_dir = jax.config.jax_compilation_cache_dir
    if not cache_dir or jax.device_count() != 1:
        return ""
    return os.path.join(cache_dir, FOLDER)


def _as_array(x) -> jax.Array:
    """An argument as a jax array (one already is one: not converted again), put on the
    device as it is (jnp.asarray would compile a program per shape to do it)."""
    return x if isinstance(x, jax.Array) else jax.device_put(x)


def _leaf_signature(x) -> str:
    aval = jax.typeof(x)
    return f"{aval.dtype}{list(aval.shape)}{'w' if aval.weak_type else ''}"


def program_key(name: str, static: dict, args: tuple, kwargs: dict) -> str:
    """The file name of one program: everything it depends on, hashed."""
    leaves, tree = jax.tree.flatten((args, kwargs))
    parts = [
        code_digest(),
        *library_versions(),
        # The settings that change what a trace makes.
        repr([jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision]),
        jax.default_backend(),
        name,
        repr(sorted(static.items())),
        str(tree),
        ",".join(map(_leaf_signature, leaves)),
    ]
    return _digest(parts)


def _digest(parts: Sequence[str]) -> str:
    """The file name in the store of what ``parts`` (code, versions, ...) describe."""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def stored_shapes(name: str, key: Sequence[str], compute: Callable[[], Any]) -> Any:
    """``compute()``, nested dicts of jax.ShapeDtypeStruct (the shapes of a model's
    parameters, traced from its init), kept in the store beside the decoders as JSON
    under a key of ``name``, ``key`` (what it depends on besides jaxtrans's code and the
    libraries) and read back by a later process instead of tracing again; plain
    ``compute()`` where programs are not stored (or the result is not such a tree)."""
    directory = store_directory()
    if not directory:
        return compute()
    path = os.path.join(directory, _digest([code_digest(), *library_versions(), name, *key]))
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as file:
                return _shapes_from_json(json.load(file))
        except (OSError, ValueError, TypeError, KeyError):  # damaged: traced again
            pass
    result = compute()
    try:
        data = json.dumps(_shapes_to_json(result)).encode()
    except TypeError:  # not nested dicts of shapes: not kept
        return result
    with contextlib.suppress(OSError):  # a full or read-only cache: used, not kept
        _write_atomically(path, data)
    return result


def _shapes_to_json(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {str(k): _shapes_to_json(v) for k, v in tree.items()}
    if isinstance(tree, jax.ShapeDtypeStruct) and tree.sharding is None:
        return {"shape": list(tree.shape), "dtype": str(tree.dtype)}
    raise TypeError(f"not a shape: {type(tree).__name__}")


def _shapes_from_json(tree: dict) -> Any:
    if set(tree) == {"shape", "dtype"} and isinstance(tree["shape"], list):
        return jax.ShapeDtypeStruct(tuple(tree["shape"]), jnp.dtype(tree["dtype"]))
    return {k: _shapes_from_json(v) for k, v in tree.items()}


def _write_atomically(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".writing-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _named(call: Callable, name: str) -> Callable:
    """``call`` under the name of the function it runs: its compiled program is cached and
    logged as ``jit_<name>``, as the plain jitted function's is."""

    def run(*args, **kwargs):
        return call(*args, **kwargs)

    run.__name__ = run.__qualname__ = name
    return run


class StoredJit:
    """``jax.jit(fn, static_argnames=...)`` whose traced programs are stored (see the
    module's docstring).
    """

    def __init__(self, fn: Callable, static_argnames: Sequence[str]):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._static_argnames = tuple(static_argnames)
        self._jit = jax.jit(fn, static_argnames=self._static_argnames)
        # key -> the jitted call of its exported program (None: it cannot be stored).
        self._programs: dict[str, Callable | None] = {}
        # What a call's program_key hashes -> the key (_key).
        self._keys: dict[tuple, str] = {}

    def lower(self, *args, **kwargs):
        """The plain jitted function's ``lower``."""
        return self._jit.lower(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        directory = store_directory()
        if not directory:
            return self._jit(*args, **kwargs)
        static = {k: kwargs.pop(k) for k in self._static_argnames if k in kwargs}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        args, kwargs = jax.tree.map(_as_array, (args, kwargs))
        key = self._key(directory, static, args, kwargs)
        if key not in self._programs:
            path = os.path.join(directory, key)
            self._programs[key] = self._load(path, static, args, kwargs)
        program = self._programs[key]
        if program is None:
            return self._jit(*args, **kwargs, **static)
        return program(*args, **kwargs)

    def _key(self, directory: str, static: dict, args: tuple, kwargs: dict) -> str:
        """program_key of a call, remembered by what it hashes: hashing the code and the
        whole signature again at every call would cost a decoding batch a millisecond or
        two of Python, which on one core the decoding waits for."""
        leaves, tree = jax.tree.flatten((args, kwargs))
        signature = (
            directory,
            tuple(sorted(static.items())),
            tree,
            tuple((x.shape, x.dtype, getattr(x, "weak_type", None)) for x in leaves),
            jax.config.jax_enable_x64,
            jax.config.jax_default_matmul_precision,
        )
        if signature not in self._keys:
            self._keys[signature] = program_key(self.__qualname__, static, args, kwargs)
        return self._keys[signature]

    def _cache_size(self) -> int:
        """Programs compiled in this process, as ``jax.jit``'s ``_cache_size``."""
        stored = [p for p in self._programs.values() if p is not None]
        return self._jit._cache_size() + sum(p._cache_size() for p in stored)

    def _load(self, path: str, static: dict, args: tuple, kwargs: dict) -> Callable | None:
        """The stored program at ``path``, traced and stored first where there is none."""
        exported = None
        if os.path.exists(path):
            try:
                with open(path, "rb") as file:
                    exported = export.deserialize(bytearray(file.read()))
            except Exception:  # noqa: BLE001 - a damaged file is traced again
                exported = None
        if exported is None:
            try:
                exported = export.export(jax.jit(functools.partial(self._fn, **static)))(
                    *args, **kwargs
                )
            except Exception:  # noqa: BLE001 - a program jax cannot export: plain jit
                return None
            with contextlib.suppress(OSError):  # a full or read-only cache: used, not kept
                _write_atomically(path, exported.serialize())
        return jax.jit(_named(exported.call, exported.fun_name))
