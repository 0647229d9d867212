"""Preflight through a real sshd: two simulated Macs (mesh4's studio-a and studio-b
answering macOS commands from their fixtures), each with its own cache root."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.model.manifest import MARKER
from core.plan.memory import GIB, Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.remote import modelcheck, modelcopy
from core.remote.targets import Target
from core.run.checks.preflight import run_preflight
from core.run.checks.report import PreflightReport, format_report
from core.units import size
from tests.fixtures.macos.make_bin import make_host_bins
from tests.helpers.remote import sshd_targets
from tests.helpers.sshd import SSHServer
from tests.helpers.tiny_models import make_tiny_model
from tests.helpers.wait import wait_until

HOSTS = {"127.0.0.2": "studio-a", "127.0.0.3": "studio-b"}


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_host_bins("mesh4", HOSTS, tmp_path_factory.mktemp("mesh-bins"))


@pytest.fixture(autouse=True)
def _hash_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", layers=4, shards=4)


@pytest.fixture
def targets(sshd: SSHServer, tmp_path: Path) -> list[Target]:
    return sshd_targets(sshd, tmp_path, HOSTS)


def plan_for(model: Path) -> Plan:
    nodes = [Node(name, 64 * GIB) for name in HOSTS.values()]
    return make_plan(read_model_info(model), nodes, options=PlanOptions(strategy="pipeline"))


def checks(report: PreflightReport, name: str, node: str | None = None):
    return [c for c in report.checks if c.name == name and (node is None or c.node == node)]


def test_missing_model_is_copied_with_progress_then_preflight_passes(
    targets: list[Target], model: Path
) -> None:
    plan = plan_for(model)
    report = run_preflight(targets, plan, model)
    assert report.ok, format_report(report)
    assert report.backend.name == "jaccl"  # studio-a and studio-b: cabled, RDMA on
    assert report.copies_needed == ("studio-a", "studio-b")
    for check in checks(report, "model"):
        assert check.status == "warn" and "lacks" in check.message and "copies" in check.fix
    python = checks(report, "python", "studio-a")[0]
    assert python.status == "ok" and sys.executable in python.message
    assert checks(report, "versions")[0].status == "ok"
    by_name = {t.name: t for t in targets}
    for node in report.copies_needed:
        events: list[modelcopy.CopyProgress] = []
        part = report.manifests[node]
        modelcopy.copy_model(by_name[node], part, model, progress=events.append)
        assert events[-1].phase == "verified"
        assert events[-1].bytes_done == events[-1].bytes_total == part.total_bytes
    again = run_preflight(targets, plan, model)
    assert again.ok and again.copies_needed == ()
    assert {c.status for c in checks(again, "model")} == {"ok"}
    assert "Ready to start." in format_report(again)


def test_a_node_whose_python_has_another_mlx_fails_the_version_check(
    targets: list[Target], model: Path, tmp_path: Path
) -> None:
    # A Python that reports mlx 0.29.1: a fake distribution ahead of the real one.
    fake = tmp_path / "fake-site"
    info = fake / "mlx-0.29.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mlx\nVersion: 0.29.1\n")
    wrapper = tmp_path / "old-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={fake} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    targets[1] = dataclasses.replace(targets[1], python=str(wrapper))
    report = run_preflight(targets, plan_for(model), model)
    [check] = checks(report, "versions")
    assert check.status == "fail" and check.node == "studio-b"
    assert "mlx 0.29.1" in check.message and "mlx 0.32.4" in check.message
    assert f"{wrapper} -m pip install mlx==0.32.4" in check.fix
    assert str(wrapper) in checks(report, "python", "studio-b")[0].message
    assert not report.ok and "FAIL" in format_report(report)


def test_facts_just_probed_are_reused_and_the_model_still_checked(
    targets: list[Target], model: Path
) -> None:
    """``macmesh run`` probes to plan: preflight takes those facts instead of probing
    again (the reused facts' mlx version shows it), and still checks the model."""
    first = run_preflight(targets, plan_for(model), model)
    probed = {
        name: dataclasses.replace(facts, mlx_version="9.9.9") for name, facts in first.facts.items()
    }
    report = run_preflight(targets, plan_for(model), model, facts=probed)
    assert "mlx 9.9.9" in checks(report, "python", "studio-a")[0].message
    assert report.copies_needed == ("studio-a", "studio-b")  # the model check ran


def test_a_different_model_on_a_node_is_refused(targets: list[Target], model: Path) -> None:
    plan = plan_for(model)
    first = run_preflight(targets, plan, model)
    target = targets[0]
    modelcopy.copy_model(target, first.manifests[target.name], model)
    folder = Path(modelcheck.remote_model_dir(target, first.manifests[target.name]))
    (folder / MARKER).unlink()
    config = folder / "config.json"
    config.write_bytes(config.read_bytes().replace(b"llama", b"llamb", 1))
    report = run_preflight(targets, plan, model)
    [check] = checks(report, "model", "studio-a")
    assert check.status == "fail" and "config.json" in check.message
    assert "will not overwrite" in check.fix and str(folder) in check.fix
    assert not report.ok and "studio-a" not in report.copies_needed


def test_a_plan_needing_more_memory_than_a_node_has_fails(
    targets: list[Target], model: Path
) -> None:
    plan = plan_for(model)
    # Both fixture Macs have 512 GB; studio-b's iogpu.wired_limit_mb lets the GPU use 448.
    sizes = {"studio-a": 300 * GIB, "studio-b": 500 * GIB}
    heavy = tuple(dataclasses.replace(r, weights_bytes=sizes[r.node]) for r in plan.ranks)
    report = run_preflight(targets, dataclasses.replace(plan, ranks=heavy), model)
    memory = {c.node: c for c in checks(report, "memory")}
    assert memory["studio-b"].status == "fail"
    assert "can give the GPU only" in memory["studio-b"].message
    assert "iogpu.wired_limit_mb" in memory["studio-b"].message
    assert memory["studio-a"].status == "ok"
    assert not report.ok


def test_an_unreachable_host_is_named_with_a_fix(
    targets: list[Target], model: Path, sshd: SSHServer
) -> None:
    gone = dataclasses.replace(targets[1], host="127.0.0.9")  # nothing listens there
    report = run_preflight([targets[0], gone], plan_for(model), model)
    [check] = checks(report, "ssh", "studio-b")
    assert check.status == "fail" and "127.0.0.9" in check.message
    assert "No SSH server answers" in check.message and "Remote Login" in check.fix
    assert checks(report, "ssh", "studio-a")[0].status == "ok"
    assert not report.ok
    assert os.environ.get("MACMESH_CACHE_DIR")  # the hash cache stayed in the test's folder


@pytest.fixture
def small_disk(targets: list[Target]) -> Iterator[Path]:
    """studio-b's cache folder on a 2 MB tmpfs (unmounted afterwards)."""
    root = Path(targets[1].cache_root or "")
    root.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(root)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (run as root): {mounted.stderr.decode()}")
    try:
        yield root
    finally:
        subprocess.run(["umount", str(root)], check=False)
        if os.path.ismount(root):
            subprocess.run(["umount", "-l", str(root)], check=True)


def test_a_full_disk_fails_preflight_by_the_amount_and_a_copy_names_the_receivers_error(
    targets: list[Target], small_disk: Path, tmp_path: Path, sshd: SSHServer
) -> None:
    """Issue 12, fault 2: a 2 MB cache folder on studio-b, a model part bigger than that."""
    big = make_tiny_model(tmp_path / "big", layers=4, shards=2, vocab=8192, hidden=128)
    plan = plan_for(big)
    report = run_preflight(targets, plan, big)
    part = report.manifests["studio-b"]
    assert part.total_bytes > 2 << 20
    [check] = checks(report, "model", "studio-b")
    short = size(part.total_bytes - (2 << 20))  # df: the whole 2 MB are free
    assert check.status == "fail", format_report(report)
    assert check.message.startswith(f"studio-b needs {short} more free space in {small_disk}:")
    assert f"Free at least {short} on studio-b" in check.fix
    assert checks(report, "model", "studio-a")[0].status == "warn"  # room enough there
    assert not report.ok and "studio-b needs" in format_report(report)
    # Copied anyway (as if the space went between the checks and the copy): the node's
    # own error, not a lost connection.
    with pytest.raises(modelcopy.ModelCopyError) as caught:
        modelcopy.copy_model(targets[1], part, big)
    message = str(caught.value)
    assert "studio-b ran out of disk space" in message and "No space left on device" in message
    assert "Lost the connection" not in message and "copy again" in message
    wait_until(lambda: sshd.leftovers() == [], timeout=10, what="no receiver left on the node")


def test_verify_catches_a_same_size_corrupted_file_that_size_checks_miss_and_the_copy_repairs_it(
    targets: list[Target], model: Path
) -> None:
    """Issue 12, fault 6, through preflight: "present (size checked)" until hashed now."""
    plan = plan_for(model)
    first = run_preflight(targets, plan, model)
    target, part = targets[0], first.manifests["studio-a"]
    modelcopy.copy_model(target, part, model)
    folder = Path(modelcheck.remote_model_dir(target, part))
    config = folder / "config.json"
    original, before = config.read_bytes(), config.stat()
    config.write_bytes(original.replace(b"llama", b"llamb", 1))
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))  # its mtime put back
    plain = checks(run_preflight(targets, plan, model), "model", "studio-a")[0]
    assert plain.status == "ok" and "present (size checked)" in plain.message
    verified = run_preflight(targets, plan, model, verify=True)
    check = checks(verified, "model", "studio-a")[0]
    assert check.status == "warn" and "config.json" in check.message
    assert "changed since MacMesh copied it" in check.message
    assert verified.damaged == {"studio-a": ("config.json",)} and verified.ok
    assert "studio-a" in verified.copies_needed
    damaged = verified.damaged["studio-a"]
    modelcopy.copy_model(target, verified.manifests["studio-a"], model, damaged=damaged)
    assert config.read_bytes() == original
    again = checks(run_preflight(targets, plan, model, verify=True), "model", "studio-a")[0]
    assert again.status == "ok" and "verified now" in again.message
