"""Multi-host start-up.

Each host runs the same ``train.py`` command. On Cloud TPU pods and SLURM clusters
``jax.distributed.initialize()`` finds its peers by itself; set ``JAXTRANS_DISTRIBUTED=auto``
for that. Elsewhere give the coordinator explicitly, on every host:

    JAX_COORDINATOR_ADDRESS=10.0.0.1:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 python train.py ...
    JAX_COORDINATOR_ADDRESS=10.0.0.1:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=1 python train.py ...

Every process then runs its data shards and feeds its part of the global batch
(jaxtrans.data.data_shards); only process 0 trains the tokenizer and writes logs; all
processes write their shards of each checkpoint and their own data-pipeline position.
"""

import os
from collections.abc import Callable
from typing import TypeVar

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxtrans.errors import UserError

T = TypeVar("T")


def initialize_from_env() -> None:
    """Join a multi-process run if the environment asks for one; no-op otherwise."""
    if jax.distributed.is_initialized():
        return
    address = os.environ.get("JAX_COORDINATOR_ADDRESS")
    if address:
        try:
            num_processes = int(os.environ["JAX_NUM_PROCESSES"])
            process_id = int(os.environ["JAX_PROCESS_ID"])
        except (KeyError, ValueError) as error:
            raise UserError(
                "JAX_COORDINATOR_ADDRESS is set, so JAX_NUM_PROCESSES and JAX_PROCESS_ID "
                "must be set to integers too"
            ) from error
        if os.environ.get("JAX_PLATFORMS", "") == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(address, num_processes, process_id)
    elif os.environ.get("JAXTRANS_DISTRIBUTED") == "auto":
        jax.distributed.initialize()


def main_process_first(make: Callable[[], T]) -> T:
    """``make()`` on process 0, then on the others (which wait for it): for work that
    writes shared files the first time, e.g. training the workdir's tokenizer, which the
    other processes then load. If process 0 fails, the others stop with one line instead of
    waiting for it forever (process 0 shows the error)."""
    if jax.process_count() == 1:
        return make()
    made, ok = None, False
    if jax.process_index() == 0:
        try:
            made, ok = make(), True
        finally:
            # Tell the others whether to go on; they wait here until process 0 is done.
            multihost_utils.broadcast_one_to_all(np.int32(ok))
        return made
    if not multihost_utils.broadcast_one_to_all(np.int32(0)):
        raise UserError("process 0 could not set up the run (see its error); fix that, then rerun")
    return make()
