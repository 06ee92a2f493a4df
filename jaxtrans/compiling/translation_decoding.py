"""A translation run's decoding compiled ahead of time for a slice that need not be there
(python -m jaxtrans.compile): the beam-search decoding program, the cached search
evaluate.py runs at the run's eval.batch_size, beam size and longest output, compiled for
one device. The run's task is made without data (its vocabulary's sizes:
jaxtrans.tasks.translation.vocabulary_sizes).

compile_beam_decoding    task, device -> (ProgramCost, what was compiled, in words)
"""

import jax
import jax.numpy as jnp

from jaxtrans.compiling.compiled_programs import ProgramCost, bytes_per_device, compile_or_cost
from jaxtrans.inference.decoding import beam_decode, greedy_decode
from jaxtrans.models.layer_stacks import unstack_layers
from jaxtrans.nn.attention_kernels import target_platform
from jaxtrans.tasks.translation.decoding_settings import decoding_settings


def compile_beam_decoding(task, device) -> tuple[ProgramCost, str]:
    """Compile the decoding of a batch of eval.batch_size sources of data.max_source_length
    tokens, to as many as the longest output evaluate.py allows (source + max_extra_length,
    within learned positions), with parameters in their stored dtype, on ``device``."""
    options = decoding_settings(task.run_config).options
    config = task.model_config
    rows, beam = options.batch_size, options.beam_size
    source_length = int(task.run_config.data.max_source_length)
    max_len = source_length + options.max_extra_length
    if (limit := config.position_encoding.max_length()) is not None:
        max_len = min(max_len, limit)
    placed = jax.sharding.SingleDeviceSharding(device)
    with target_platform(device.platform):
        params = jax.eval_shape(lambda: task.model.init(*_init_args(task))["params"])
        if config.scan_layers:  # decoded layer by layer (translate.py)
            params = jax.eval_shape(unstack_layers, params)
            config = config.replace(scan_layers=False)
        params = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=placed), params
        )
        source = jax.ShapeDtypeStruct((rows, source_length), jnp.int32, sharding=placed)
        lengths = jax.ShapeDtypeStruct((rows,), jnp.int32, sharding=placed)
        ids = dict(config=config, max_len=max_len)
        decode = greedy_decode if beam == 1 else beam_decode
        lowered = decode.lower(params, source, lengths, options.for_decoder(), **ids)
        inputs = bytes_per_device((params, source, lengths), placed)
        cost = compile_or_cost(lowered, inputs)
    search = "greedy search" if beam == 1 else f"beam {beam}"
    what = (
        f"{search}, {rows} sentences of up to {source_length} tokens, outputs up to "
        f"{max_len} tokens"
    )
    return cost, what


def _init_args(task) -> tuple:
    data = task.run_config.data
    return (
        jax.random.key(0),
        jnp.ones((1, int(data.max_source_length)), jnp.int32),
        jnp.ones((1, int(data.max_target_length)), jnp.int32),
    )
