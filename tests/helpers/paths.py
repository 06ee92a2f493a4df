"""Where the tests find the repository, their fixtures and their helper scripts, wherever
in tests/ a test file sits."""

import os

HELPERS = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HELPERS)
REPO = os.path.dirname(TESTS)
FIXTURES = os.path.join(TESTS, "fixtures")

# XLA:CPU's backend optimisation and LLVM's expensive passes off: see tests/conftest.py.
FAST_COMPILE = (
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_cpu_use_fusion_emitters=false",
)


def xla_flags(devices: int | None = None) -> str:
    """XLA_FLAGS for the suite and the programs it starts: the caller's own flags, with
    ``devices`` forced host devices if given, and FAST_COMPILE unless
    JAXTRANS_TEST_XLA_OPTIMIZE=1 (set it to run with XLA's default optimisation)."""
    flags = [
        flag
        for flag in os.environ.get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count")
    ]
    if devices is not None:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    if os.environ.get("JAXTRANS_TEST_XLA_OPTIMIZE") != "1":
        flags += [flag for flag in FAST_COMPILE if flag not in flags]
    return " ".join(flags)
