"""A module fixture for test files that load tasks or train in-process: either may turn on the
persistent XLA compilation cache for the whole process, so the process's settings are put back
after the module. Use it with ``from compilation_cache_settings import
restore_compilation_cache_settings  # noqa: F401``."""

import jax
import pytest


@pytest.fixture(scope="module", autouse=True)
def restore_compilation_cache_settings():
    """The process's compilation cache settings as they were before the module."""
    from jax.experimental.compilation_cache import compilation_cache as cc

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    saved = {name: getattr(jax.config, name) for name in names}
    yield
    for name, value in saved.items():
        jax.config.update(name, value)
    cc.reset_cache()
