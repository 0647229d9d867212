"""core.run.session through a real sshd: two simulated Thunderbolt 4 Mac minis
(mini-tb4: no RDMA, so auto runs ring over their addresses), each with its own cache.
Fresh facts a scanner holds are reused (no SSH probe, and the checks do not probe again);
a forced re-probe probes."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.plan.memory import GIB, Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.remote.modelcheck import check, remote_model_dir
from core.remote.modelcopy import CopyProgress
from core.remote.targets import Target
from core.run import placement
from core.run.checks import preflight
from core.run.demo import demo_facts
from core.run.errors import ClusterError
from core.run.job.launcher import JobSpec
from core.run.placement import demo_launch, job_spec, planned_launch
from core.run.planning import plan_on
from core.run.session import CopyCancelled, Host, Session, real_hosts
from core.run.states import RunState
from tests.fixtures.macos.make_bin import make_host_bins
from tests.helpers.copying import StopMidCopy
from tests.helpers.jobs import run_job
from tests.helpers.remote import sshd_targets, wait_nothing_left
from tests.helpers.scanner import hand_added_scanner
from tests.helpers.sshd import SSHServer
from tests.helpers.tiny_models import make_tiny_model

pytestmark = pytest.mark.slow
HOSTS = {"127.0.0.2": "mini-g", "127.0.0.3": "mini-h"}


@pytest.fixture(scope="module")
def sshd_addresses() -> tuple[str, ...]:
    return tuple(HOSTS)


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_host_bins("mini-tb4", HOSTS, tmp_path_factory.mktemp("tb4-bins"))


@pytest.fixture(autouse=True)
def _hash_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "hash-cache"))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama in four weight files, plus 16 MB of tokenizer-like data every rank
    needs: big enough to stop a copy halfway."""
    folder = make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", layers=4, shards=4)
    (folder / "vocab.bin").write_bytes(os.urandom(16 << 20))
    return folder


@pytest.fixture
def targets(sshd: SSHServer, tmp_path: Path) -> list[Target]:
    return sshd_targets(sshd, tmp_path, HOSTS)


def pipeline(model: Path) -> Plan:
    nodes = [Node(name, 32 * GIB) for name in HOSTS.values()]
    return make_plan(read_model_info(model), nodes, options=PlanOptions(strategy="pipeline"))


def test_checks_copy_with_progress_then_the_job_runs_on_both_macs(
    targets: list[Target], model: Path, sshd: SSHServer
) -> None:
    info = read_model_info(model)
    session = Session(info, real_hosts(targets), plan=pipeline(model))
    report = session.preflight()
    assert report is not None and report.ok, [c.message for c in report.failures]
    assert report.backend.name == "ring"  # Thunderbolt 4: no RDMA, said plainly
    assert report.copies_needed == ("mini-g", "mini-h")
    events: list[CopyProgress] = []
    lock = threading.Lock()

    def record(progress: CopyProgress) -> None:
        with lock:
            events.append(progress)

    session.copy_progress.connect(record)
    results = session.copy()
    assert sorted(r.node for r in results) == ["mini-g", "mini-h"]
    last = {event.node: event for event in events}
    assert set(last) == {"mini-g", "mini-h"}
    for node, event in last.items():
        assert event.phase == "verified" and event.eta_s == 0.0
        assert event.bytes_done == event.bytes_total == report.manifests[node].total_bytes
    for node in ("mini-g", "mini-h"):  # bytes done never go back
        done = [e.bytes_done for e in events if e.node == node]
        assert done == sorted(done)
    spec = session.job_spec()
    assert session.plan is not None
    assert [t.name for t in spec.targets or []] == list(session.plan.nodes_used)
    assert all(str(folder).startswith(str(Path(t.cache_root or "/"))) for folder, t in
               zip(spec.rank_models or [], spec.targets or [], strict=True))  # fmt: skip
    remote = run_job(spec, max_tokens=6)
    local = run_job(JobSpec(model=model, strategy="pipeline", nodes=2), max_tokens=6)
    assert remote.tokens == local.tokens and len(remote.tokens) == 6
    assert wait_nothing_left(sshd) == []
    again = Session(info, real_hosts(targets), plan=session.plan).preflight()
    assert again is not None and again.ok and again.copies_needed == ()


def test_stop_during_the_copy_keeps_what_arrived_and_the_next_copy_resumes(
    targets: list[Target], model: Path, sshd: SSHServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = read_model_info(model)
    session = Session(info, real_hosts(targets), plan=pipeline(model))
    report = session.preflight()
    assert report is not None
    node = targets[0]
    staging = remote_model_dir(node, report.manifests[node.name]) + ".partial"
    stop_early = StopMidCopy(monkeypatch, staging, session.cancel, 1 / 5, node=node.name)

    session.copy_progress.connect(stop_early)
    with pytest.raises(CopyCancelled, match="continues from there"):
        session.copy()
    assert session.state == RunState.STOPPED
    assert wait_nothing_left(sshd) == []
    assert check(node, report.manifests[node.name]).status == "missing"
    partial = Path(f"{check(node, report.manifests[node.name]).folder}.partial")
    arrived = sum(f.stat().st_size for f in partial.rglob("*") if f.is_file())
    assert 0 < arrived == stop_early.arrived  # nothing was sent after the cancel
    resumed = Session(info, real_hosts(targets), plan=session.plan)
    resumed.preflight()
    results = {r.node: r for r in resumed.copy()}
    total = report.manifests[node.name].total_bytes
    assert results[node.name].sent_bytes < total - arrived + 0.05 * arrived
    assert check(node, report.manifests[node.name]).status == "present"


def test_a_failed_check_starts_nothing(targets: list[Target], model: Path) -> None:
    import dataclasses

    gone = dataclasses.replace(targets[1], host="127.0.0.9")  # nothing listens there
    session = Session(read_model_info(model), real_hosts([targets[0], gone]), plan=pipeline(model))
    report = session.preflight()
    assert report is not None and not report.ok and session.state == RunState.NOT_READY
    [failure] = [c for c in report.failures if c.name == "ssh"]
    assert failure.node == "mini-h" and "127.0.0.9" in failure.message and failure.fix
    with pytest.raises(ClusterError, match="checks failed"):
        session.copy()
    with pytest.raises(ClusterError, match="checks failed"):
        session.job_spec()


def test_a_plan_on_macs_that_are_not_given_is_refused(targets: list[Target], model: Path):
    with pytest.raises(ClusterError, match="mini-h"):
        Session(read_model_info(model), real_hosts(targets[:1]), plan=pipeline(model))


def test_the_equivalent_mlx_launch_for_real_macs_and_for_the_demo(
    targets: list[Target], model: Path
) -> None:
    info = read_model_info(model)
    plan = pipeline(model)
    from core.cluster.probe.facts import NodeFacts

    facts = [NodeFacts(name) for name in HOSTS.values()]  # nothing known: no RDMA
    launch = planned_launch(info, plan, targets, facts)
    assert launch["backend"] == "ring" and not launch["local"]
    assert launch["command"][:3] == ["mlx.launch", "--hostfile", "hostfile.json"]
    hosts = launch["hostfile"]["hosts"]
    assert [h["ssh"] for h in hosts] == [t.host for t in targets]
    assert [h["ips"] for h in hosts] == [[t.host] for t in targets]
    assert "--split" in launch["command"]
    demo_plan = plan_on(info, demo_facts(3), "pipeline")
    demo = demo_launch(job_spec(info, demo_plan))
    assert demo["command"][:5] == ["mlx.launch", "-n", "3", "--backend", "ring"]
    assert demo["hostfile"] is None and demo["local"]
    assert demo["command"][demo["command"].index("--") + 1 :][:2] == ["-m", "core.worker"]


def test_fresh_scanner_facts_are_reused_and_a_forced_reprobe_probes(
    sshd: SSHServer, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_lines())
    names = [f"{address}:{sshd.port}" for address in HOSTS]
    with hand_added_scanner(sshd, tmp_path, known) as scanner:
        for name in names:
            scanner.add_host(name)
        assert scanner.wait_idle(60)
        hosts = []
        for name in names:
            node = scanner.registry.get(name)
            assert node is not None and node.facts is not None, node
            root = str(tmp_path / "nodes" / name)
            hosts.append(Host(name, replace(scanner.target(name), cache_root=root), node.facts))
    scanned = {h.name: h.facts for h in hosts}
    probes: list[list[str]] = []  # the hosts each SSH probe round asked
    checked: list[str] = []  # the hosts the checks probed again
    real_probe, real_check_probe = placement.probe_targets, preflight.probe_over_ssh

    def spy(targets):
        probes.append([t.name for t in targets])
        return real_probe(targets)

    def check_spy(connection, name, **options):
        checked.append(name)
        return real_check_probe(connection, name, **options)

    monkeypatch.setattr(placement, "probe_targets", spy)
    monkeypatch.setattr(preflight, "probe_over_ssh", check_spy)
    info = read_model_info(model)
    session = Session(info, hosts, strategy="pipeline")
    assert [f.name for f in session.probe()] == names
    assert probes == [] and session.probed == ()  # the scanner's facts, not asked again
    plan = session.make_plan()
    assert plan.fits and sorted(plan.nodes_used) == sorted(names)
    report = session.preflight()
    assert report is not None and report.ok, [c.message for c in report.failures]
    assert checked == []  # nor probed again by the checks
    again = session.probe(force=True)
    assert probes == [names] and session.probed == tuple(names)
    assert all(f.probed_at > scanned[f.name].probed_at for f in again)
    assert wait_nothing_left(sshd) == []
