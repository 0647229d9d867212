"""MACMESH_CPU_FAST=0: CPU ranks keep the reference BLAS, their quantized weights and
spinning ring waits (today's path, the blas bench's old arm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.envvars import ENV_CPU_FAST
from core.run.job import cpu
from core.run.job.launcher import JobSpec

BLAS = {"path": "/opt/openblas/libopenblas.so.0", "source": "system"}
RING_WAIT = "/cache/macmesh/native/ringwait.so"
LINUX_NODE = {"system": "Linux", "cores": 8, "blas": BLAS, "ring_wait": {"path": RING_WAIT}}


@pytest.fixture
def linux_with_blas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu.sys, "platform", "linux")
    monkeypatch.setattr(cpu, "local_blas", lambda: BLAS)
    monkeypatch.setattr(cpu, "local_cores", lambda: 4)
    monkeypatch.setattr(cpu, "spare_cores", lambda: 4)
    monkeypatch.setattr(cpu, "local_ring_wait", lambda: {"path": RING_WAIT})


@pytest.mark.parametrize(
    ("value", "fast"),
    [(None, True), ("1", True), ("yes", True), ("0", False), (" OFF ", False), ("false", False)],
)
def test_the_switch_reads_the_usual_spellings(value: str | None, fast: bool) -> None:
    environ = {} if value is None else {ENV_CPU_FAST: value}
    assert cpu.fast_path(environ) is fast


def test_by_default_a_cpu_rank_preloads_the_fast_blas(
    linux_with_blas: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_CPU_FAST, raising=False)
    assert cpu.local_cpu_env(2, {})["LD_PRELOAD"] == f"{BLAS['path']}:{RING_WAIT}"
    assert cpu.node_cpu_env(LINUX_NODE, 2)["LD_PRELOAD"] == f"{BLAS['path']}:{RING_WAIT}"
    assert cpu.local_cpu_env(2, {})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    spec = JobSpec(model=Path("/m"), nodes=2, split=[1, 1], weights=["float", "auto"])
    assert spec.worker_args(0)[-2:] == ["--weights", "float"]
    assert "--weights" not in spec.worker_args(1)


def test_switched_off_no_preload_and_quantized_weights_threads_still_shared(
    linux_with_blas: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_CPU_FAST, "0")
    local = cpu.local_cpu_env(2, {})
    remote = cpu.node_cpu_env(LINUX_NODE, 2)
    assert "LD_PRELOAD" not in local and "LD_PRELOAD" not in remote
    assert "GLIBC_TUNABLES" not in local and "GLIBC_TUNABLES" not in remote
    assert local["OPENBLAS_NUM_THREADS"] == "2" and remote["OPENBLAS_NUM_THREADS"] == "4"
    spec = JobSpec(model=Path("/m"), nodes=2, split=[1, 1], weights=["float", "auto"])
    for rank in (0, 1):
        assert spec.worker_args(rank)[-2:] == ["--weights", "quantized"]
