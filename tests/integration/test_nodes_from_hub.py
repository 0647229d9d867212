"""Nodes get their share from the Hub or from this Mac (issue 13, step 3), through a real
sshd: two simulated Macs on 127.0.0.2 and 127.0.0.3 whose Python (the real
huggingface_hub) downloads from the fake Hub on 127.0.0.1; a node whose Hub address is a
closed port falls back to the copy; ``model_source`` forces either."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.plan.memory import GIB, Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.remote.hubfetch import fetch_from_hub, fetch_or_copy, hub_origin
from core.remote.modelcopy import CopyCancelled, CopyProgress
from core.remote.targets import Target
from core.run.checks.preflight import run_preflight
from core.run.checks.report import PreflightReport, format_report
from core.run.session import Session, real_hosts
from tests.fixtures.macos.make_bin import make_host_bins
from tests.helpers.fake_hub import FakeHub
from tests.helpers.hf_cache import put_in_hf_cache
from tests.helpers.hub_env import hub
from tests.helpers.remote import sshd_targets, wait_nothing_left
from tests.helpers.sshd import SSHServer
from tests.helpers.tiny_models import make_tiny_model

__all__ = ["hub"]  # the fixture

HOSTS = {"127.0.0.2": "studio-a", "127.0.0.3": "studio-b"}
REPO = "mlx-community/tiny-4-shards"


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_host_bins("mesh4", HOSTS, tmp_path_factory.mktemp("mesh-bins"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", layers=4, shards=4)


@pytest.fixture
def snapshot(hub: FakeHub, tiny: Path, tmp_path: Path) -> Iterator[Path]:
    """The model in this Mac's Hugging Face cache, as the fake Hub serves it."""
    repo = hub.add_folder(REPO, tiny)
    yield put_in_hf_cache(tmp_path / "hf-home" / "hub", REPO, tiny, sha=repo.sha)


@pytest.fixture
def targets(sshd: SSHServer, tmp_path: Path) -> list[Target]:
    return sshd_targets(sshd, tmp_path, HOSTS)


def no_hub_for(target: Target, tmp_path: Path) -> Target:
    """That node's own settings point it at a closed port: it cannot reach the Hub."""
    wrapper = tmp_path / f"{target.name}-python"
    wrapper.write_text(
        f'#!/bin/sh\nHF_ENDPOINT=http://127.0.0.1:9 exec {target.interpreter} "$@"\n'
    )
    wrapper.chmod(0o755)
    return dataclasses.replace(target, python=str(wrapper))


def plan_for(model: Path) -> Plan:
    nodes = [Node(name, 64 * GIB) for name in HOSTS.values()]
    return make_plan(read_model_info(model), nodes, options=PlanOptions(strategy="pipeline"))


def source_checks(report: PreflightReport) -> dict[str, tuple[str, str]]:
    return {c.node: (c.status, c.message) for c in report.checks if c.name == "source"}


def weight_gets(hub: FakeHub) -> list[str]:
    """The weight files the fake Hub sent, by name."""
    names = {f.sha256: n for n, f in hub.repos[REPO].files.items() if f.lfs}
    return sorted(
        names[s.path.rsplit("/", 1)[-1]]
        for s in hub.served("/cdn/")
        if s.method == "GET" and s.status in (200, 206)
    )


def test_each_node_downloads_only_its_own_shard_from_the_hub(
    hub: FakeHub, snapshot: Path, targets: list[Target]
) -> None:
    assert hub_origin(snapshot) is not None
    report = run_preflight(targets, plan_for(snapshot), snapshot)
    assert report.ok, format_report(report)
    assert report.sources == {"studio-a": "hub", "studio-b": "hub"}
    host = hub.url.split("//")[1]
    for node, (status, message) in source_checks(report).items():
        count = len(report.manifests[node].files)
        assert status == "ok"
        assert message == f"{node} downloads its {count} files from {host} itself."
    by_name = {t.name: t for t in targets}
    for node in report.copies_needed:
        hub.clear_log()
        part = report.manifests[node]
        events: list[CopyProgress] = []
        result = fetch_or_copy(by_name[node], part, snapshot, progress=events.append)
        assert result.sent_bytes == 0  # not a byte from this Mac: verified and committed
        assert events[-1].phase == "verified"
        ours = sorted(n for n in part.names if n.endswith(".safetensors"))
        assert weight_gets(hub) == ours  # this node's shards, no other
        assert all("Bearer" not in (s.authorization or "") for s in hub.served())
    assert weight_gets(hub) != sorted(
        n for n in hub.repos[REPO].files if n.endswith(".safetensors")
    )  # the two nodes split the model
    again = run_preflight(targets, plan_for(snapshot), snapshot)
    assert again.ok and again.copies_needed == () and again.sources == {}


def test_a_node_that_cannot_reach_the_hub_gets_a_copy_from_this_mac(
    hub: FakeHub, snapshot: Path, targets: list[Target], tmp_path: Path
) -> None:
    targets[1] = no_hub_for(targets[1], tmp_path)
    report = run_preflight(targets, plan_for(snapshot), snapshot)
    assert report.ok, format_report(report)
    assert report.sources == {"studio-a": "hub", "studio-b": "this-mac"}
    status, message = source_checks(report)["studio-b"]
    assert status == "ok"
    assert message.startswith("Copying ") and "from this Mac: studio-b cannot reach" in message
    assert "Connection refused" in message or "URLError" in message

    session = Session(read_model_info(snapshot), real_hosts(targets), strategy="pipeline")
    session.probe()
    plan = session.make_plan()
    session.preflight()
    hub.clear_log()
    results = {r.node: r for r in session.copy()}
    assert results["studio-a"].sent_bytes == 0  # from the Hub
    assert results["studio-b"].sent_bytes > 0  # from this Mac
    a_part = session.report.manifests["studio-a"] if session.report else None
    assert a_part is not None
    assert weight_gets(hub) == sorted(n for n in a_part.names if n.endswith(".safetensors"))
    assert run_preflight(targets, plan, snapshot).copies_needed == ()


def test_model_source_forces_this_mac_or_the_hub(
    hub: FakeHub, snapshot: Path, targets: list[Target], tmp_path: Path
) -> None:
    report = run_preflight(targets, plan_for(snapshot), snapshot, model_source="this-mac")
    assert report.sources == {"studio-a": "this-mac", "studio-b": "this-mac"}
    assert "model_source is this-mac" in source_checks(report)["studio-a"][1]
    assert hub.served() == []  # the Hub was not even asked

    targets[1] = no_hub_for(targets[1], tmp_path)
    forced = run_preflight(targets, plan_for(snapshot), snapshot, model_source="hub")
    assert not forced.ok
    assert source_checks(forced)["studio-a"][0] == "ok"
    status, message = source_checks(forced)["studio-b"]
    assert status == "fail" and "studio-b cannot reach" in message
    assert "set the model source to auto or this-mac" in format_report(forced)

    copied = make_tiny_model(tmp_path / "not-from-hub", layers=4, shards=4)
    refused = run_preflight(targets, plan_for(copied), copied, model_source="hub")
    assert {c.node for c in refused.checks if c.status == "fail"} == {"studio-a", "studio-b"}
    assert "not from the Hugging Face cache" in source_checks(refused)["studio-a"][1]


def test_a_failed_download_falls_back_unless_forced_and_a_cancel_stops_it(
    hub: FakeHub, snapshot: Path, targets: list[Target], sshd: SSHServer
) -> None:
    report = run_preflight(targets, plan_for(snapshot), snapshot)
    node = report.copies_needed[0]
    target = next(t for t in targets if t.name == node)
    part = report.manifests[node]
    origin = hub_origin(snapshot)
    assert origin is not None
    hub.repos[REPO].gated = True  # the node has no token: 401
    with pytest.raises(Exception, match=f"{node} could not download its part"):
        fetch_or_copy(target, part, snapshot, fallback=False)
    result = fetch_or_copy(target, part, snapshot)  # auto: copied from this Mac instead
    assert result.sent_bytes == part.total_bytes

    hub.repos[REPO].gated = False
    other = next(t for t in targets if t.name != node)
    part = report.manifests[other.name]
    hub.bandwidth = part.total_bytes / 20  # ~20 s: stopped long before
    cancel = threading.Event()
    seen: list[CopyProgress] = []

    def stop_once_started(progress: CopyProgress) -> None:
        seen.append(progress)
        if progress.bytes_done > 0:
            cancel.set()

    with pytest.raises(CopyCancelled, match="stopped"):
        fetch_from_hub(other, part, snapshot, origin, stop_once_started, cancel)
    assert seen and seen[-1].bytes_done < part.total_bytes
    assert wait_nothing_left(sshd) == []  # the node's download ended with the cancel


def test_a_nodes_download_stopped_mid_file_resumes_on_the_next_run(
    hub: FakeHub, targets: list[Target], tmp_path: Path, sshd: SSHServer
) -> None:
    """The node keeps ``blobs/<etag>.incomplete`` when its download stops (as this Mac's
    does) and the next run asks the Hub only for the rest, with a range request."""
    model = make_tiny_model(
        tmp_path / "bigger", layers=2, hidden=512, heads=8, kv_heads=4, intermediate=2048,
        vocab=4096, shards=2,
    )  # fmt: skip
    repo = hub.add_folder("mlx-community/tiny-bigger", model)
    snapshot = put_in_hf_cache(
        tmp_path / "hf-home" / "hub", "mlx-community/tiny-bigger", model, sha=repo.sha
    )
    origin = hub_origin(snapshot)
    assert origin is not None
    report = run_preflight(targets, plan_for(snapshot), snapshot)
    node = report.copies_needed[0]
    target = next(t for t in targets if t.name == node)
    part = report.manifests[node]
    weights = {n: repo.files[n] for n in part.names if n.endswith(".safetensors")}
    assert max(f.size for f in weights.values()) > 4 << 20  # resumable, and worth it
    hub.bandwidth = part.total_bytes / 8  # ~8 s: stopped a quarter in, well before the end
    cancel = threading.Event()

    def stop_a_quarter_in(progress: CopyProgress) -> None:
        if progress.bytes_done > part.total_bytes // 4:
            cancel.set()

    with pytest.raises(CopyCancelled, match="stopped"):
        fetch_from_hub(target, part, snapshot, origin, stop_a_quarter_in, cancel)
    assert wait_nothing_left(sshd) == []
    blobs = Path(str(target.cache_root)) / "hub" / "models--mlx-community--tiny-bigger" / "blobs"
    partial = {
        p.name.removesuffix(".incomplete"): p.stat().st_size for p in blobs.glob("*.incomplete")
    }
    stopped = [(n, f) for n, f in weights.items() if f.sha256 in partial]
    assert len(stopped) == 1, f"kept {partial}"
    name, file = stopped[0]
    kept = partial[file.sha256]
    assert 0 < kept < file.size

    hub.bandwidth = None
    hub.wait_idle()
    hub.clear_log()
    result = fetch_from_hub(target, part, snapshot, origin)
    assert result.sent_bytes == 0  # all from the Hub, verified on the node
    gets = [s for s in hub.served(file.sha256) if s.method == "GET"]
    assert [s.range for s in gets] == [f"bytes={kept}-"]
    refetched = sum(s.body_bytes for s in gets) - (file.size - kept)
    assert refetched <= 0.05 * file.size, f"{name}: {refetched} of {file.size} bytes again"
    assert not list(blobs.glob("*.incomplete"))
