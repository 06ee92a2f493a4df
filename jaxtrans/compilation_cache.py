"""The persistent XLA compilation cache: a program compiled once is read from disk by every
later process (a resumed run, a fresh evaluate.py, a new Translator).

    use_compilation_cache("~/.cache/jaxtrans/xla")   # before (or after) the first compile
    use_compilation_cache("")                        # off: the process's settings stay

The run config's ``train.compilation_cache_dir`` names the directory (default
``DEFAULT_DIR``), read by training, by evaluate.py (``--compilation_cache_dir``) and by
``Translator.load``. Where the environment sets ``JAXTRANS_COMPILATION_CACHE_DIR``, that
directory replaces the default one (the test suite points it at a temporary directory, so
that no test writes into the home directory); a directory given explicitly is kept.
"""

import os

import jax
from jax.experimental.compilation_cache import compilation_cache

from jaxtrans.errors import UserError

# train.compilation_cache_dir's default.
DEFAULT_DIR = "~/.cache/jaxtrans/xla"
# The environment variable that replaces DEFAULT_DIR.
DIR_VARIABLE = "JAXTRANS_COMPILATION_CACHE_DIR"
# Every program is written, however fast it compiled: a decoding program of a small model
# compiles in well under jax's default second, and reading it back is faster still.
MIN_COMPILE_SECONDS = 0.0


def cache_directory(cache_dir: str) -> str:
    """The directory ``cache_dir`` stands for: ``~`` expanded, DEFAULT_DIR replaced by
    $JAXTRANS_COMPILATION_CACHE_DIR where set; "" (no cache) stays ""."""
    if cache_dir == DEFAULT_DIR and os.environ.get(DIR_VARIABLE):
        cache_dir = os.environ[DIR_VARIABLE]
    return os.path.expanduser(cache_dir) if cache_dir else ""


def use_compilation_cache(cache_dir: str, flag: str = "train.compilation_cache_dir") -> str:
    """Turn on jax's persistent compilation cache in ``cache_dir`` (created if need be) for
    this process and return the directory; "" leaves the process's settings as they are.

    jax decides once per process whether it uses a cache, at its first compilation; a
    directory that changes after that takes effect through ``reset_cache``. ``flag``
    names the setting in the one-line error of a directory that cannot be made."""
    directory = cache_directory(cache_dir)
    if not directory:
        return ""
    try:
        os.makedirs(directory, exist_ok=True)
        if not os.access(directory, os.W_OK):
            raise PermissionError(13, "not writable")
    except OSError as error:
        raise UserError(
            f"{flag}={cache_dir}: cannot write to {directory} ({error.strerror}); give a "
            'writable directory, or "" for no compilation cache'
        ) from error
    if jax.config.jax_compilation_cache_dir != directory:
        jax.config.update("jax_compilation_cache_dir", directory)
        compilation_cache.reset_cache()
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return directory


def use_run_compilation_cache(
    run_config, given: str | None = None, flag: str = "compilation_cache_dir"
) -> str:
    """use_compilation_cache of ``given``, else of the run config's
    train.compilation_cache_dir (DEFAULT_DIR where it has none): evaluate.py's
    --compilation_cache_dir and Translator.load's keyword. ``flag`` names ``given``."""
    if given is not None:
        return use_compilation_cache(given, flag)
    train = run_config.get("train") or {}
    return use_compilation_cache(train.get("compilation_cache_dir", DEFAULT_DIR))
