"""The generator of the dropout masks (train.dropout_rng_impl).

    threefry    JAX's default: counter-based, its key derivation and its bits the same on
                every platform, mesh and JAX version
    rbg         XLA's RngBitGenerator draws the bits (cheap on TPUs), threefry derives the
                keys (split, fold_in): the same masks again only on the same platform, mesh
                and JAX version
    unsafe_rbg  RngBitGenerator derives the keys too: fold_in XORs the key with bits of the
                folded-in number alone, a derivation nobody has tested, and JAX promises
                nothing across its versions

The key derivation of a step is a few scalar hashes (the step, then each dropout's name),
so unsafe_rbg saves nothing measurable over rbg; the masks are the work.

On a TPU, XLA's partitioner gives every chip the RngBitGenerator output of the whole
global batch and slices its own share out, unless libtpu is told to partition it
(``--xla_tpu_spmd_rng_bit_generator_unsafe``, which MaxText and axlearn set too): then
each chip draws its share only, and the masks depend on the mesh. The flag must be in
LIBTPU_INIT_ARGS before the TPU backend starts; ``partition_rng_on_tpu`` puts it there
for rbg runs. GPUs have no such flag: each GPU draws the whole batch's bits.
"""

import os
from collections.abc import MutableMapping

import jax
import jax.numpy as jnp

# train.dropout_rng_impl's names -> jax.random's.
DROPOUT_RNG_IMPLS = {"threefry": "threefry2x32", "rbg": "rbg", "unsafe_rbg": "unsafe_rbg"}

TPU_RBG_FLAG = "--xla_tpu_spmd_rng_bit_generator_unsafe=true"


def dropout_key_data(rng: jax.Array, rng_impl: str) -> jax.Array:
    """The base dropout key of generator ``rng_impl`` made from the threefry key ``rng``,
    as raw key data: ``rng``'s own [2] words for threefry, four random words from it for
    the others ([4], their key's shape)."""
    if DROPOUT_RNG_IMPLS[rng_impl] == "threefry2x32":
        return jax.random.key_data(rng)
    return jax.random.bits(rng, (4,), jnp.uint32)


def wrap_dropout_key(data: jax.Array, rng_impl: str) -> jax.Array:
    """The typed key of raw key data ``data`` of generator ``rng_impl``."""
    return jax.random.wrap_key_data(data, impl=DROPOUT_RNG_IMPLS[rng_impl])


def partition_rng_on_tpu(rng_impl: str, environ: MutableMapping[str, str] = os.environ) -> bool:
    """For rbg and unsafe_rbg, add TPU_RBG_FLAG to LIBTPU_INIT_ARGS unless that already
    says how to partition RngBitGenerator; True where it was added. Read by libtpu when the
    TPU backend starts (nothing reads it on other platforms); call before that."""
    if rng_impl == "threefry":
        return False
    args = environ.get("LIBTPU_INIT_ARGS", "")
    if "xla_tpu_spmd_rng_bit_generator_unsafe" in args:
        return False
    environ["LIBTPU_INIT_ARGS"] = f"{args} {TPU_RBG_FLAG}".strip()
    return True
