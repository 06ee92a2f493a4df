"""The train step of a run compiled for devices that need not be there (the compile-only
devices of a TPU slice, jaxtrans.compiling.tpu_topologies), with nothing allocated: the same
mesh, rules, batch rows, optimizer, guard and jit (step_layout.py) as train.py's run, over
abstract inputs. The compiler then says what one device holds and how long it expects
the step to take.

CompiledTrainStep   the resolved config, the task, the mesh, bytes per device, the cost
compile_train_step  config, task factory, devices -> CompiledTrainStep
"""

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import Mesh

from jaxtrans.compiling.compiled_programs import ProgramCost, bytes_per_device, compile_or_cost
from jaxtrans.nn.attention_kernels import target_platform
from jaxtrans.training import sharding
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.run_sections import RunSections
from jaxtrans.training.run_settings import batch_rows, check_run_settings
from jaxtrans.training.state import abstract_train_state, train_state_init
from jaxtrans.training.step_layout import StepLayout, jit_train_step
from jaxtrans.training.task import TrainingTask

# A schedule length for runs whose length is not a step count (epochs, a time budget):
# the compiled program is the same for every length.
_ANY_LENGTH = 2**31 - 1


@dataclass(frozen=True)
class CompiledTrainStep:
    """A run's train step, compiled."""

    config: ml_collections.ConfigDict  # as the run resolves it (data.batch_size)
    task: TrainingTask
    mesh: Mesh
    # Per device: parameters, optimizer state and batch (their shards), the rest of the
    # compiler's peak (activations, gradients, temporaries) and the peak itself.
    bytes: dict[str, int]
    cost: ProgramCost
    parameters: int  # the model's parameter count


def with_shardings(tree, shardings):
    """ShapeDtypeStructs of ``tree``'s leaves that carry their shardings (one for all, or
    a tree of them), the arguments a jitted function lowers with."""
    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=shardings), tree
        )
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
    )


def compile_train_step(
    config: ml_collections.ConfigDict,
    make_task: Callable[[ml_collections.ConfigDict], TrainingTask],
    devices: list,
    process_count: int,
) -> CompiledTrainStep:
    """Compile the step ``config`` trains with over ``devices`` (``process_count`` hosts):
    ``make_task`` builds its task from the resolved config without data (the task's
    ``batch_shapes`` stand for the batches)."""
    sections = RunSections.of(config)
    mesh = sharding.make_mesh(sections.mesh, devices)
    rules = sharding.logical_rules(sections.mesh.rules)
    config = batch_rows(config, mesh, is_main=False, process_count=process_count)
    check_run_settings(config, mesh, process_count)
    train = sections.train
    task = make_task(config)
    optimizer, schedule = make_optimizer(
        sections.optimizer, task.model_config.d_model, train.num_steps or _ANY_LENGTH
    )
    init = train_state_init(task.init_params, optimizer, train.dropout_rng_impl)
    state_shardings, abstract = abstract_train_state(
        init, mesh, jax.random.key(sections.seed), rules
    )
    layout = StepLayout.of(mesh, rules, state_shardings)
    step = jit_train_step(
        task, optimizer, schedule, train.grad_accum_steps, train.on_nonfinite, layout
    )
    batch = task.batch_shapes(int(config.data.batch_size))
    arguments = (
        with_shardings(abstract, state_shardings),
        with_shardings(batch, layout.batch),
        jax.ShapeDtypeStruct((), jnp.bool_, sharding=layout.replicated),
    )
    held = {
        "params": bytes_per_device(abstract.params, state_shardings.params),
        "optimizer": bytes_per_device(abstract.opt_state, state_shardings.opt_state),
        "batch": bytes_per_device(batch, layout.batch),
    }
    inputs = bytes_per_device(arguments, jax.tree.map(lambda x: x.sharding, arguments))
    # Attention picks its kernel for the devices' platform (splash on a TPU), not this host's.
    with sharding.axis_rules(mesh, rules), target_platform(devices[0].platform):
        cost = compile_or_cost(step.lower(*arguments), inputs)
    held["temp"] = max(cost.peak_bytes - cost.argument_bytes, 0)
    held["total"] = cost.peak_bytes
    parameters = sum(x.size for x in jax.tree.leaves(abstract.params))
    return CompiledTrainStep(config, task, mesh, held, cost, parameters)
