"""How a process joins a multi-host run (training/distributed.py), with a fake
jax.distributed.initialize: the arguments it is given, or the error instead."""

import jax
import pytest

from jaxtrans.errors import UserError
from jaxtrans.training import distributed

ENVIRONMENT = (
    "JAX_COORDINATOR_ADDRESS",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
    "JAXTRANS_DISTRIBUTED",
    "JAX_PLATFORMS",
)


@pytest.fixture
def joined(monkeypatch):
    """The calls of jax.distributed.initialize, as (args, kwargs); none made for real."""
    calls = []
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: calls.append((a, k)))
    monkeypatch.setattr(jax.config, "update", lambda *a: calls.append(("config", a)))
    return calls


def test_without_a_coordinator_or_auto_a_process_runs_alone(joined):
    distributed.initialize_from_env()
    assert joined == []


def test_distributed_auto_lets_jax_find_its_peers(joined, monkeypatch):
    monkeypatch.setenv("JAXTRANS_DISTRIBUTED", "auto")
    distributed.initialize_from_env()
    assert joined == [((), {})]  # Cloud TPU and SLURM: no arguments


def test_another_value_of_distributed_is_not_auto(joined, monkeypatch):
    monkeypatch.setenv("JAXTRANS_DISTRIBUTED", "yes")
    distributed.initialize_from_env()
    assert joined == []


def test_a_coordinator_with_process_count_and_index_is_joined(joined, monkeypatch):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "4")
    monkeypatch.setenv("JAX_PROCESS_ID", "3")
    monkeypatch.setenv("JAXTRANS_DISTRIBUTED", "auto")  # the explicit coordinator wins
    distributed.initialize_from_env()
    assert joined == [(("10.0.0.1:1234", 4, 3), {})]


def test_cpu_processes_exchange_collectives_over_gloo(joined, monkeypatch):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1234")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "0")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    distributed.initialize_from_env()
    assert joined == [
        ("config", ("jax_cpu_collectives_implementation", "gloo")),
        (("127.0.0.1:1234", 2, 0), {}),
    ]


@pytest.mark.parametrize(
    "count, index",
    [(None, None), ("2", None), (None, "0"), ("two", "0"), ("2", "")],
    ids=["neither", "no-index", "no-count", "count-not-a-number", "empty-index"],
)
def test_a_coordinator_without_process_count_and_index_is_a_user_error(
    joined, monkeypatch, count, index
):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    monkeypatch.setenv("JAXTRANS_DISTRIBUTED", "auto")  # no fallback to auto either
    for name, value in (("JAX_NUM_PROCESSES", count), ("JAX_PROCESS_ID", index)):
        if value is not None:
            monkeypatch.setenv(name, value)
    with pytest.raises(
        UserError, match="JAX_NUM_PROCESSES and JAX_PROCESS_ID must be set to integers"
    ):
        distributed.initialize_from_env()
    assert joined == []


def test_a_process_already_joined_is_left_as_it_is(joined, monkeypatch):
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    monkeypatch.setenv("JAXTRANS_DISTRIBUTED", "auto")
    distributed.initialize_from_env()
    assert joined == []
