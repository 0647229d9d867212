"""core.run.session.Session's pure parts: which hosts are probed (fresh facts are reused,
a forced re-probe asks again), the plan, the states a Start goes through (with a fake job,
no processes), cancel, and the one facts → planner node function."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from core.cluster.probe.facts import NodeFacts
from core.model.info import ModelInfo
from core.remote.targets import Target
from core.run import placement
from core.run.demo import DEMO_MACS, demo_facts
from core.run.errors import ClusterError
from core.run.job.launcher import JobError
from core.run.placement import job_spec
from core.run.planning import plan_on, planner_node
from core.run.session import FRESH_S, Host, Session, real_hosts, simulated_hosts
from core.run.states import RunState, Step
from core.worker.vocab import Strategy
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.helpers.header_models import synthetic_model_info

GIB = 1 << 30


@pytest.fixture
def info() -> ModelInfo:
    return synthetic_model_info(layers=8, layer_bytes=GIB // 8, shared_bytes=GIB // 8)


def mac(name: str, age_s: float = 0.0, memory: int = 64 * GIB) -> NodeFacts:
    """A probed Mac, its facts ``age_s`` seconds old."""
    facts = replace(DEMO_MACS[0], name=name, memory_bytes=memory)
    return replace(facts, probed_at=time.monotonic() - age_s)


class Probes:
    """Stands in for the SSH probe: records which targets each round asked."""

    def __init__(self) -> None:
        self.rounds: list[list[str]] = []

    def __call__(self, targets: list[Target]) -> list[NodeFacts]:
        self.rounds.append([t.name for t in targets])
        return [mac(t.name) for t in targets]


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> Probes:
    fake = Probes()
    monkeypatch.setattr(placement, "probe_targets", fake)
    return fake


def hosts(*facts: NodeFacts | str) -> list[Host]:
    return [
        Host(f, Target(f, "127.0.0.9"))
        if isinstance(f, str)
        else Host(f.name, Target(f.name, "127.0.0.9"), f)
        for f in facts
    ]


def test_fresh_facts_are_reused_stale_and_missing_ones_are_probed(
    info: ModelInfo, probes: Probes
) -> None:
    session = Session(info, hosts(mac("a"), mac("b", age_s=FRESH_S + 1), "c"))
    facts = session.probe()
    assert [f.name for f in facts] == ["a", "b", "c"]
    assert probes.rounds == [["b", "c"]] and session.probed == ("b", "c")
    assert session.probe(force=True) and probes.rounds[-1] == ["a", "b", "c"]
    assert session.state == RunState.CHECKING and Step.PROBE in session.completed


def test_the_worker_python_follows_the_probe(info: ModelInfo, probes: Probes) -> None:
    found = replace(mac("a"), python_executable="/opt/homebrew/bin/python3")
    session = Session(info, hosts(found))
    session.probe()
    assert probes.rounds == [] and session.targets[0].python == "/opt/homebrew/bin/python3"


def test_a_plan_from_the_probed_facts_or_the_reason_it_cannot_run(
    info: ModelInfo, probes: Probes
) -> None:
    session = Session(info, hosts(mac("a"), mac("b")), strategy=Strategy.PIPELINE)
    session.probe()
    plan = session.make_plan()
    assert plan.fits and plan.strategy == "pipeline" and sorted(plan.nodes_used) == ["a", "b"]
    one = Session(info, hosts(mac("a")), strategy=Strategy.PIPELINE)
    assert one.make_plan().strategy == "single"
    unknown = Session(info, hosts(replace(mac("a"), memory_bytes=None), mac("b")))
    with pytest.raises(ClusterError, match="memory of some nodes is unknown"):
        unknown.make_plan()
    assert unknown.state == RunState.NOT_READY and "unknown" in unknown.error
    small = Session(info, hosts(mac("a", memory=GIB // 4)))
    with pytest.raises(ClusterError):
        small.make_plan()


def test_what_a_session_refuses_before_it_starts(info: ModelInfo) -> None:
    with pytest.raises(ClusterError, match="twice"):
        Session(info, hosts(mac("a"), mac("a")))
    with pytest.raises(ClusterError, match="cannot run one job"):
        Session(info, [*hosts(mac("a")), *simulated_hosts(demo_facts(1))])
    plan = plan_on(info, demo_facts(2), Strategy.PIPELINE)
    with pytest.raises(ClusterError, match="Studio B"):
        Session(info, simulated_hosts(demo_facts(1)), plan=plan)


def test_a_session_runs_the_batch_its_plan_was_made_for(info: ModelInfo) -> None:
    """The window's plan counts the batch and prompt cache it shows: the job runs those,
    whatever the settings say (a plan made for 2 at once must not run 8)."""
    from core.run.planning import Serving

    plan = plan_on(info, demo_facts(2), Strategy.PIPELINE, serving=Serving(2, 64))
    session = Session(info, simulated_hosts(demo_facts(2)), plan=plan)
    assert session.serving == Serving(2, 64)
    assert Session(info, simulated_hosts(demo_facts(2))).serving == Serving.chosen()
    given = Session(info, simulated_hosts(demo_facts(2)), plan=plan, serving=Serving(1, 0))
    assert given.serving == Serving(1, 0)


def test_a_demo_start_goes_through_its_states_and_stops(info: ModelInfo) -> None:
    behaviour = FakeBehaviour(answer="Paris it is.")
    jobs: list = []
    session = Session(
        info,
        simulated_hosts(demo_facts(2)),
        strategy=Strategy.PIPELINE,
        job_factory=fake_factory(behaviour, jobs),
    )
    states: list[str] = []
    session.state_changed.connect(lambda state, _detail: states.append(state))
    assert session.start() is True
    session.wait_ready(10)
    assert session.preflight() is None and session.copy() == []  # nothing to check or copy
    [job] = jobs
    assert job.spec.targets is None and job.spec.nodes == 2  # local ranks
    assert job.spec == job_spec(info, session.plan)  # type: ignore[arg-type]
    request = session.ask("What is the capital of France?", max_tokens=3)
    assert session.wait_done(request, 10)["text"] == "Paris it is."
    session.stop()
    assert states[:2] == ["loading", "ready"] and "generating" in states
    assert states[-1] == "stopped" and session.state == RunState.STOPPED
    assert job.state.finished


def _fake_demo_session(info: ModelInfo) -> Session:
    """A pipeline on two demo Macs over the fake job ("Paris it is."), started and ready."""
    session = Session(
        info,
        simulated_hosts(demo_facts(2)),
        strategy=Strategy.PIPELINE,
        job_factory=fake_factory(FakeBehaviour(answer="Paris it is.")),
    )
    try:
        assert session.start() is True
        session.wait_ready(10)
    except BaseException:
        session.stop()
        raise
    return session


def test_wait_answer_gives_an_asks_done_event_and_refuses_a_link_test(info: ModelInfo) -> None:
    """The typed wait: an answer's ``done`` event (every field of a ``protocol.Done``); a
    link test's request is not an answer."""
    session = _fake_demo_session(info)
    try:
        request = session.ask("What is the capital of France?", max_tokens=3)
        done = session.wait_answer(request, 10)
        assert done["event"] == "done" and done["request"] == request
        assert done["text"] == "Paris it is." and done["generation_tokens"] == 3
        tested = session.test_links(scale=0.01)
        with pytest.raises(JobError, match="not an answer"):
            session.wait_answer(tested, 10)
        assert session.wait_done(tested, 10)["event"] == "link_test"
    finally:
        session.stop()


def test_wait_link_test_gives_a_link_tests_event_and_refuses_an_answer(info: ModelInfo) -> None:
    """The typed wait of the link-test task: a ``link_test`` event (its links and all_sum);
    an answer's request is not a link test."""
    session = _fake_demo_session(info)
    try:
        tested = session.wait_link_test(session.test_links(scale=0.01), 10)
        assert tested["event"] == "link_test" and [
            (link["a"], link["b"]) for link in tested["links"]
        ] == [(0, 1)]
        request = session.ask("What is the capital of France?", max_tokens=3)
        with pytest.raises(JobError, match="not a link test"):
            session.wait_link_test(request, 10)
    finally:
        session.stop()


def test_a_job_that_cannot_start_fails_the_session(info: ModelInfo) -> None:
    factory = fake_factory(FakeBehaviour(start_error=OSError("no python here")))
    session = Session(info, simulated_hosts(demo_facts(1)), job_factory=factory)
    details: list[tuple[str, str]] = []
    session.state_changed.connect(lambda state, detail: details.append((state, detail)))
    with pytest.raises(OSError):
        session.start()
    assert session.state == RunState.FAILED
    assert details[-1] == ("failed", "The ranks could not be started: OSError: no python here")


def test_cancel_before_the_next_step_starts_nothing(info: ModelInfo, probes: Probes) -> None:
    jobs: list = []
    session = Session(info, hosts(mac("a")), job_factory=fake_factory(jobs=jobs))
    session.state_changed.connect(
        lambda state, _d: session.cancel() if state == "checking" else None
    )
    assert session.start() is False
    assert session.state == RunState.STOPPED and jobs == [] and session.step == Step.PROBE


def test_state_changes_are_emitted_in_order_from_any_thread(info: ModelInfo) -> None:
    session = Session(info, simulated_hosts(demo_facts(1)), job_factory=fake_factory())
    seen: list[str] = []
    session.state_changed.connect(lambda state, _d: seen.append(state))
    worker = threading.Thread(target=session.start)
    worker.start()
    worker.join(10)
    session.wait_ready(10)
    session.stop()
    assert seen[0] == "loading" and seen[-1] == "stopped"
    assert seen.count("stopped") == 1


def test_one_function_turns_facts_into_a_planner_node() -> None:
    node = planner_node(replace(DEMO_MACS[1], wired_limit_mb=57344))
    assert (node.name, node.memory_bytes, node.wired_limit_mb) == ("Studio B", 64 * GIB, 57344)
    assert node.chip == "Apple M4 Max" and node.rdma is True
    unknown = planner_node(NodeFacts("mini"))
    assert (unknown.memory_bytes, unknown.rdma) == (0, None)  # RDMA unknown, not off
    off = planner_node(replace(DEMO_MACS[0], rdma_ctl="disabled"))
    assert off.rdma is False


def test_the_demo_spec_and_the_cluster_spec_come_from_one_function(
    info: ModelInfo, tmp_path: Path
) -> None:
    plan = plan_on(info, demo_facts(2), Strategy.PIPELINE)
    local = job_spec(info, plan)
    assert local.targets is None and local.nodes == 2 and local.split == list(plan.split or ())
    assert local.rank_names == list(plan.nodes_used)  # the demo's ranks, named in messages
    targets = [Target(name, "127.0.0.9") for name in reversed(plan.nodes_used)]
    placed = job_spec(info, plan, targets)
    assert [t.name for t in placed.targets or []] == list(plan.nodes_used)  # rank order
    assert placed.split == local.split and placed.strategy == local.strategy == "pipeline"
    single = job_spec(info, plan_on(info, demo_facts(1)))
    assert single.nodes == 1 and single.strategy is Strategy.SINGLE and single.split is None
    assert real_hosts(targets, [DEMO_MACS[0]])[0].facts is None  # facts go by name


def test_start_runs_the_steps_in_order_once_each_up_to_the_one_asked(
    info: ModelInfo, probes: Probes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one sequencer: a task stops after a step, does its part, and goes on; no step
    runs twice, and each is said as it begins (the command line prints on it)."""
    from core.run import session as session_module

    checks: list[str] = []

    def fake_preflight(targets, plan, *args, **kwargs):  # type: ignore[no-untyped-def]
        checks.append(",".join(t.name for t in targets))
        from core.run.checks.backend_choice import BackendChoice
        from core.run.checks.report import PreflightReport

        return PreflightReport((), BackendChoice("ring", "ring", "test"), ())

    monkeypatch.setattr(session_module, "run_preflight", fake_preflight)
    jobs: list = []
    here = Host("a", Target("a", "127.0.0.1", local=True), mac("a", age_s=FRESH_S + 1))
    session = Session(info, [here], job_factory=fake_factory(jobs=jobs))
    began: list[str] = []
    session.step_started.connect(began.append)
    assert session.start(Step.PLAN) is True
    assert began == ["probe", "plan"] and session.plan is not None and jobs == []
    assert session.start(Step.PREFLIGHT) is True and checks == ["a"] and jobs == []
    assert session.start() is True and len(jobs) == 1  # the copy had nothing to do
    assert began == ["probe", "plan", "preflight", "launch"]  # a copy with nothing to copy
    assert Step.COPY in session.completed
    assert probes.rounds == [["a"]] and checks == ["a"]  # nothing ran twice
    assert session.check_again() is True  # after a network change: probe and check anew
    assert probes.rounds == [["a"], ["a"]] and checks == ["a", "a"] and len(jobs) == 1
    session.stop()


def test_the_run_plan_counts_the_kv_caches_of_the_ranks_whole_batch(info: ModelInfo) -> None:
    from core.plan.memory import CPU_FLOAT_BYTES, kv_bytes_per_layer
    from core.worker.protocol import DEFAULT_BATCH

    facts = demo_facts(2)
    plan = plan_on(info, facts, Strategy.PIPELINE)
    assert plan.options.batch == DEFAULT_BATCH > 1
    one = kv_bytes_per_layer(info, replace(plan.options, batch=1))
    # A CPU node keeps its KV cache in float32 (the planner counts it so).
    cpu = {f.name for f in facts if planner_node(f).cpu}
    wider = CPU_FLOAT_BYTES // min(info.dtype_bytes, CPU_FLOAT_BYTES)
    for rank in plan.ranks:
        layers = rank.layer_end - rank.layer_start
        width = wider if rank.node in cpu else 1
        assert rank.kv_cache_bytes == DEFAULT_BATCH * one * layers * width
