"""The JACCL path as data: from the fixture clusters' probes to each rank's environment
and the equivalent mlx.launch hostfile (JACCL does not exist on Linux)."""

from __future__ import annotations

import json

import pytest

from core.cluster.probe.facts import parse_probe
from core.cluster.topology import build_topology, jaccl_devices
from core.run.job import mlxenv
from tests.fixtures.macos.hosts import hosts, probe_output


def _topology(fixture_set: str):
    return build_topology([parse_probe(h.name, probe_output(h)) for h in hosts(fixture_set)])


@pytest.mark.parametrize(("fixture_set", "backend"), [("mesh4", "jaccl"), ("ring4", "jaccl-ring")])
def test_every_rank_gets_the_matrix_and_rank_zeros_coordinator(
    fixture_set: str, backend: str, tmp_path
) -> None:
    topology = _topology(fixture_set)
    order = list(topology.ring or topology.nodes)
    matrix = jaccl_devices(topology, order)
    devices = tmp_path / "devices.json"
    devices.write_text(mlxenv.jaccl_devices_file(matrix))
    envs = [
        mlxenv.rank_env(
            rank, backend, base={}, devices=str(devices), coordinator="192.168.1.10:32323"
        )
        for rank in range(len(order))
    ]
    assert [env["MLX_RANK"] for env in envs] == ["0", "1", "2", "3"]
    assert {env["MLX_JACCL_COORDINATOR"] for env in envs} == {"192.168.1.10:32323"}
    assert all(("MLX_JACCL_RING" in env) == (backend == "jaccl-ring") for env in envs)
    written = json.loads(devices.read_text())
    assert [written[i][i] for i in range(4)] == [None] * 4
    # Symmetry of cabling: a device on i toward j exactly when one on j toward i.
    assert all(
        (written[i][j] is None) == (written[j][i] is None) for i in range(4) for j in range(4)
    )
    if backend == "jaccl":
        assert all(written[i][j] for i in range(4) for j in range(4) if i != j)  # full mesh
    else:
        # ring: only neighbours are cabled
        assert all(
            (written[i][j] is not None) == ((i - j) % 4 in (1, 3))
            for i in range(4)
            for j in range(4)
            if i != j
        )
    hostfile = mlxenv.launch_hostfile(
        backend, [f"{name}.local" for name in order], [["192.168.1.10"], [], [], []], rdma=matrix
    )
    assert [h["rdma"] for h in hostfile["hosts"]] == matrix
