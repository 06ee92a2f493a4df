"""Per-layer <-> stacked parameters of the layer stacks (``config.scan_layers``).

A stack that loops keeps one subtree per layer; a scanned stack keeps one subtree whose
leaves carry a leading ``[num_layers]`` axis (jaxtrans.nn.blocks):

    per-layer  {"layer_0": {"feed_forward": {"wi": {"kernel": [d, f]}}}, "layer_1": ...,
                "final_norm": ...}
    stacked    {"layers": {"feed_forward": {"wi": {"kernel": [num_layers, d, f]}}},
                "final_norm": ...}

The functions walk any nested mapping (all the parameters of a Transformer, a BERT
model with its heads, an encoder alone, or other collections such as sown
intermediates) and convert every stack they meet, so they need no model config. Leaves
may be numpy arrays (kept numpy), jax arrays, or ``nn.Partitioned`` boxes (the logical
axis "layers" is added or removed in front of their names).
"""

import re
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxtrans.errors import UserError

# The name of a scanned stack's subtree; per-layer subtrees are f"layer_{i}".
STACKED = "layers"
_PER_LAYER = re.compile(r"layer_(\d+)")


def _layer_index(key: Any) -> int | None:
    match = _PER_LAYER.fullmatch(key) if isinstance(key, str) else None
    return int(match.group(1)) if match else None


def _is_box(x: Any) -> bool:
    return isinstance(x, nn.Partitioned)


def _stack_leaves(*leaves):
    if _is_box(leaves[0]):
        value = _stack_leaves(*(leaf.value for leaf in leaves))
        names = (STACKED, *(leaves[0].names or (None,) * leaves[0].value.ndim))
        return leaves[0].replace(value=value, names=names)
    if all(isinstance(leaf, np.ndarray) for leaf in leaves):
        return np.stack(leaves)
    return jnp.stack(leaves)


def _layer_of(tree: Any, i: int) -> Any:
    def take(leaf):
        if _is_box(leaf):
            names = leaf.names[1:] if leaf.names else None
            return leaf.replace(value=leaf.value[i], names=names)
        return leaf[i]

    return jax.tree.map(take, tree, is_leaf=_is_box)


def _num_layers(stacked: Any) -> int:
    leaves = jax.tree.leaves(stacked, is_leaf=_is_box)
    sizes = {(leaf.value if _is_box(leaf) else leaf).shape[0] for leaf in leaves}
    if len(sizes) != 1:
        raise ValueError(f"stacked layers disagree on the number of layers: {sorted(sizes)}")
    return sizes.pop()


def stack_layers(tree: Any) -> Any:
    """Every mapping holding ``layer_0 .. layer_{n-1}`` -> ``layers`` with leaves [n, ...].

    Keys other than the layers (``final_norm``, embeddings, heads) stay as they are;
    stacks already stacked are unchanged, so the function is idempotent. Raises
    ValueError if the layer numbers have gaps, the layers differ in structure or shape,
    or one mapping holds both layouts.
    """
    if not isinstance(tree, Mapping):
        return tree
    out = {key: stack_layers(value) for key, value in tree.items()}
    indices = sorted(i for i in map(_layer_index, out) if i is not None)
    if not indices:
        return out
    if STACKED in out:
        raise ValueError(f"a mapping holds both per-layer and {STACKED!r} subtrees")
    if indices != list(range(len(indices))):
        raise ValueError(f"layers {indices} are not numbered 0 .. n-1")
    layers = [out.pop(f"layer_{i}") for i in indices]
    structure = jax.tree.structure(layers[0], is_leaf=_is_box)
    for i, layer in enumerate(layers):
        if jax.tree.structure(layer, is_leaf=_is_box) != structure:
            raise ValueError(f"layer_{i} has other parameters than layer_0")
    try:
        out[STACKED] = jax.tree.map(_stack_leaves, *layers, is_leaf=_is_box)
    except ValueError as error:
        raise ValueError(f"the layers' parameters differ in shape ({error})") from None
    return out


def unstack_layers(tree: Any) -> Any:
    """The inverse: every ``layers`` subtree [n, ...] -> ``layer_0 .. layer_{n-1}``.

    Per-layer stacks are unchanged (idempotent).
    """
    if not isinstance(tree, Mapping):
        return tree
    out = {key: unstack_layers(value) for key, value in tree.items()}
    if STACKED not in out or not isinstance(out[STACKED], Mapping):
        return out
    stacked = out.pop(STACKED)
    for i in range(_num_layers(stacked)):
        out[f"layer_{i}"] = _layer_of(stacked, i)
    return out


def arrange_layers(tree: Any, scan_layers: bool) -> Any:
    """``tree`` in the layout a model with ``config.scan_layers = scan_layers`` uses."""
    return stack_layers(tree) if scan_layers else unstack_layers(tree)


def layout_like(tree: Any, reference: Any) -> Any:
    """``tree`` with each stack in the layout of the same stack in ``reference`` (e.g.
    checkpoint parameters arranged as a freshly initialised model's); stacks that
    ``reference`` lacks stay as they are."""
    if not isinstance(tree, Mapping) or not isinstance(reference, Mapping):
        return tree
    if STACKED in reference and any(_layer_index(k) is not None for k in tree):
        tree = stack_layers(tree)
    elif STACKED in tree and any(_layer_index(k) is not None for k in reference):
        tree = unstack_layers(tree)
    return {
        key: layout_like(value, reference[key]) if key in reference else value
        for key, value in tree.items()
    }


def graft_params(target: Any, source: dict[str, Any], path: str = "") -> Any:
    """Replace the leaves of ``target`` (e.g. freshly initialised params) found in ``source``.

    Subtrees missing from ``source`` (a new classifier head) keep their values. Boxed
    leaves (``nn.Partitioned`` logical-axis metadata) stay boxed. Shapes must agree.
    Layer stacks of ``source`` are first arranged as ``target``'s: per layer or stacked
    (``scan_layers``), whichever way the checkpoint was saved.
    """
    if not path:
        source = layout_like(source, target)
    if isinstance(source, dict):
        if not isinstance(target, dict):
            raise UserError(f"checkpoint parameter {path!r} has no counterpart in the model")
        unknown = set(source) - set(target)
        if unknown:
            raise UserError(f"checkpoint parameters {sorted(unknown)} under {path!r} are unknown")
        out = dict(target)
        for key, value in source.items():
            out[key] = graft_params(target[key], value, f"{path}/{key}")
        return out
    boxed = isinstance(target, nn.meta.AxisMetadata)
    current = target.unbox() if boxed else target
    if tuple(current.shape) != tuple(source.shape):
        raise UserError(
            f"parameter {path!r} has shape {tuple(source.shape)} in the checkpoint but "
            f"{tuple(current.shape)} in the model; make the model config match the checkpoint"
        )
    value = jax.numpy.asarray(source, dtype=current.dtype)
    return target.replace_boxed(value) if boxed else value
