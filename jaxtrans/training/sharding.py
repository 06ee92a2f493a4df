"""The device mesh and the logical-axis rules that place parameters and batches on it.

Mesh axes: ``data`` (batch split, parameters replicated), ``fsdp`` (batch split and
parameters sharded along ``embed``), ``tensor`` (heads and feed-forward width split).
The rules are ``LOGICAL_RULES`` with the changes of ``config.mesh.rules``
(``logical_rules``), e.g. ``--config.mesh.rules=embed=none,mlp=fsdp+tensor``.
"""

import contextlib
import math
from collections.abc import Callable

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtrans.errors import UserError

MESH_AXES = ("data", "fsdp", "tensor")

# Logical axis name -> mesh axes. Parameters carry these names (jaxtrans.nn.layers).
LOGICAL_RULES = (
    ("batch", ("data", "fsdp")),
    ("embed", "fsdp"),
    ("vocab", "tensor"),
    ("heads", "tensor"),
    ("mlp", "tensor"),
    ("kv", None),
    ("length", None),
    # The stacked axis of scanned layer stacks (config.scan_layers): never split.
    ("layers", None),
)


def rules_text(rules) -> str:
    """``name=axis+axis,...`` of a rule table; ``none``: not split."""

    def axes(target) -> str:
        if target is None:
            return "none"
        return target if isinstance(target, str) else "+".join(target)

    return ",".join(f"{name}={axes(target)}" for name, target in rules)


def logical_rules(text: str) -> tuple:
    """``LOGICAL_RULES`` with the rules named in ``text`` replaced.

    ``text``: comma-separated ``logical=mesh axes`` (``config.mesh.rules``), the mesh axes
    joined by ``+`` (``batch=data+fsdp``), ``none`` (or nothing) for a dimension that is not
    split; names not given keep their rule. A name that is no logical axis, an axis not of
    the mesh or an axis used twice is a UserError.
    """
    where = f"--config.mesh.rules={text!r}"
    if not isinstance(text, str):
        raise UserError(f"{where}: use a string of logical=mesh_axes, e.g. embed=fsdp,mlp=tensor")
    changes = {}
    names = [name for name, _ in LOGICAL_RULES]
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, equals, value = (part.strip() for part in entry.partition("="))
        if not equals:
            raise UserError(f"{where}: {entry!r} is not logical=mesh_axes (e.g. embed=fsdp)")
        if name not in names:
            raise UserError(f"{where}: {name!r} is no logical axis; use one of {', '.join(names)}")
        if name in changes:
            raise UserError(f"{where}: {name!r} is given twice; give each logical axis once")
        axes = [a.strip() for a in value.split("+")] if value not in ("", "none") else []
        for axis in axes:
            if axis not in MESH_AXES:
                raise UserError(
                    f"{where}: {axis!r} ({name}) is no mesh axis; use {', '.join(MESH_AXES)} "
                    "(several joined by +) or none"
                )
        if len(set(axes)) < len(axes):
            raise UserError(f"{where}: {name} uses a mesh axis twice; name each axis once")
        changes[name] = None if not axes else axes[0] if len(axes) == 1 else tuple(axes)
    return tuple((name, changes.get(name, target)) for name, target in LOGICAL_RULES)


@contextlib.contextmanager
def axis_rules(mesh: Mesh, rules=LOGICAL_RULES):
    """Trace under ``mesh`` and ``rules``: activations constrained by logical names
    (``nn.with_logical_constraint``, jaxtrans.nn.blocks) follow the same table."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        yield


def rows_axis_rules(rows: NamedSharding | None, rules_text: str = ""):
    """axis_rules of the mesh that ``rows`` (a batch's rows sharding) splits over, with
    the rules of config.mesh.rules ``rules_text``: where a program that takes such batches
    is traced (e.g. the dev decoding), so that an attention kernel that runs per device
    (splash, in a shard_map) finds the mesh. Nothing for ``rows`` None (one device)."""
    if rows is None:
        return contextlib.nullcontext()
    return axis_rules(rows.mesh, logical_rules(rules_text))


def with_axis_rules(function: Callable, mesh: Mesh, rules=LOGICAL_RULES) -> Callable:
    """``function`` (a jitted one) called under ``axis_rules``, so that it is traced there
    (entering them costs microseconds)."""

    def call(*args, **kwargs):
        with axis_rules(mesh, rules):
            return function(*args, **kwargs)

    return call


def make_mesh(config: ml_collections.ConfigDict, devices=None) -> Mesh:
    """Mesh of shape (data, fsdp, tensor) from ``config.mesh``; -1 takes the remaining devices."""
    devices = list(devices if devices is not None else jax.devices())
    sizes = [int(config.data), int(config.fsdp), int(config.tensor)]
    if sizes.count(-1) > 1:
        raise UserError("config.mesh: at most one of data/fsdp/tensor may be -1")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if len(devices) % known:
            raise UserError(
                f"config.mesh: {len(devices)} devices cannot be split by {known}; "
                "choose mesh sizes whose product divides the device count"
            )
        sizes[sizes.index(-1)] = len(devices) // known
    if math.prod(sizes) != len(devices):
        raise UserError(
            f"config.mesh: data*fsdp*tensor = {math.prod(sizes)} but there are "
            f"{len(devices)} devices; make the product equal the device count (or use -1)"
        )
    grid = np.asarray(devices).reshape(sizes)
    return Mesh(grid, MESH_AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Batch arrays of any rank ([batch], [batch, length], ...): rows split over data and
    fsdp, the other dimensions whole."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp")))


def batch_shards(mesh: Mesh) -> int:
    """The parts batch_sharding splits rows into: data x fsdp."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def logical_shardings(boxed_tree, mesh: Mesh, rules=LOGICAL_RULES):
    """NamedShardings for a tree whose leaves are nn.LogicallyPartitioned (or plain)."""
    specs = nn.get_partition_spec(boxed_tree)
    return nn.logical_to_mesh_sharding(specs, mesh, rules)


def check_divisible(abstract_tree, shardings) -> None:
    """Every sharded dimension must split evenly over its mesh axes."""
    leaves = jax.tree_util.tree_leaves_with_path(abstract_tree)
    for (path, leaf), sharding in zip(leaves, jax.tree.leaves(shardings), strict=True):
        mesh = sharding.mesh
        for dim, axes in zip(leaf.shape, sharding.spec, strict=False):
            if axes is None:
                continue
            axes = (axes,) if isinstance(axes, str) else axes
            parts = math.prod(mesh.shape[a] for a in axes)
            if dim % parts:
                name = jax.tree_util.keystr(path)
                raise UserError(
                    f"parameter {name} of shape {leaf.shape} cannot be split {parts} ways "
                    f"over mesh axes {axes}; change config.mesh or the model shape"
                )
