"""MLX's environment contract as data."""

from __future__ import annotations

import json
import socket

from core import mlxenv


def test_ring_hostfile_has_one_list_of_ip_port_per_rank() -> None:
    text = mlxenv.ring_hostfile([("127.0.0.2", 40000), ("127.0.0.3", 40001)])
    assert json.loads(text) == [["127.0.0.2:40000"], ["127.0.0.3:40001"]]


def test_rank_env_sets_the_contract_and_drops_fast_synch() -> None:
    env = mlxenv.rank_env(
        1, "ring", "/tmp/h.json", base={"PATH": "/bin", "MLX_METAL_FAST_SYNCH": "1"}
    )
    assert env == {
        "PATH": "/bin",
        "MLX_RANK": "1",
        "MLX_HOSTFILE": "/tmp/h.json",
        "PYTHONUNBUFFERED": "1",
    }


def test_rank_env_for_one_rank_needs_no_hostfile() -> None:
    env = mlxenv.rank_env(0, "single", base={}, extra={"MACMESH_TELEMETRY": "0"})
    assert env == {"MLX_RANK": "0", "PYTHONUNBUFFERED": "1", "MACMESH_TELEMETRY": "0"}


def test_free_ports_are_distinct_bindable_and_never_handed_out_twice() -> None:
    first = mlxenv.free_ports(4)
    second = mlxenv.free_ports(4)
    assert len(set(first + second)) == 8
    for port in first:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_handed_out() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert taken not in mlxenv.free_ports(16)
