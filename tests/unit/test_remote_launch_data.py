"""Each remote rank's launch as data: the files in its folder on its node, its
environment, and the shell line that runs it (JACCL checked here: it needs Macs)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from core.cluster.probe.facts import parse_probe
from core.cluster.topology import build_topology, jaccl_devices
from core.run.job.remote_ranks import DEVICES, HOSTFILE, cluster_launches, rank_command
from tests.fixtures.macos.hosts import hosts, probe_output

LAN = ["192.168.1.10", "192.168.1.11", "192.168.1.12", "192.168.1.13"]


def _dirs(n: int) -> list[str]:
    return [f"/Users/me/Library/Caches/MacMesh/jobs/j1-rank{r}" for r in range(n)]


@pytest.mark.parametrize(("fixture_set", "backend"), [("mesh4", "jaccl"), ("ring4", "jaccl-ring")])
def test_jaccl_ranks_get_the_matrix_on_their_node_and_rank_zeros_lan_coordinator(
    fixture_set: str, backend: str
) -> None:
    topology = build_topology([parse_probe(h.name, probe_output(h)) for h in hosts(fixture_set)])
    order = list(topology.ring or topology.nodes)
    matrix = jaccl_devices(topology, order)
    launches = cluster_launches(backend, LAN, [32323, 0, 0, 0], _dirs(4), matrix)
    assert [launch.rank for launch in launches] == [0, 1, 2, 3]
    for launch, job_dir in zip(launches, _dirs(4), strict=True):
        assert launch.env["MLX_RANK"] == str(launch.rank)
        assert launch.env["MLX_IBV_DEVICES"] == f"{job_dir}/{DEVICES}"
        assert launch.env["MLX_JACCL_COORDINATOR"] == "192.168.1.10:32323"
        assert ("MLX_JACCL_RING" in launch.env) == (backend == "jaccl-ring")
        assert "MLX_HOSTFILE" not in launch.env and "PATH" not in launch.env  # the node's own
        assert json.loads(launch.files[DEVICES]) == matrix
    if backend == "jaccl-ring":  # neighbours in rank order are cabled, others not
        assert all(matrix[i][(i + 1) % 4] and not matrix[i][(i + 2) % 4] for i in range(4))


def test_ring_ranks_listen_on_their_own_address() -> None:
    launches = cluster_launches("ring", LAN[:3], [40000, 40001, 40002], _dirs(3))
    hostfile = json.loads(launches[2].files[HOSTFILE])
    assert hostfile == [["192.168.1.10:40000"], ["192.168.1.11:40001"], ["192.168.1.12:40002"]]
    assert launches[1].env["MLX_HOSTFILE"] == f"{_dirs(3)[1]}/{HOSTFILE}"
    assert "MLX_IBV_DEVICES" not in launches[1].env


def test_jaccl_without_a_matrix_row_per_rank_is_refused() -> None:
    with pytest.raises(ValueError, match="device matrix"):
        cluster_launches("jaccl", LAN[:2], [1, 0], _dirs(2), [[None, "rdma_en3"]])


def test_the_rank_command_writes_its_files_runs_and_cleans_up(tmp_path: Path) -> None:
    [launch] = cluster_launches("ring", ["127.0.0.2"], [40000], [str(tmp_path / "job's dir")])
    launch = type(launch)(0, launch.job_dir, {HOSTFILE: '[["a:1"]]', DEVICES: "it's"}, {})
    probe = (
        f"cat {shlex.quote(HOSTFILE)} {shlex.quote(launch.job_dir + '/' + DEVICES)}; pwd; exit 7"
    )
    line = rank_command(
        launch, str(tmp_path), ["/bin/sh", "-c", f"cd {shlex.quote(launch.job_dir)} && {probe}"]
    )
    run = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, check=False)
    assert run.returncode == 7
    assert run.stdout == f'[["a:1"]]it\'s{launch.job_dir}\n'
    assert not Path(launch.job_dir).exists()  # removed after the worker ended
