"""MLX's environment contract as data."""

from __future__ import annotations

import json
import socket
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.run.job import cpu, mlxenv


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


# -- CPU ranks (issue 17) ---------------------------------------------------------------


@given(cores=st.integers(1, 512), ranks=st.integers(1, 64))
def test_cpu_rank_threads_never_oversubscribe_the_cores(cores: int, ranks: int) -> None:
    env = mlxenv.cpu_rank_env("/lib/libopenblas.so.0", cores, ranks)
    threads = int(env["OPENBLAS_NUM_THREADS"])
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"]
    assert threads >= 1
    if ranks <= cores:
        assert ranks * threads <= cores + 1
    else:  # more ranks than cores: one thread each, the least there is
        assert threads == 1


def test_cpu_rank_env_preloads_the_fast_blas_first_once() -> None:
    env = mlxenv.cpu_rank_env("/a/libopenblas.so.0", 8, 2, preload="/b/x.so:/a/libopenblas.so.0")
    assert env["LD_PRELOAD"] == "/a/libopenblas.so.0:/b/x.so"
    assert env["OPENBLAS_NUM_THREADS"] == "4"


def test_cpu_rank_env_preloads_the_ring_wait_library_after_the_blas() -> None:
    env = mlxenv.cpu_rank_env("/a/blas.so", 2, 2, preload="/r/w.so:/b/x.so", ring_wait="/r/w.so")
    assert env["LD_PRELOAD"] == "/a/blas.so:/r/w.so:/b/x.so"
    assert mlxenv.cpu_rank_env(None, 2, 2, ring_wait="/r/w.so")["LD_PRELOAD"] == "/r/w.so"


def test_huge_pages_join_the_tunables_already_set_once() -> None:
    env = mlxenv.cpu_rank_env(None, 2, 1, huge_pages=True, tunables="glibc.malloc.hugetlb=0:x.y=2")
    assert env["GLIBC_TUNABLES"] == "x.y=2:glibc.malloc.hugetlb=1"
    assert "GLIBC_TUNABLES" not in mlxenv.cpu_rank_env(None, 2, 1, tunables="x.y=2")


def test_cpu_rank_env_without_a_fast_blas_only_sets_threads() -> None:
    assert mlxenv.cpu_rank_env(None, 2, 2) == {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def test_remote_cpu_env_comes_from_the_nodes_version_line() -> None:
    linux = {"system": "Linux", "cores": 16, "blas": {"path": "/x/libopenblas.so.0"}}
    assert cpu.node_cpu_env(linux, 2) == {
        "OPENBLAS_NUM_THREADS": "8",
        "OMP_NUM_THREADS": "8",
        "LD_PRELOAD": "/x/libopenblas.so.0",
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
    }
    # A node that built the ring-wait library at --version preloads it after the BLAS.
    built = {**linux, "ring_wait": {"path": "/c/ringwait.so"}}
    assert cpu.node_cpu_env(built, 2)["LD_PRELOAD"] == "/x/libopenblas.so.0:/c/ringwait.so"
    unbuilt = {**linux, "ring_wait": {"missing": "no C compiler (cc) to build it"}}
    assert cpu.node_cpu_env(unbuilt, 2)["LD_PRELOAD"] == "/x/libopenblas.so.0"
    assert cpu.node_cpu_env({"system": "Darwin", "cores": 16}, 1) == {}  # Metal: untouched
    assert "LD_PRELOAD" not in cpu.node_cpu_env({"system": "Linux", "blas": None}, 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_local_cpu_env_uses_this_machines_blas_and_cores(monkeypatch) -> None:
    monkeypatch.setattr(cpu, "local_blas", lambda: {"path": "/y/libopenblas.so.0", "source": "x"})
    monkeypatch.setattr(cpu, "local_cores", lambda: 2)
    monkeypatch.setattr(cpu, "local_ring_wait", lambda: {"path": "/r/ringwait.so"})
    env = cpu.local_cpu_env(2, {"LD_PRELOAD": "/z.so"})
    assert env["LD_PRELOAD"] == "/y/libopenblas.so.0:/r/ringwait.so:/z.so"
    monkeypatch.setattr(cpu, "local_ring_wait", lambda: {"missing": "no C compiler"})
    assert cpu.local_cpu_env(2, {})["LD_PRELOAD"] == "/y/libopenblas.so.0"
    assert env["OPENBLAS_NUM_THREADS"] == "1"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
@pytest.mark.parametrize(
    ("cores", "load", "spare"), [(2, 0.1, 2), (2, 0.6, 1), (2, 9.0, 1), (8, 2.4, 6), (4, 0.0, 4)]
)
def test_blas_threads_take_only_the_cores_no_other_work_holds(
    monkeypatch, cores: int, load: float, spare: int
) -> None:
    """OpenBLAS's threads spin waiting for each other: more than the free cores and a
    rank slows down several times, so a busy machine gets fewer."""
    monkeypatch.setattr(cpu, "local_blas", lambda: {"path": "/y/libopenblas.so.0", "source": "x"})
    monkeypatch.setattr(cpu, "local_cores", lambda: cores)
    monkeypatch.setattr(cpu.os, "getloadavg", lambda: (load, load, load))
    assert cpu.spare_cores() == spare
    assert cpu.local_cpu_env(1, {})["OPENBLAS_NUM_THREADS"] == str(spare)
    assert cpu.local_cpu_env(2, {})["OPENBLAS_NUM_THREADS"] == str(max(1, spare // 2))
