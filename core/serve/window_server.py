"""The window's API with several models (issue 37): the Run pane's running job is the
first model, already loaded and pinned (its own routes, records, metrics and the window's
chat and telemetry exactly as ``core.serve.server.APIServer`` serves it alone); models
dropped on the Run pane's models panel are added beside it, each its own job on the same
Macs (``core.serve.models``: planned first, loaded only where they fit, unloaded in one
click). Requests route by their ``model`` field (``core.serve.multiserver``); every other
path (``/metrics``) is the job's.

The job is never stopped here: the Run pane's Stop ends it (and this server with it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.model.info import read_model_info
from core.run.errors import ClusterError
from core.run.measure.telemetry import Telemetry
from core.run.session import Session
from core.serve.keys import Gate
from core.serve.models import FOREVER, ModelRegistry, ModelSpec, ServeSettings
from core.serve.models_control import ServedModels
from core.serve.records import ApiRecords
from core.serve.routes import create_app
from core.serve.serve_many import ManyServer
from core.serve.server import APIServer, ServerOptions
from core.worker.vocab import Strategy


class WindowServer:
    """``session``'s model (pinned) and the models added beside it, at ``options``'
    address; the same face as ``APIServer`` to ``core.serve.service.ApiService``."""

    def __init__(
        self,
        session: Session,
        model: str,
        context: int | None,
        gate: Gate,
        options: ServerOptions,
        log: Callable[[str], None] = lambda line: None,
        on_sent: Callable[[str, float, str, str], None] | None = None,
        telemetry: Telemetry | None = None,
        on_calls: Callable[[str, list[dict[str, Any]]], None] | None = None,
    ) -> None:
        # The job alone as APIServer serves it (not started: its answers, records and
        # metrics; it also refuses an open gate off loopback).
        self.job = APIServer(
            session, model, context, gate, options, log, on_sent, telemetry, on_calls
        )
        self.session, self._telemetry = session, telemetry
        self.answers, self.options = self.job.answers, self.job.options
        spec = ModelSpec(model, _not_reloadable(model), False, FOREVER, pinned=True)
        settings = ServeSettings(gate, log, options.max_waiting, options.shared_prompt_cache)
        self.registry = ModelRegistry([spec], settings)
        self.registry.adopt(model, session, self.job.served)
        self.many = ManyServer(
            self.registry, options.host, options.port, fallback=create_app(self.job.served)
        )
        self.models = ServedModels(self.many, self.session_for)

    @property
    def port(self) -> int:
        return self.many.port

    @property
    def address(self) -> str:
        return self.many.address

    @property
    def running(self) -> bool:
        return self.many.running

    def session_for(self, folder: Path) -> Callable[[], Session]:
        """A model added from ``folder``: its own job on the job's Macs."""
        info = read_model_info(folder)
        job = self.session
        strategy = Strategy.PIPELINE if job.demo else Strategy.AUTO
        return lambda: Session(
            info,
            job.hosts,
            strategy=strategy,
            backend=job.backend,
            model_source=job.model_source,
        )

    def start(self) -> None:
        """Bind and serve (ServeError in one line when it cannot)."""
        served = self.job.served
        if served.prompts is not None:
            served.prompts.start()
        self.job.records = ApiRecords(self.session, self.job.metrics.answered, self._telemetry)
        try:
            self.many.start()  # the job is loaded already: nothing more loads at start
        except BaseException:
            self._close_records()
            raise

    def stop(self) -> None:
        """Every added model's answers and ranks ended, the job's answers ended (its
        ranks are the Run pane's), the server stopped."""
        self.many.stop()
        self._close_records()

    def _close_records(self) -> None:
        if self.job.records is not None:
            self.job.records.close()
            self.job.records = None


def _not_reloadable(model: str) -> Callable[[], Session]:
    def make() -> Session:
        raise ClusterError(f"{model} is the Run pane's job: Start it there.")

    return make
