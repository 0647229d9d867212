"""MLX's environment contract as data."""

from __future__ import annotations

import json
import socket

import pytest

from core.run import mlxenv


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


def test_jaccl_rank_env_carries_devices_and_coordinator() -> None:
    env = mlxenv.rank_env(
        2, "jaccl", base={"MLX_HOSTFILE": "stale"}, devices="/d.json", coordinator="10.0.0.1:5000"
    )
    assert env == {
        "MLX_RANK": "2",
        "PYTHONUNBUFFERED": "1",
        "MLX_IBV_DEVICES": "/d.json",
        "MLX_JACCL_COORDINATOR": "10.0.0.1:5000",
    }
    ring = mlxenv.rank_env(0, "jaccl-ring", base={}, devices="/d.json", coordinator="h:1")
    assert ring["MLX_JACCL_RING"] == "1"


@pytest.mark.parametrize("missing", ["devices", "coordinator"])
def test_jaccl_without_its_matrix_or_coordinator_is_refused(missing: str) -> None:
    kwargs = {"devices": "/d.json", "coordinator": "h:1", missing: None}
    with pytest.raises(ValueError, match="jaccl needs"):
        mlxenv.rank_env(0, "jaccl", base={}, **kwargs)


def test_device_matrix_file_must_be_square_with_an_empty_diagonal() -> None:
    good = [[None, "rdma_en2"], ["rdma_en3", None]]
    assert json.loads(mlxenv.jaccl_devices_file(good)) == good
    with pytest.raises(ValueError):
        mlxenv.jaccl_devices_file([[None, "rdma_en2"]])
    with pytest.raises(ValueError):
        mlxenv.jaccl_devices_file([["rdma_en1", None], [None, None]])


def test_the_equivalent_mlx_launch_hostfile_and_command() -> None:
    hostfile = mlxenv.launch_hostfile(
        "jaccl",
        ["studio-a.local", "studio-b.local"],
        [["192.168.1.10"], []],
        rdma=[[None, "rdma_en3"], ["rdma_en2", None]],
    )
    assert hostfile == {
        "backend": "jaccl",
        "envs": [],
        "hosts": [
            {"ssh": "studio-a.local", "ips": ["192.168.1.10"], "rdma": [None, "rdma_en3"]},
            {"ssh": "studio-b.local", "ips": [], "rdma": ["rdma_en2", None]},
        ],
    }
    command = mlxenv.launch_command("/tmp/h.json", "/usr/bin/python3", ["--model", "/m"])
    assert command[:5] == [
        "mlx.launch",
        "--hostfile",
        "/tmp/h.json",
        "--python",
        "/usr/bin/python3",
    ]
    assert command[5:] == ["--", "-m", "core.worker", "--model", "/m"]
