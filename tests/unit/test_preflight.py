"""core.run.checks.preflight as data: the backend choice over the fixture clusters, and each check
from gathered facts (no SSH; tests/integration/test_preflight.py does it for real)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from core.model.manifest import FileEntry, Manifest
from core.plan.memory import GIB, Node, PlanOptions
from core.plan.planner import make_plan
from core.remote import ssh
from core.remote.modelcheck import CheckResult
from core.remote.targets import Target
from core.run.checks.preflight import Gathered, choose_backend, evaluate
from core.run.checks.report import Check, format_report
from tests.fixtures.macos.hosts import load_facts
from tests.helpers.header_models import synthetic_model_info

# -- checks ---------------------------------------------------------------------------------


def test_check_constructors_say_the_status_and_a_failure_says_its_fix() -> None:
    assert Check.ok("a", "ssh", "fine") == Check("a", "ssh", "ok", "fine", "")
    assert Check.warn("a", "memory", "tight") == Check("a", "memory", "warn", "tight", "")
    assert Check.warn("a", "model", "m", "copy") == Check("a", "model", "warn", "m", "copy")
    assert Check.fail("a", "plan", "no", "add a Mac") == Check(
        "a", "plan", "fail", "no", "add a Mac"
    )


# -- backend --------------------------------------------------------------------------------


def test_a_full_mesh_with_rdma_runs_jaccl_with_its_device_matrix() -> None:
    mesh = load_facts("mesh4")
    choice = choose_backend(mesh)
    assert choice.name == "jaccl" and choice.problem is None
    matrix = choice.devices
    assert matrix is not None and len(matrix) == 4
    assert all(matrix[i][i] is None for i in range(4))
    assert all(
        str(matrix[i][j]).startswith("rdma_en") for i in range(4) for j in range(4) if i != j
    )
    assert choose_backend(mesh, "jaccl-ring").name == "jaccl-ring"  # a mesh has a ring too


def test_a_ring_cabling_runs_jaccl_ring_when_the_ranks_follow_the_ring() -> None:
    ring = load_facts("ring4")
    choice = choose_backend(ring)
    assert choice.name == "jaccl-ring" and choice.devices is not None
    assert [row.count(None) for row in choice.devices] == [2, 2, 2, 2]  # self + the far Mac
    jaccl = choose_backend(ring, "jaccl")
    assert jaccl.name == "jaccl" and jaccl.problem is not None
    assert "none joins ring-a and ring-c" in jaccl.reason
    a, b, c, d = ring
    crossed = choose_backend([a, c, b, d])  # rank order against the cabling
    assert crossed.name == "ring" and "ring-a and ring-c" in crossed.reason


@pytest.mark.parametrize(
    ("fixture_set", "words", "guide"),
    [
        ("pair27", "turned off on studio-f", "rdma-macos27"),
        ("mini-tb4", "Thunderbolt 4", "thunderbolt4"),
        ("bridge", "Thunderbolt Bridge is active", "thunderbolt-bridge"),
        ("dock", "needs macOS 26.2", "rdma-update-macos"),
    ],
)
def test_without_rdma_auto_says_plainly_why_it_is_ring_over_the_lan(
    fixture_set: str, words: str, guide: str
) -> None:
    facts = load_facts(fixture_set)
    choice = choose_backend(facts)
    assert choice.name == "ring" and choice.devices is None
    assert choice.reason.startswith("Ring")
    assert "RDMA is not used: " in choice.reason
    assert words in choice.reason and choice.guide == guide
    forced = choose_backend(facts, "jaccl")
    assert forced.name == "jaccl" and forced.problem and words in forced.reason
    assert choose_backend(facts, "ring").problem is None


# -- checks ---------------------------------------------------------------------------------

MODEL = synthetic_model_info(layers=8, layer_bytes=1 * GIB, shared_bytes=GIB // 2, name="m")
MANIFEST = Manifest(
    "m", (FileEntry("config.json", 10, "a" * 64), FileEntry("w.safetensors", 9 * GIB, "b" * 64))
)


def _cluster(fixture_set: str = "mesh4", count: int = 2):
    facts = load_facts(fixture_set)[:count]
    targets = [Target(f.name, f"10.0.0.{i + 2}", cache_root="/c") for i, f in enumerate(facts)]
    nodes = [Node(f.name, f.memory_bytes or 0, f.wired_limit_mb) for f in facts]
    plan = make_plan(MODEL, nodes, options=PlanOptions(strategy="pipeline"))
    present = {f.name: CheckResult(f.name, "present", "/c/models/m-x") for f in facts}
    gathered = [Gathered(t, f, model=present[f.name]) for t, f in zip(targets, facts, strict=True)]
    return plan, gathered


def _by(report, name: str, node: str | None = None):
    return [c for c in report.checks if c.name == name and (node is None or c.node == node)]


def test_a_healthy_cluster_is_ready() -> None:
    plan, gathered = _cluster()
    report = evaluate(plan, gathered, {g.target.name: MANIFEST for g in gathered})
    assert report.ok, format_report(report)
    assert report.backend.name == "jaccl" and report.copies_needed == ()
    assert {c.name for c in report.checks} >= {
        "ssh",
        "python",
        "versions",
        "model",
        "memory",
        "backend",
    }
    python = _by(report, "python", "studio-a")[0]
    assert "/Users/admin/mlx/bin/python3" in python.message and "mlx 0.32.4" in python.message
    json.dumps(report.to_dict())  # JSON-able
    assert "Ready to start." in format_report(report)


def test_a_version_mismatch_names_the_node_and_the_command_that_fixes_it() -> None:
    plan, gathered = _cluster("mesh4", 3)
    odd = dataclasses.replace(gathered[1].facts, mlx_version="0.29.0")
    gathered[1] = dataclasses.replace(gathered[1], facts=odd)
    report = evaluate(plan, gathered, {})
    [check] = _by(report, "versions")
    assert check.status == "fail" and check.node == "studio-b"
    assert "mlx 0.29.0" in check.message and "mlx 0.32.4" in check.message
    assert "pip install mlx==0.32.4 mlx-lm==0.32.2" in check.fix
    assert not report.ok


def test_different_macos_builds_fail_jaccl_only() -> None:
    plan, gathered = _cluster()
    other = dataclasses.replace(gathered[1].facts, macos_build="25C99")
    gathered[1] = dataclasses.replace(gathered[1], facts=other)
    report = evaluate(plan, gathered, {})
    assert _by(report, "macos")[0].status == "fail" and not report.ok
    assert evaluate(plan, gathered, {}, backend="ring").ok


def test_missing_model_offers_a_copy_and_different_is_refused() -> None:
    plan, gathered = _cluster()
    missing = CheckResult("studio-a", "missing", "/c/models/m-x", ("w.safetensors",), 9 * GIB)
    different = CheckResult(
        "studio-b",
        "different",
        "/c/models/m-x",
        reason="/c/models/m-x on studio-b does not match this model: config.json: it has "
        "11 bytes instead of 10.",
    )
    gathered = [
        dataclasses.replace(gathered[0], model=missing),
        dataclasses.replace(gathered[1], model=different),
    ]
    report = evaluate(plan, gathered, {g.target.name: MANIFEST for g in gathered})
    a, b = _by(report, "model", "studio-a")[0], _by(report, "model", "studio-b")[0]
    assert a.status == "warn" and "lacks 1 file" in a.message and "copies" in a.fix
    assert b.status == "fail" and "does not match" in b.message
    assert "rm -rf /c/models/m-x" in b.fix and "will not overwrite" in b.fix
    assert report.copies_needed == ("studio-a",) and not report.ok


def test_a_node_short_of_disk_space_for_the_copy_fails_with_the_amount_missing() -> None:
    plan, gathered = _cluster()
    short = CheckResult(
        "studio-b", "missing", "/c/models/m-x", ("w.safetensors",), 9 * GIB,
        to_write_bytes=9 * GIB, free_bytes=int(5.8 * GIB),
    )  # fmt: skip
    roomy = dataclasses.replace(short, node="studio-a", free_bytes=20 * GIB)
    gathered = [
        dataclasses.replace(gathered[0], model=roomy),
        dataclasses.replace(gathered[1], model=short),
    ]
    report = evaluate(plan, gathered, {g.target.name: MANIFEST for g in gathered})
    b = _by(report, "model", "studio-b")[0]
    assert b.status == "fail"
    assert b.message.startswith("studio-b needs 3.2 GB more free space in /c:")
    assert "Free at least 3.2 GB on studio-b" in b.fix
    assert _by(report, "model", "studio-a")[0].status == "warn"
    assert not report.ok


def test_present_says_size_checked_unless_hashed_now_and_damage_is_passed_to_the_copy() -> None:
    plan, gathered = _cluster()
    verified = CheckResult("studio-b", "present", "/c/models/m-x", verified=True)
    gathered[1] = dataclasses.replace(gathered[1], model=verified)
    report = evaluate(plan, gathered, {g.target.name: MANIFEST for g in gathered})
    a, b = _by(report, "model", "studio-a")[0], _by(report, "model", "studio-b")[0]
    assert "present (size checked)" in a.message and "verified" not in a.message
    assert "verified now" in b.message
    damaged = CheckResult(
        "studio-b", "missing", "/c/models/m-x", ("w.safetensors",), 9 * GIB,
        "w.safetensors on studio-b changed since MacMesh copied it (SHA-256 mismatch): "
        "copied again.", damaged=("w.safetensors",),
    )  # fmt: skip
    gathered[1] = dataclasses.replace(gathered[1], model=damaged)
    report = evaluate(plan, gathered, {g.target.name: MANIFEST for g in gathered})
    b = _by(report, "model", "studio-b")[0]
    assert b.status == "warn" and "changed since MacMesh copied it" in b.message
    assert report.copies_needed == ("studio-b",) and report.ok
    assert report.damaged == {"studio-b": ("w.safetensors",)}


def test_a_plan_bigger_than_the_nodes_fails_the_memory_check() -> None:
    _, gathered = _cluster()
    big = [Node(g.target.name, 4096 * GIB) for g in gathered]
    huge = synthetic_model_info(layers=8, layer_bytes=200 * GIB, shared_bytes=GIB, name="huge")
    plan = make_plan(huge, big, options=PlanOptions(strategy="pipeline"))
    assert plan.verdict == "fits"  # on the Macs it imagined
    report = evaluate(plan, gathered, {})
    memory = _by(report, "memory")
    assert {c.status for c in memory} == {"fail"}
    assert "can give the GPU only" in memory[0].message and "Plan again" in memory[0].fix


def test_an_unreachable_node_fails_with_the_ssh_message_and_a_fix() -> None:
    plan, gathered = _cluster()
    error = ssh.RemoteLoginOff("10.0.0.3", "No SSH server answers on 10.0.0.3 port 22.")
    gathered[1] = Gathered(gathered[1].target, error=error)
    report = evaluate(plan, gathered, {})
    check = _by(report, "ssh", "studio-b")[0]
    assert check.status == "fail" and "No SSH server answers" in check.message
    assert "Remote Login" in check.fix
    assert "could not be reached" in report.backend.reason
    assert _by(report, "ssh", "studio-a")[0].status == "ok"


def test_a_node_without_mlx_gets_the_install_line() -> None:
    plan, gathered = _cluster()
    bare = dataclasses.replace(gathered[0].facts, mlx_version=None, mlx_lm_version=None)
    gathered[0] = dataclasses.replace(gathered[0], facts=bare)
    report = evaluate(plan, gathered, {})
    check = _by(report, "python", "studio-a")[0]
    assert check.status == "fail" and "no mlx or mlx-lm" in check.message
    assert "-m pip install mlx mlx-lm" in check.fix
    assert "install MacMesh.app there" in check.fix


def test_a_node_running_its_macmesh_app_says_so() -> None:
    plan, gathered = _cluster()
    app = "/Applications/MacMesh.app/Contents/MacOS/MacMesh"
    facts = dataclasses.replace(gathered[0].facts, macmesh_app=app, python_executable=app)
    target = dataclasses.replace(gathered[0].target, python=app)
    gathered[0] = dataclasses.replace(gathered[0], target=target, facts=facts)
    check = _by(evaluate(plan, gathered, {}), "python", "studio-a")[0]
    assert check.status == "ok" and f"MacMesh.app's own Python ({app})" in check.message
