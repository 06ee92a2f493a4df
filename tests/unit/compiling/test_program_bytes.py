# ruff: noqa: E501 - HLO lines as the compiler prints them
"""The bytes a compiled program moves, counted from its HLO text (jaxtrans.compiling.program_bytes):
by hand on a small module with a loop, an asynchronous prefetch into on-chip memory and a
fusion that reads it, and on a program jax compiles here."""

import jax
import jax.numpy as jnp
import pytest

from jaxtrans.compiling.program_bytes import hbm_bytes, operations, shape_bytes

# f32[256,128] is 131072 bytes; bf16[256,128] 65536; s32[] 4.
MODULE = """HloModule m, entry_computation_layout={(f32[256,128]{1,0})->f32[256,128]{1,0}}

%fused_add (p0: f32[256,128], p1: f32[256,128]) -> f32[256,128] {
  %p0 = f32[256,128]{1,0} parameter(0)
  %p1 = f32[256,128]{1,0} parameter(1)
  ROOT %add = f32[256,128]{1,0} add(%p0, %p1)
}

%body (state: (s32[], f32[256,128])) -> (s32[], f32[256,128]) {
  %state = (s32[], f32[256,128]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %x = f32[256,128]{1,0} get-tuple-element(%state), index=1
  %y = f32[256,128]{1,0} fusion(%x, %x), kind=kLoop, calls=%fused_add, metadata={op_name="jit(f)/add"}
  ROOT %out = (s32[], f32[256,128]{1,0}) tuple(%i, %y)
}

%cond (state: (s32[], f32[256,128])) -> pred[] {
  %state = (s32[], f32[256,128]{1,0}) parameter(0)
  ROOT %t = pred[] constant(true)
}

ENTRY %main (a: f32[256,128]) -> f32[256,128] {
  %a = f32[256,128]{1,0} parameter(0)
  %cs = (f32[256,128]{1,0}, f32[256,128]{1,0:S(1)}, u32[]) copy-start(%a)
  %cd = f32[256,128]{1,0:S(1)} copy-done(%cs)
  %onchip = f32[256,128]{1,0:S(1)} fusion(%cd, %cd), kind=kLoop, calls=%fused_add
  %kernel = f32[256,128]{1,0:S(1)} custom-call(%onchip), custom_call_target="tpu_custom_call", backend_config={"custom_call_config": {"body": "a kernel's text",
"xprof_metadata":"{\\"block_q\\": 128
}}, metadata={op_name="jit(f)/splash"}
  %back = f32[256,128]{1,0} copy(%kernel)
  %zero = s32[] constant(0)
  %init = (s32[], f32[256,128]{1,0}) tuple(%zero, %back)
  %loop = (s32[], f32[256,128]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %r = f32[256,128]{1,0} get-tuple-element(%loop), index=1
}
"""
ARRAY = 256 * 128 * 4


def test_shape_bytes_reads_every_array_of_a_tuple_and_tells_on_chip_ones_apart():
    shape = "(f32[256,128]{1,0}, bf16[256,128]{1,0:S(1)}, s32[])"
    assert shape_bytes(shape) == ARRAY + ARRAY // 2 + 4
    assert shape_bytes(shape, hbm_only=True) == ARRAY + 4


def test_each_operation_counts_its_operands_and_result_where_they_live():
    ops = {op.name: op for op in operations(MODULE)}
    # Containers, views and parameters move nothing of their own; the -start is counted
    # at its -done.
    assert set(ops) == {"cd", "onchip", "kernel", "back", "y"}
    # The prefetch: one read of HBM, one write of on-chip memory.
    assert (ops["cd"].bytes, ops["cd"].hbm) == (2 * ARRAY, ARRAY)
    # A fusion over on-chip operands into on-chip memory touches no HBM.
    assert (ops["onchip"].bytes, ops["onchip"].hbm) == (3 * ARRAY, 0)
    # A kernel whose text spans lines (a Pallas kernel's backend config) is one operation,
    # and the computation goes on after it.
    assert (ops["kernel"].bytes, ops["kernel"].hbm, ops["kernel"].source) == (
        2 * ARRAY,
        0,
        "splash",
    )
    # The copy back: reads on-chip memory, writes HBM.
    assert (ops["back"].bytes, ops["back"].hbm) == (2 * ARRAY, ARRAY)
    # The loop body runs three times (its known trip count); the operand read twice.
    assert (ops["y"].bytes, ops["y"].hbm) == (3 * 3 * ARRAY, 3 * 3 * ARRAY)
    assert ops["y"].source == "add"
    assert hbm_bytes(MODULE) == ARRAY + ARRAY + 9 * ARRAY


@pytest.mark.parametrize("rows", [64, 256])
def test_a_compiled_program_moves_at_least_its_inputs_and_outputs(rows):
    """On this host's compiler: a matmul reads both operands and writes its result at
    least once; the count grows with them."""

    def f(x, w):
        return jnp.tanh(x @ w)

    x = jax.ShapeDtypeStruct((rows, 512), jnp.float32)
    w = jax.ShapeDtypeStruct((512, 256), jnp.float32)
    text = jax.jit(f).lower(x, w).compile().as_text()
    least = 4 * (rows * 512 + 512 * 256 + rows * 256)
    assert least <= hbm_bytes(text) <= 3 * least
