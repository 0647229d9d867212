"""One Start, from the nodes to a running job and back: the one object that knows the
order of the steps. Every kind of job is a task over a session (``core.run.tasks``:
chat, compare, link test, fine-tune; ``core.serve.task``: serve); the command line and
the window drive the same tasks.

A session is one model on some hosts: real Macs (``Host`` with a ``Target``) or the
demo's simulated Macs (no target: their ranks run on this machine, and what needs SSH,
the probe, the checks and the copy, is skipped). Each step blocks; the caller runs them
on one worker thread (the window on its bridge's serial queue, the command line on its
main thread) with ``start(until=...)``, which runs them in order, each once:

- ``probe(force=False)``: every host's facts. Facts a scanner probed within ``fresh_s``
  (60 s) are reused; the others are probed over SSH, in parallel (``force``: all).
- ``make_plan()``: the plan given (the window's Model pane made it), or the planner's on
  the probed facts for ``strategy``.
- ``preflight()``: every check with its fix, and the backend (reusing the probed facts;
  ``verify``: every model file on the nodes hashed there, not only sized).
- ``copy()``: each node's missing part of the model (and files found damaged) and what
  the task ships (its ``core.run.payload.Payload``s), every node at once.
- ``launch()``: the job's ranks start (it returns once they are starting).

A task stops at a step (``start(Step.PLAN)``), does its own part (a fine-tune checks its
fit, ``macmesh run --change-network`` changes the network then ``check_again()``), and
calls ``start()`` again to go on. On the running job: ``ask(...)`` (its tokens arrive
as ``event``s), ``cancel_answer(request)`` (that answer ends at its next token, the job
serves on), ``test_links()``, ``stop()`` (every rank ends).

``cancel()`` (any thread) ends the running step at its next boundary (a copy between
chunks; what arrived is kept and the next copy resumes); ``start()`` then runs no
further step and stops a job it started. A ``KeyboardInterrupt`` raised in a step
(Ctrl-C on the command line's main thread) cancels the session the same way, and
``copy()`` returns (raising it) only once every copy thread has stopped.

Signals, and the thread each fires on:

- ``state_changed(state, detail)``: a ``core.run.states.RunState``; ``detail`` is why, for
  NOT_READY after a failed step or check (``PreflightReport.failed_detail``) and FAILED
  (the launcher's message), else "". On the
  thread running the step, or on the job's threads for LOADING/READY/GENERATING/
  STOPPING/FAILED. Emitted with the session's lock held, so slots see them in order.
- ``checked(report)``: the ``PreflightReport``, on the preflight step's thread.
- ``copy_progress(progress)``: ``CopyProgress``, on the copying threads (one per node).
- ``event(event)``: every worker event, on the job's reader threads.
- ``step_started(step)``: a ``Step`` begins, on the thread running it (the command line
  says each step on it: ``core.cli.steps``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

from psygnal import Signal

from core.bundle import worker_python
from core.cluster.probe.facts import NodeFacts
from core.model.info import ModelInfo
from core.model.manifest import ManifestError
from core.plan.planner import Plan
from core.remote.hubfetch import fetch_or_copy
from core.remote.modelcopy import CopyResult, copy_model
from core.remote.ssh import SSHError
from core.remote.targets import Target
from core.remote.transport import CopyCancelled, ModelCopyError
from core.run import placement
from core.run.checks.preflight import run_preflight
from core.run.checks.report import PreflightReport
from core.run.errors import ClusterError
from core.run.job.launcher import Job, JobError, JobSpec
from core.run.payload import Payload
from core.run.placement import (
    demo_launch,
    in_rank_order,
    job_spec,
    model_folders,
    planned_launch,
)
from core.run.planning import Serving, failure_advice, plan_on, runnable_strategies
from core.run.states import RunState, Step
from core.worker import protocol as p
from core.worker.vocab import Backend, JobState, ModelSource, Strategy, Task

__all__ = ["FRESH_S", "ClusterError", "CopyCancelled", "Host", "Session"]

P = TypeVar("P", bound=Payload)

FRESH_S = 60.0  # facts probed this recently are not asked for again

# The job's states as the session's (STOPPED is said by stop() once every rank ended).
_FROM_JOB = {
    JobState.STARTING: RunState.LOADING,
    JobState.LOADING: RunState.LOADING,
    JobState.READY: RunState.READY,
    JobState.GENERATING: RunState.GENERATING,
    JobState.STOPPING: RunState.STOPPING,
    JobState.FAILED: RunState.FAILED,
}


@dataclass(frozen=True)
class Host:
    """One node a Start may use. ``target``: how to reach it; None for a simulated Mac
    (the demo), whose rank runs on this machine. ``facts``: what a probe found (a
    scanner's), None when not probed yet."""

    name: str
    target: Target | None = None
    facts: NodeFacts | None = None

    @property
    def simulated(self) -> bool:
        return self.target is None


def real_hosts(targets: Sequence[Target], facts: Sequence[NodeFacts] = ()) -> list[Host]:
    """A host per target, with the facts already known of it (by name)."""
    known = {f.name: f for f in facts}
    return [Host(t.name, t, known.get(t.name)) for t in targets]


def simulated_hosts(facts: Sequence[NodeFacts]) -> list[Host]:
    return [Host(f.name, None, f) for f in facts]


class Session:
    """One Start of the model ``info`` on ``hosts`` (see the module doc)."""

    state_changed = Signal(str, str)  # RunState, detail
    checked = Signal(object)  # PreflightReport
    copy_progress = Signal(object)  # CopyProgress
    event = Signal(dict)  # a worker event (a protocol.Event)
    step_started = Signal(str)  # Step: a step begins (the demo's skipped steps: none)

    def __init__(
        self,
        info: ModelInfo,
        hosts: Sequence[Host],
        *,
        plan: Plan | None = None,
        strategy: Strategy | str = Strategy.AUTO,
        backend: Backend | str = Backend.AUTO,
        job_factory: Callable[[JobSpec], Job] | None = None,
        fresh_s: float = FRESH_S,
        verify: bool = False,
        split: Sequence[int] | None = None,
        task: Task | str = Task.CHAT,
        payloads: Sequence[Payload] = (),
        check_paths: bool = True,
        model_source: ModelSource | str = ModelSource.AUTO,
        serving: Serving | None = None,
    ) -> None:
        names = [h.name for h in hosts]
        if not hosts:
            raise ClusterError("A Start needs at least one node.")
        if len(set(names)) != len(names):
            raise ClusterError("A host is listed twice.")
        if len({h.simulated for h in hosts}) > 1:
            raise ClusterError("The demo's simulated Macs and real Macs cannot run one job.")
        if plan is not None:
            if not plan.fits:
                raise ClusterError(plan.reason)
            missing = [name for name in plan.nodes_used if name not in names]
            if missing:
                raise ClusterError(f"The plan uses {', '.join(missing)}, which is not ready here.")
        self.info, self.hosts = info, list(hosts)
        self.demo = hosts[0].simulated
        self.strategy, self.backend = Strategy(strategy), Backend(backend)
        self.verify = verify  # preflight hashes every model file on the nodes
        self.split = None if split is None else tuple(split)  # a pipeline split by hand
        self.check_paths = check_paths  # preflight tries each ring link's path (issue 18)
        # What a task ships with its job (``core.run.payload``), which the session sends
        # and never reads, and what the ranks do: the payloads' one task, else ``task``.
        self.payloads = tuple(payloads)
        tasks = list(dict.fromkeys(payload.task for payload in self.payloads))
        if len(tasks) > 1:
            raise ClusterError(
                f"One job runs one task; what it was given needs {' and '.join(tasks)}."
            )
        self.task = tasks[0] if tasks else Task(task)
        self.model_source = model_source  # auto | hub | this-mac (core.run.checks.modelsource)
        # The batch and the prompt cache (None: the plan's, else the settings'): planned,
        # run by the ranks, and the API's requests at once (``JobSpec.batch``), one source.
        if serving is None:
            serving = Serving.planned(plan.options) if plan is not None else Serving.chosen()
        self.serving = serving
        self.plan: Plan | None = plan
        self.facts: dict[str, NodeFacts] = {h.name: h.facts for h in hosts if h.facts}
        self.targets: list[Target] = [h.target for h in hosts if h.target is not None]
        self.probed: tuple[str, ...] = ()  # the hosts the last probe() asked over SSH
        self.report: PreflightReport | None = None
        self.copies: list[CopyResult] = []
        self.job: Job | None = None
        self.spec: JobSpec | None = None  # what launch() runs, once worked out
        self.state = RunState.IDLE
        self.step: Step | None = None  # the step running, or the last one run
        self.completed: set[Step] = set()
        self.error = ""  # why the last step failed
        self._fresh_s = fresh_s
        self._asked: dict[str, str] = {}  # host → the Python its probe here was asked about
        self._job_factory = job_factory or Job
        self._lock = threading.RLock()
        self._cancel = threading.Event()

    def payload_of(self, kind: type[P]) -> P | None:
        """The payload of type ``kind`` the session ships, if any (typed, for front ends)."""
        return next((p for p in self.payloads if isinstance(p, kind)), None)

    # -- state -----------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        """Any thread: end the running step at its next boundary (a copy between chunks,
        what arrived is kept) and run no further step."""
        self._cancel.set()

    def _set(self, state: RunState, detail: str = "") -> None:
        with self._lock:
            if state == self.state and not detail:
                return
            self.state = state
            self.state_changed.emit(state.value, detail)

    @contextlib.contextmanager
    def _step(self, step: Step, state: RunState | None, part: bool = False) -> Iterator[None]:
        """Run one step: its state first (none for the demo's skipped steps); a failure
        becomes NOT_READY with the reason, then propagates. ``part``: one part of the step
        (a payload's copy): the step is said to begin, and done, only once."""
        if self.step is not step:
            self.step_started.emit(step.value)
        self.step = step
        if state is not None:
            self._set(state)
        try:
            yield
        except CopyCancelled:
            raise
        except Exception as error:
            self.error = str(error) if isinstance(error, ClusterError) else _describe(error)
            if not self.cancelled:
                self._set(RunState.NOT_READY, self.error)
            raise
        except BaseException:  # Ctrl-C on the step's thread: the session is cancelled
            self._cancel.set()
            raise
        if not part:
            self.completed.add(step)

    # -- the steps ---------------------------------------------------------------------

    def start(self, until: Step = Step.LAUNCH, *, reprobe: bool = False) -> bool:
        """The steps in their order, probe → plan → preflight → copy → launch, each run
        once: a step already done is not run again, so a task may stop at ``until``, do
        its own part (print the plan, check a fine-tune's fit) and call ``start()`` again
        to go on. ``reprobe``: every host probed again (e.g. after a network change).
        True once ``until`` is done (for LAUNCH: the ranks are starting); False when a
        check failed (NOT_READY, ``report``) or after ``cancel()`` (STOPPED, every rank
        this Start began ended). A step that cannot run raises (NOT_READY, ``error``)."""
        steps: dict[Step, Callable[[], object]] = {
            Step.PROBE: partial(self.probe, reprobe),
            Step.PLAN: self.make_plan,
            Step.PREFLIGHT: self.preflight,
            Step.COPY: self.copy,
            Step.LAUNCH: self.launch,
        }
        try:
            for step, run in steps.items():
                if self.cancelled:
                    break
                if step not in self.completed or (step is Step.PROBE and reprobe):
                    run()
                if self.state == RunState.NOT_READY:
                    return False
                if step is until:
                    break
        except CopyCancelled:
            pass
        except Exception:
            if not self.cancelled:
                raise
        if self.cancelled:
            self.stop()
            return False
        return True

    def check_again(self) -> bool:
        """Probe every host anew and run the checks again (after a network change);
        False when a check failed."""
        self.completed -= {Step.PROBE, Step.PREFLIGHT}
        self.report = None
        return self.start(Step.PREFLIGHT, reprobe=True)

    def probe(self, force: bool = False) -> list[NodeFacts]:
        """Every host's facts, in host order: a scanner's when fresh, else probed over
        SSH now (``force``: every host). ClusterError naming each host that could not be
        probed. The demo's simulated Macs have their facts already."""
        with self._step(Step.PROBE, None if self.demo else RunState.CHECKING):
            if not self.demo:
                stale = [h.name for h in self.hosts if force or not self._fresh(h.name)]
                by_name = {t.name: t for t in self.targets}
                asked = [by_name[name] for name in stale]
                for facts, target in zip(
                    placement.probe_targets(asked) if asked else [], asked, strict=True
                ):
                    self.facts[target.name] = facts
                    self._asked[target.name] = target.interpreter
                self.probed = tuple(stale)
                # Each node's worker Python: the one asked for, else MacMesh.app there
                # when fitting, else the Python the probe found.
                self.targets = [
                    replace(t, python=worker_python(t.python, self.facts[t.name]))
                    for t in self.targets
                ]
            return [self.facts[h.name] for h in self.hosts if h.name in self.facts]

    def make_plan(self) -> Plan:
        """The plan given, or the planner's for ``strategy`` on the probed facts (one
        host: single). ClusterError when a node's memory is unknown or it does not fit."""
        with self._step(Step.PLAN, None if self.demo else RunState.CHECKING):
            if self.plan is None:
                facts = [self.facts.get(h.name) or NodeFacts(h.name) for h in self.hosts]
                unknown = [f for f in facts if not f.memory_bytes]
                if unknown:
                    why = "; ".join(
                        f"{f.name}: {f.unknowns.get('memory_bytes', 'not reported')}"
                        for f in unknown
                    )
                    raise ClusterError(f"Cannot plan: the memory of some nodes is unknown ({why}).")
                plan = plan_on(self.info, facts, self.strategy, self.split, self.serving)
                if not plan.fits:
                    raise ClusterError(plan.reason)
                for payload in self.payloads:  # as the task runs it
                    plan = payload.planned(plan)
                self.plan = plan
            return self.plan

    def preflight(self) -> PreflightReport | None:
        """Every check for the plan on the nodes it uses, with the backend; None for the
        demo. A failed check: NOT_READY (the report says which, with its fix)."""
        if self.demo:
            self.completed.add(Step.PREFLIGHT)
            return None
        with self._step(Step.PREFLIGHT, RunState.CHECKING):
            plan = self._planned()
            used = in_rank_order(plan, self.targets)
            known = {t.name: self.facts[t.name] for t in used if self._describes(t)}
            report = run_preflight(
                used,
                plan,
                self.info.path,
                self.backend.value,
                facts=known,
                verify=self.verify,
                check_paths=self.check_paths,
                model_source=self.model_source,
            )
            self.report = report
            self.checked.emit(report)
            if not report.ok and not self.cancelled:
                self.error = report.failed_detail()  # which failed; the report has the fixes
                self._set(RunState.NOT_READY, self.error)
            return report

    def copy(self) -> list[CopyResult]:
        """Copy each node's missing part, every node at once. ``CopyCancelled`` after
        ``cancel()`` (STOPPED); ClusterError naming each node whose copy failed."""
        if self.demo:
            self.completed.add(Step.COPY)
            return []
        report = self._checked()
        for payload in self.payloads:
            self._ship(payload)
        by_name = {t.name: t for t in self.targets}
        todo = [(by_name[name], report.manifests[name]) for name in report.copies_needed]
        if not todo:
            self.completed.add(Step.COPY)
            return []
        with self._step(Step.COPY, RunState.COPYING):
            pool = ThreadPoolExecutor(len(todo), thread_name_prefix="model-copy")
            try:
                source, progress = self.info.path, self.copy_progress.emit
                from_hub = partial(fetch_or_copy, fallback=self.model_source != ModelSource.HUB)
                futures = [
                    pool.submit(
                        (
                            from_hub
                            if report.sources.get(target.name) == ModelSource.HUB
                            else copy_model
                        ),
                        target,
                        part,
                        source,
                        progress,
                        self._cancel,
                        damaged=report.damaged.get(target.name, ()),
                    )
                    for target, part in todo
                ]
                wait(futures)
            except BaseException:  # Ctrl-C here: every copy stops at its next chunk
                self._cancel.set()
                raise
            finally:
                pool.shutdown(wait=True)  # no copy goes on once the step has ended
            results, problems = [], []
            for future in futures:
                try:
                    results.append(future.result())
                except CopyCancelled:
                    continue
                except (ModelCopyError, SSHError, OSError) as exc:
                    problems.append(str(exc))
            if problems:
                raise ClusterError("\n".join(problems) + "\nThe next Start resumes the copy.")
            if self.cancelled:
                self._set(RunState.STOPPED)
                raise CopyCancelled(
                    "The copy stopped; what arrived is kept and the next Start continues "
                    "from there."
                )
            self.copies = results
            return results

    def launch(self) -> Job:
        """Start the job's ranks: returns once they are starting (``wait_ready``).
        LOADING; FAILED when they cannot be started (then raises)."""
        with self._step(Step.LAUNCH, RunState.LOADING):
            spec = self.spec or self.job_spec()
            job = self._job_factory(spec)
            job.event.connect(self._on_event)
            job.state_changed.connect(self._on_job_state)
            self.job = job
        try:
            job.start()
        except Exception as error:
            with contextlib.suppress(Exception):
                job.stop()
            self._set(RunState.FAILED, f"The ranks could not be started: {_describe(error)}")
            raise
        return job

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every rank has loaded; JobError if the job failed first."""
        self._running().wait_ready(timeout)

    def ask(
        self,
        prompt: str | None = None,
        *,
        messages: list[dict[str, Any]] | None = None,
        max_tokens: int = 128,
        chat: bool = True,
        sampling: dict[str, Any] | None = None,
        tokens: list[int] | None = None,
        tenant: str | None = None,
    ) -> str:
        """Send a request (a prompt, or a conversation's ``messages``); its id.
        ``chat``: a prompt goes through the chat template (False: as raw text).
        ``sampling``: temperature, top_p, seed, stop (None: greedy, no stop).
        ``tokens``: its ids, rendered and tokenized already (the API's); ``tenant``: whose
        prompt cache entries it may use (None: the common ones, the window's chat)."""
        job = self._running()
        if chat and sampling is None and tokens is None and tenant is None:
            # the form every front end used before sampling
            return str(job.generate(prompt, messages=messages, max_tokens=max_tokens))
        extra: dict[str, Any] = {}
        if tokens is not None:
            extra["tokens"] = tokens
        if tenant is not None:
            extra["tenant"] = tenant
        return str(
            job.generate(
                prompt,
                messages=messages,
                max_tokens=max_tokens,
                chat=chat,
                sampling=sampling,
                **extra,
            )
        )

    def cancel_answer(self, request: str) -> bool:
        """Any thread: end the answer ``request`` at its next token; its ``done`` event
        then has finish_reason "cancelled" and the job serves the next request. False
        when that answer is not running (it ended already)."""
        return bool(self._running().cancel(request))

    def test_links(self, sizes: Sequence[int] | None = None, scale: float = 1.0) -> str:
        """Measure every link the job uses (``core.run.tasks.linktest``); ``wait_link_test``
        gives the ranks' ``link_test`` event."""
        return str(self._running().link_test(sizes, scale=scale))

    def rank_nodes(self) -> list[str]:
        """The node of each rank, rank order."""
        return [rank.node for rank in self._planned().ranks]

    def wait_done(self, request: str, timeout: float | None = None) -> p.Done | p.LinkTest:
        """The request's ``done`` (or ``link_test``) event; JobError if the job ends first."""
        return self._running().wait_done(request, timeout).copy()

    def wait_answer(self, request: str, timeout: float | None = None) -> p.Done:
        """The answer ``request``'s ``done`` event, typed (``wait_done`` for an ``ask``)."""
        done = self._running().wait_done(request, timeout)
        if done["event"] != p.DONE:
            raise JobError(f"{request} is a link test, not an answer")
        return done.copy()

    def wait_link_test(self, request: str, timeout: float | None = None) -> p.LinkTest:
        """The link test ``request``'s ``link_test`` event, typed (``wait_done`` for a
        ``test_links``)."""
        tested = self._running().wait_done(request, timeout)
        if tested["event"] != p.LINK_TEST:
            raise JobError(f"{request} is an answer, not a link test")
        return tested.copy()

    def stop(self) -> None:
        """End every rank (blocking) and whatever step is left; STOPPED once the ranks
        are gone. Safe at any moment and more than once."""
        self._cancel.set()
        job = self.job
        if job is not None:
            job.stop()
        with self._lock:
            if self.state not in (RunState.STOPPED, RunState.FAILED, RunState.NOT_READY):
                self._set(RunState.STOPPED)

    # -- what runs ------------------------------------------------------------------------

    def failure_advice(self) -> str:
        """After the job failed: the model's architecture and the strategy that failed,
        and what else the planner accepts for it on these Macs (one node, tensor), if
        anything ("" before a plan)."""
        plan = self.plan
        if plan is None:
            return ""
        facts = [self.facts[h.name] for h in self.hosts if h.name in self.facts]
        try:
            runnable = runnable_strategies(self.info, facts, self.serving)
        except (ValueError, ClusterError):
            runnable = []
        nodes = len(plan.nodes_used)
        return failure_advice(self.info.architecture, plan.strategy, nodes, runnable)

    def job_spec(self, *, checked: bool = True) -> JobSpec:
        """The plan as a ``JobSpec``: local ranks for the demo, else the targets in rank
        order with each rank's model folder on its node (``checked``: only after checks
        that passed). Worked out once (a node may be asked where its cache is)."""
        plan = self._planned()
        fields = self._spec_fields(plan)
        if self.demo:
            spec = job_spec(self.info, plan, **fields)
        else:
            report = self._checked() if checked else self._reported()
            folders = model_folders(report, plan, self.targets, self.info.path)
            spec = job_spec(self.info, plan, self.targets, report.backend, folders, **fields)
        if checked:
            self.spec = spec
        return spec

    def launch_command(self) -> dict[str, Any]:
        """The equivalent ``mlx.launch`` command and hostfile for this Start, with every
        field the job runs with (the batch, the prompt cache, the payloads'): the window's
        dialog and ``macmesh run --show-launch`` both. Before the checks, the backend
        chosen from the probed facts as the checks would, and this Mac's model folder;
        after them, theirs. May ask a node where its cache is: not on a GUI thread."""
        plan = self._planned()
        fields = self._spec_fields(plan)
        if self.demo:
            return demo_launch(job_spec(self.info, plan, **fields))
        facts = list(self.facts.values())
        return planned_launch(self.info, plan, self.targets, facts, self.report, **fields)

    def _spec_fields(self, plan: Plan) -> dict[str, Any]:
        """The JobSpec's fields beyond the plan's placement: the task, the batch and prompt
        cache, and each payload's own (for the plan's targets in rank order)."""
        fields: dict[str, Any] = {"task": self.task, **self.serving.spec_fields()}
        used = [] if self.demo or not self.payloads else in_rank_order(plan, self.targets)
        for payload in self.payloads:
            fields.update(payload.spec_fields(used))
        return fields

    # -- what the task ships ----------------------------------------------------------------

    def _ship(self, payload: Payload) -> None:
        """What the task ships (``payload``) on every node the plan uses."""
        with self._step(Step.COPY, RunState.COPYING, part=True):
            payload.shipped(
                self._on_each_node(
                    in_rank_order(self._planned(), self.targets),
                    lambda t: payload.ship(t, self.copy_progress.emit, self._cancel),
                    payload.ship_failed,
                )
            )

    def _on_each_node(
        self, targets: Sequence[Target], work: Callable[[Target], str], failed: str
    ) -> dict[str, str]:
        """``work`` on every target at once: node → what it gave. ClusterError with a
        ``failed`` line (``{node}``, ``{error}``) per node where it failed."""
        with ThreadPoolExecutor(max(1, len(targets)), thread_name_prefix="node-copy") as pool:
            futures = {t.name: pool.submit(work, t) for t in targets}
        done, problems = {}, []
        for name, future in futures.items():
            try:
                done[name] = future.result()
            except (ModelCopyError, ManifestError, SSHError, OSError) as exc:
                problems.append(failed.format(node=name, error=exc))
        if problems:
            raise ClusterError("\n".join(problems))
        return done

    # -- internals ------------------------------------------------------------------------

    def _fresh(self, name: str) -> bool:
        facts = self.facts.get(name)
        return facts is not None and facts.age_s() <= self._fresh_s

    def _describes(self, target: Target) -> bool:
        """Do the facts held for ``target`` describe the Python its rank will run (so
        preflight need not probe it again)?"""
        facts = self.facts.get(target.name)
        if facts is None or not self._fresh(target.name):
            return False
        return target.interpreter in (self._asked.get(target.name), facts.python_executable)

    def _planned(self) -> Plan:
        if self.plan is None:
            raise ClusterError("Plan first.")
        return self.plan

    def _reported(self) -> PreflightReport:
        if self.report is None:
            raise ClusterError("Run the checks first.")
        return self.report

    def _checked(self) -> PreflightReport:
        report = self._reported()
        if not report.ok:
            raise ClusterError("The checks failed; nothing was started.")
        return report

    def _running(self) -> Job:
        if self.job is None:
            raise JobError("nothing was started")
        return self.job

    def _on_event(self, event: p.Event) -> None:
        """On a job's reader thread: pass the event on."""
        self.event.emit(event)

    def _on_job_state(self, state: str, message: str) -> None:
        """On a job thread: the job's state as the session's."""
        mapped = _FROM_JOB.get(JobState(state))
        if mapped == RunState.FAILED:  # the window's banner: what failed, and what runs
            advice = self.failure_advice()
            message = f"{message}\n{advice}" if advice and message else message or advice
        with self._lock:
            if mapped is None or self.state in (RunState.STOPPED, RunState.FAILED):
                return
            self._set(mapped, message if mapped == RunState.FAILED else "")


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
