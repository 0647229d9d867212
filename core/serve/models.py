"""The models one server serves (issue 37): each loaded model is its own MLX job (its own
session, ranks and, on the demo, ring ports) with its own line of answers; the others are
loadable and start on their first request.

Runs on the server's event loop; every blocking step (planning, launching, waiting for
the ranks, stopping them) runs on a thread, so loading or unloading one model never
holds the loop another model's streams are sent from. Loads run one at a time (the fit
check sees what is loaded); an unload ends only its own model's answers.

- ``ensure(name)``: the model loaded (started now and waited for when it is not).
- ``unload(name)``: its answers ended, its ranks stopped.
- keep-alive: an idle model unloads ``keep_alive_s`` after its last request (default
  30 min; a request's own, Ollama's ``keep_alive``; 0: once its requests end).
- memory short: ``core.plan.placement_many.room_for`` picks the idle models to unload,
  least recently used first, never one with requests running; a load that cannot fit
  is refused in one line and the loaded models keep serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from core.plan.placement_many import room_for
from core.plan.planner import Plan
from core.run.errors import ClusterError
from core.run.job.launcher import JobError
from core.run.session import Session
from core.run.states import RunState, Step
from core.serve.answers import Answerer
from core.serve.app import Served
from core.serve.errors import APIError
from core.serve.keep_alive import DEFAULT_KEEP_ALIVE_S as DEFAULT_KEEP_ALIVE_S
from core.serve.keep_alive import FOREVER as FOREVER
from core.serve.keys import Gate
from core.serve.model_metrics import ModelFigures
from core.serve.prompts import PromptMaker
from core.worker import protocol as p

REAP_EVERY_S = 1.0
LOAD_WITHIN_S = 600.0  # a model's ranks not ready by then: the load failed


class ModelState(StrEnum):
    UNLOADED = "unloaded"  # loadable: starts on its first request
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADING = "unloading"


@dataclass
class ModelSpec:
    """A model the server may serve: its name (the API's ``model``), how to make its
    session (not started), and whether it loads when the server starts."""

    name: str
    make_session: Callable[[], Session]
    load_at_start: bool = True
    keep_alive_s: float = DEFAULT_KEEP_ALIVE_S
    # The window's Run-pane job (``adopt``): loaded by its owner, never unloaded here
    # (nor to make room); its owner's Stop ends it.
    pinned: bool = False


@dataclass
class ModelEntry:
    spec: ModelSpec
    state: ModelState = ModelState.UNLOADED
    session: Session | None = None
    served: Served | None = None
    plan: Plan | None = None
    loaded_at: float = 0.0
    last_used: float = 0.0
    keep_alive_s: float = DEFAULT_KEEP_ALIVE_S
    in_flight: int = 0  # requests through the front now (before and while answered)
    error: str = ""  # why its last load failed
    changing: asyncio.Future[None] | None = None  # a load or unload under way
    figures: ModelFigures | None = None  # its metrics and records while loaded
    _failed_watch: Callable[[str, str], None] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def busy(self) -> bool:
        answers = self.served.answers if self.served is not None else None
        waiting = answers.serving + answers.depth if answers is not None else 0
        return self.in_flight > 0 or waiting > 0

    def idle_s(self, now: float) -> float:
        return 0.0 if self.busy or not self.last_used else max(0.0, now - self.last_used)

    def nodes(self) -> list[str]:
        return list(dict.fromkeys(self.plan.nodes_used)) if self.plan is not None else []

    def memory_bytes(self) -> int:
        return sum(rank.need_bytes for rank in self.plan.ranks) if self.plan is not None else 0


@dataclass(frozen=True)
class ServeSettings:
    """What every model's line of answers shares: who may ask, the log, the queue."""

    gate: Gate
    log: Callable[[str], None]
    max_waiting: int
    shared_prompt_cache: bool = False
    metrics_without_key: bool = False  # GET /metrics open to anyone who reaches the port


class ModelRegistry:
    """The loaded and loadable models (see the module doc); start it on the loop."""

    def __init__(self, specs: list[ModelSpec], settings: ServeSettings) -> None:
        names = [spec.name for spec in specs]
        if not specs or len(set(names)) != len(names):
            raise ValueError("name each model once")
        self.settings = settings
        self.entries = {
            spec.name: ModelEntry(spec, keep_alive_s=spec.keep_alive_s) for spec in specs
        }
        self._load_lock: asyncio.Lock | None = None
        self._reaper: asyncio.Task[None] | None = None
        self.closing = False

    # -- lookups -------------------------------------------------------------------------

    def find(self, name: Any) -> ModelEntry | None:
        """The model a request names (Ollama's ``NAME:latest`` too)."""
        if not isinstance(name, str):
            return None
        entry = self.entries.get(name)
        if entry is None and name.endswith(":latest"):
            entry = self.entries.get(name[: -len(":latest")])
        return entry

    def names(self) -> list[str]:
        return list(self.entries)

    def loaded(self) -> list[ModelEntry]:
        return [e for e in self.entries.values() if e.state is ModelState.LOADED]

    def adopt(self, name: str, session: Session, served: Served) -> ModelEntry:
        """Before ``start``: the pinned model ``name`` served by a job its owner started
        (the window's Run pane): loaded from the start, its answers started with the
        registry, never unloaded here and its session never stopped here."""
        entry = self.entries[name]
        assert entry.spec.pinned, "adopt a pinned model only"
        now = time.monotonic()
        entry.state, entry.session, entry.served, entry.plan = (
            ModelState.LOADED,
            session,
            served,
            session.plan,
        )
        entry.loaded_at = entry.last_used = now
        entry.keep_alive_s = FOREVER
        return entry

    # -- the loop's side -------------------------------------------------------------------

    async def start(self) -> None:
        self._load_lock = asyncio.Lock()
        for entry in self.entries.values():  # the adopted ones
            if entry.served is not None:
                await entry.served.answers.start()
        self._reaper = asyncio.create_task(self._reap(), name="macmesh-keep-alive")

    async def close(self) -> None:
        """Every model's answers ended and its ranks stopped (the server stops)."""
        self.closing = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await asyncio.gather(
            *(self._unload(e, "the server is stopping") for e in self.entries.values()),
            return_exceptions=True,
        )

    async def load_initial(self) -> list[str]:
        """The models that load at start, one after another; a line per failure."""
        failures = []
        for entry in self.entries.values():
            if entry.spec.load_at_start:
                try:
                    await self.ensure(entry.name)
                except APIError as error:
                    failures.append(error.message)
        return failures

    async def ensure(self, name: str) -> ModelEntry:
        """The model loaded: at once when it is, else after its load (APIError 503 with
        one line when it cannot load; the other models serve on meanwhile)."""
        entry = self.find(name)
        if entry is None:
            raise APIError(404, f"No model '{name[:200]}' here.", code="model_not_found")
        while True:
            if self.closing:
                raise APIError(503, "The server is stopping.", kind="server_error")
            if entry.state is ModelState.LOADED:
                return entry
            if entry.changing is not None:
                with contextlib.suppress(APIError):
                    await asyncio.shield(entry.changing)
                if entry.state is ModelState.UNLOADED and entry.error:
                    raise APIError(503, entry.error, kind="server_error")
                continue
            entry.changing = asyncio.get_running_loop().create_future()
            try:
                await self._load(entry)
            finally:
                done, entry.changing = entry.changing, None
                if not done.done():
                    done.set_result(None)
            if entry.error:  # it failed (else it is loaded: the loop's top returns it)
                raise APIError(503, entry.error, kind="server_error")

    async def unload(self, name: str, why: str = "unloaded through the API") -> bool:
        """Unload the model now (its running answers end with a 503); False when it
        was not loaded."""
        entry = self.find(name)
        if entry is None:
            raise APIError(404, f"No model '{name[:200]}' here.", code="model_not_found")
        if entry.spec.pinned:
            raise APIError(
                409,
                f"{entry.name} is the window's running job: Stop in the Run pane ends it.",
                code="model_pinned",
            )
        if entry.changing is not None:
            with contextlib.suppress(APIError):
                await asyncio.shield(entry.changing)
        if entry.state is not ModelState.LOADED:
            return False
        await self._unload(entry, why)
        return True

    def add(self, spec: ModelSpec) -> ModelEntry:
        """A model more, loadable (the window's drop); ValueError if its name is taken."""
        if spec.name in self.entries:
            raise ValueError(f"{spec.name} is served already")
        entry = self.entries[spec.name] = ModelEntry(spec, keep_alive_s=spec.keep_alive_s)
        return entry

    async def fits_beside(self, spec: ModelSpec) -> str:
        """Whether ``spec`` fits beside the loaded models as they are (nothing unloaded):
        "" when it does, else why not, in one line. Plans it on a thread."""
        try:
            session = await asyncio.to_thread(self._planned, ModelEntry(spec))
        except (ClusterError, OSError, ValueError) as error:
            return _one_line(str(error))
        assert session.plan is not None
        loaded = [
            (e.name, e.plan, e.last_used, True)  # as they are: none unloads for it
            for e in self.entries.values()
            if e.plan is not None and e.name != spec.name
        ]
        _unload, why = room_for((spec.name, session.plan), loaded)
        return _one_line(why)

    @contextlib.contextmanager
    def using(self, entry: ModelEntry, keep_alive_s: float | None = None) -> Iterator[None]:
        """Around one request to ``entry``: it counts as running; its end is the model's
        last use, and ``keep_alive_s`` (a request's own) its keep-alive from then."""
        entry.in_flight += 1
        try:
            yield
        finally:
            entry.in_flight -= 1
            entry.last_used = time.monotonic()
            if keep_alive_s is not None and not entry.spec.pinned:
                entry.keep_alive_s = keep_alive_s

    def keep_alive(self, entry: ModelEntry, seconds: float) -> None:
        if not entry.spec.pinned:
            entry.keep_alive_s = seconds
        entry.last_used = time.monotonic()

    # -- loading and unloading -------------------------------------------------------------

    async def _load(self, entry: ModelEntry) -> None:
        assert self._load_lock is not None, "start() the registry on the server's loop"
        log = self.settings.log
        async with self._load_lock:
            entry.state, entry.error = ModelState.LOADING, ""
            started = time.monotonic()
            log(f"model {entry.name}: loading")
            session: Session | None = None
            try:
                session = await asyncio.to_thread(self._planned, entry)
                await self._make_room(entry, session)
                await asyncio.to_thread(self._launched, entry, session)
            except (ClusterError, JobError, OSError, ValueError, APIError) as error:
                message = error.message if isinstance(error, APIError) else str(error)
                entry.error = f"{entry.name} could not be loaded: {_one_line(message)}"
                entry.state, entry.session, entry.plan = ModelState.UNLOADED, None, None
                log(f"model {entry.name}: {entry.error}")
                if session is not None:
                    await asyncio.to_thread(session.stop)
                return
            served = self._served(entry, session)
            await served.answers.start()
            if served.prompts is not None:
                served.prompts.start()
            entry.session, entry.served = session, served
            entry.state, entry.loaded_at = ModelState.LOADED, time.monotonic()
            entry.last_used = entry.loaded_at
            self._watch_failure(entry, session)
            took = time.monotonic() - started
            log(f"model {entry.name}: loaded in {took:.1f} s on {', '.join(entry.nodes())}")

    def _planned(self, entry: ModelEntry) -> Session:
        """On a thread: the model's session, planned (probed, on real Macs)."""
        session = entry.spec.make_session()
        if not session.start(Step.PLAN) or session.plan is None:
            raise ClusterError(session.error or "no plan")
        if not session.plan.fits:
            raise ClusterError(session.plan.reason)
        entry.plan = session.plan
        return session

    def _launched(self, entry: ModelEntry, session: Session) -> None:
        """On a thread: the checks, the copy, the ranks started and every rank loaded;
        each step and state in the server log."""

        def said(state: str, detail: str) -> None:
            if state in (RunState.CHECKING, RunState.COPYING):
                self.settings.log(f"model {entry.name}: {state}")

        def event(event: p.Event) -> None:
            if event["event"] == p.LOADING and event["rank"] == 0:
                self.settings.log(f"model {entry.name}: loading ({event.get('stage', '')})")

        session.state_changed.connect(said)
        session.event.connect(event)
        try:
            if not session.start():
                raise ClusterError(session.error or "the checks failed: nothing was started")
            session.wait_ready(LOAD_WITHIN_S)
        finally:
            session.state_changed.disconnect(said)
            session.event.disconnect(event)

    async def _make_room(self, entry: ModelEntry, session: Session) -> None:
        """Unload the idle models, least recently used first, the new one needs room
        from; APIError (one line) when it cannot fit beside the busy ones."""
        assert session.plan is not None
        loaded = [
            (e.name, e.plan, e.last_used, e.busy or e.spec.pinned)
            for e in self.entries.values()
            if e is not entry and e.plan is not None and e.state is not ModelState.UNLOADED
        ]
        unload, why = room_for((entry.name, session.plan), loaded)
        if why:
            raise APIError(503, why, kind="server_error")
        for name in unload:
            victim = self.entries[name]
            await self._unload(victim, f"least recently used, to make room for {entry.name}")

    async def _unload(self, entry: ModelEntry, why: str) -> None:
        if entry.state is not ModelState.LOADED:
            return
        entry.state = ModelState.UNLOADING
        self.settings.log(f"model {entry.name}: unloading ({why})")
        session, served = entry.session, entry.served
        if session is not None and not entry.spec.pinned:  # a pinned job's owner stops it
            if entry._failed_watch is not None:
                session.state_changed.disconnect(entry._failed_watch)
            await asyncio.to_thread(session.stop)  # its answers end: "the cluster stopped"
        if served is not None:
            await served.answers.close()
        if entry.figures is not None:  # its last answers kept: off the loop
            await asyncio.to_thread(entry.figures.close)
        entry.session = entry.served = entry.plan = entry.figures = None
        entry.in_flight, entry.keep_alive_s = 0, entry.spec.keep_alive_s
        entry.state = ModelState.UNLOADED
        self.settings.log(f"model {entry.name}: unloaded, its ranks ended")

    def _watch_failure(self, entry: ModelEntry, session: Session) -> None:
        """A loaded model whose job fails (a rank lost) is unloaded in one line; the
        others serve on."""
        loop = asyncio.get_running_loop()

        def on_state(state: str, detail: str) -> None:
            if state == RunState.FAILED:
                line = _one_line(detail) or "its job failed"
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._failed, entry, line)

        entry._failed_watch = on_state
        session.state_changed.connect(on_state)

    def _failed(self, entry: ModelEntry, line: str) -> None:
        entry.error = f"{entry.name} failed: {line}"
        task = asyncio.ensure_future(self._unload(entry, f"it failed: {line}"))
        task.add_done_callback(lambda _t: None)

    async def _reap(self) -> None:
        """Unload each idle model whose keep-alive has passed."""
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            now = time.monotonic()
            for entry in list(self.entries.values()):
                if entry.state is not ModelState.LOADED or entry.busy:
                    continue
                if now - entry.last_used >= entry.keep_alive_s:
                    await self._unload(entry, f"idle for {now - entry.last_used:.0f} s")

    def _served(self, entry: ModelEntry, session: Session) -> Served:
        settings, info = self.settings, session.info
        spec = session.spec or session.job_spec()
        name = entry.name
        entry.figures = figures = ModelFigures(session)
        answers = Answerer(session, settings.max_waiting, figures.sent, spec.batch)
        return Served(
            name,
            info.context_length,
            settings.gate,
            answers,
            lambda line: settings.log(f"{line} [{name}]"),
            figures.follow(answers),
            prompts=PromptMaker(_folder(session), info.context_length),
            shared_prompt_cache=settings.shared_prompt_cache,
        )


def _folder(session: Session) -> Path | None:
    folder = getattr(session.info, "path", None)
    return folder if isinstance(folder, Path) and folder.is_dir() else None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:400]
