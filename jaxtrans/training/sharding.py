"""The device mesh and the logical-axis rules that place parameters and batches on it.

Mesh axes: ``data`` (batch split, parameters replicated), ``fsdp`` (batch split and
parameters sharded along ``embed``), ``tensor`` (heads and feed-forward width split).
"""

import math

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


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def logical_shardings(boxed_tree, mesh: Mesh):
    """NamedShardings for a tree whose leaves are nn.LogicallyPartitioned (or plain)."""
    specs = nn.get_partition_spec(boxed_tree)
    return nn.logical_to_mesh_sharding(specs, mesh, LOGICAL_RULES)


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
