"""Where the attention kernels run: the platform attention is traced for, and a Pallas
kernel run on each device's shard under the mesh being traced for.

target_platform   trace attention for another platform than the default backend's
current_platform  "cpu", "gpu" (CUDA), "rocm" or "tpu": the platform traced for
interpreted       whether a Pallas kernel for ``platform`` must run in the interpreter
over_mesh         a kernel on each device's rows and heads (a shard_map), or whole
"""

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator

import flax.linen as nn
import jax
from jax.sharding import PartitionSpec as P

# The platform attention is traced for while a program is compiled ahead of time for
# devices that are not the default backend's (target_platform); None: the default's.
_TARGET_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "attention_target_platform", default=None
)


@contextlib.contextmanager
def target_platform(platform: str) -> Iterator[None]:
    """Trace attention for ``platform`` ("tpu", "gpu", ...) inside the block: the kernel
    choice and the Pallas kernels' interpret mode follow it, not the default backend (a
    program compiled on a machine without the chips, python -m jaxtrans.compile)."""
    token = _TARGET_PLATFORM.set(platform)
    try:
        yield
    finally:
        _TARGET_PLATFORM.reset(token)


def current_platform() -> str:
    """ "cpu", "gpu" (CUDA), "rocm" or "tpu": the platform attention is traced for, the
    default backend's unless target_platform says otherwise."""
    target = _TARGET_PLATFORM.get()
    if target is not None:
        return target
    platform = jax.default_backend()
    if platform == "gpu":
        try:
            version = jax.devices()[0].client.platform_version.lower()
        except Exception:  # noqa: BLE001 - a client without a version string: assume CUDA
            version = ""
        return "rocm" if "rocm" in version else "gpu"
    return platform


def interpreted(platform: str) -> bool:
    """Whether a Pallas kernel written for ``platform`` ("tpu", "gpu") runs in the Pallas
    interpreter: where the program is compiled for another backend (CPU tests)."""
    return (_TARGET_PLATFORM.get() or jax.default_backend()) != platform


def over_mesh(attend: Callable, q, k, v, q_ids, kv_ids):
    """``attend(q, k, v, q_ids, kv_ids)`` on each device's shard under the mesh being
    traced for (the compiler cannot split a Pallas kernel itself): rows split as the
    logical axis ``batch`` and heads as ``heads`` are (jaxtrans.training.sharding), where
    they divide evenly. q, k, v [batch, heads, len, head_dim]; ids [batch, len]."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return attend(q, k, v, q_ids, kv_ids)
    rows, heads = _mesh_axes("batch", q.shape[0], mesh), _mesh_axes("heads", q.shape[1], mesh)
    blocks, ids = P(rows, heads, None, None), P(rows, None)
    return jax.shard_map(
        attend, in_specs=(blocks, blocks, blocks, ids, ids), out_specs=blocks, check_vma=False
    )(q, k, v, q_ids, kv_ids)


def _mesh_axes(name: str, size: int, mesh):
    """The mesh axes the logical axis ``name`` maps to under the current rules, or None
    (not split) where there are none or they do not divide ``size``."""
    axes = nn.logical_to_mesh_axes((name,))[0]
    if axes is None:
        return None
    named = (axes,) if isinstance(axes, str) else tuple(axes)
    named = tuple(a for a in named if a in mesh.shape)
    if not named or size % math.prod(mesh.shape[a] for a in named):
        return None
    return named
