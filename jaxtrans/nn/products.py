"""Matrix products of low-precision operands with float32 results, as each platform runs them.

``float32_product(a, b, dimension_numbers, dtype)`` is ``lax.dot_general`` of ``a`` and
``b`` cast to ``dtype`` (the compute dtype) with float32 results: on GPUs and TPUs the
matrix units multiply bfloat16 operands and accumulate in float32. XLA's CPU runtime has
no such product for bfloat16 ("Unsupported element type for DotThunk: BF16 x BF16 =
F32"); it multiplies bfloat16 by converting to float32 anyway, so there the operands are
cast to float32 first. A bfloat16 value is exact in float32, so the products are the same
numbers: only the platform's way of getting them differs.
"""

import jax
import jax.numpy as jnp

from jaxtrans.nn.kernel_placement import current_platform


def float32_product(a: jnp.ndarray, b: jnp.ndarray, dimension_numbers, dtype) -> jnp.ndarray:
    """``lax.dot_general(a, b, dimension_numbers)`` of operands in ``dtype``, float32 out."""
    dtype = jnp.dtype(dtype)
    if current_platform() == "cpu" and dtype.itemsize < 4:
        dtype = jnp.dtype(jnp.float32)  # the same values, in a product the CPU runtime has
    return jax.lax.dot_general(
        a.astype(dtype), b.astype(dtype), dimension_numbers, preferred_element_type=jnp.float32
    )
