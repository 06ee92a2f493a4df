"""Multi-host start-up.

Each host runs the same ``train.py`` command. On Cloud TPU pods and SLURM clusters
``jax.distributed.initialize()`` finds its peers by itself; set ``JAXTRANS_DISTRIBUTED=auto``
for that. Elsewhere give the coordinator explicitly, on every host:

    JAX_COORDINATOR_ADDRESS=10.0.0.1:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 python train.py ...
    JAX_COORDINATOR_ADDRESS=10.0.0.1:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=1 python train.py ...

Every process then reads only its own shard of the training data and feeds its part of
the global batch; only process 0 writes logs, and all processes write their shards of
each checkpoint.
"""

import os

import jax

from jaxtrans.errors import UserError


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
