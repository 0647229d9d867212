"""The window's API: on or off, loopback or shared on the network, its keys, and the
server following the job (serving while a job is up, stopped with it).

Qt-free; the window calls the blocking methods (``attach``, ``detach``, ``apply``) off
its GUI thread and listens to ``changed`` (any thread) through its bridge. The settings
are a file the core owns (``api.json`` in the config folder, docs/design.md, rule 6). Light to
import (the window builds it before its first paint): the server loads when it starts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from psygnal import Signal

from core import paths
from core.jsonfile import FileProblem, read_json, write_json_atomic
from core.serve.keys import Gate, KeyInfo, KeyStore

if TYPE_CHECKING:  # the server (starlette, uvicorn, the session's numpy) loads when it starts
    from core.run.measure.telemetry import Telemetry
    from core.run.session import Session
    from core.serve.models_control import ServedModels
    from core.serve.window_server import WindowServer

log = logging.getLogger(__name__)

SETTINGS_NAME = "api.json"
SHARED_HOST = "0.0.0.0"  # "Share on this network": every interface
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ApiSettings:
    enabled: bool = False
    share: bool = False  # on the network (always with a key) instead of this Mac only
    require_key: bool = True  # on this Mac only; sharing always requires one
    port: int = 8080
    metrics_without_key: bool = False  # GET /metrics for a scraper that has no key
    # One prompt cache for every key (a single-user setup); else one per key, and the
    # window's chat its own (``core.worker.promptcache``).
    shared_prompt_cache: bool = False

    @property
    def host(self) -> str:
        return SHARED_HOST if self.share else LOOPBACK

    @property
    def needs_key(self) -> bool:
        return self.share or self.require_key


SETTINGS_CAP = 64 << 10  # the API's settings are a few fields


def load_settings() -> ApiSettings:
    """The API's settings, or the defaults (said in one line naming the file) where the
    file is not a small regular JSON file (a FIFO, a huge or damaged one)."""
    try:
        path = paths.config_dir() / SETTINGS_NAME
        if not path.exists():
            return ApiSettings()
        data = read_json(path, SETTINGS_CAP)
        known = {k: v for k, v in data.items() if k in ApiSettings.__dataclass_fields__}
        settings = ApiSettings(**known)
        if not (isinstance(settings.port, int) and 0 <= settings.port <= 65535):
            return ApiSettings()
        return settings
    except FileProblem as problem:
        log.warning("%s; the API's defaults are used", problem)
        return ApiSettings()
    except (OSError, ValueError, TypeError, AttributeError):
        return ApiSettings()


def save_settings(settings: ApiSettings) -> None:
    write_json_atomic(paths.config_dir() / SETTINGS_NAME, asdict(settings))


class ApiService:
    """The API as the window has it. ``changed`` fires (any thread) whenever what it
    shows may have changed: running or not, the address, an error, the keys."""

    changed = Signal()

    def __init__(
        self,
        store: KeyStore | None = None,
        settings: ApiSettings | None = None,
        on_sent: Callable[[str, float, str, str], None] | None = None,
        announce: Callable[[int | None], None] | None = None,
        log_line: Callable[[str], None] | None = None,
        on_calls: Callable[[str, list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.store = store or KeyStore()
        self._on_calls = on_calls  # an API answer's tool calls (any thread)
        self.settings = settings or load_settings()
        self.error = ""  # why it is not serving although on
        self._on_sent = on_sent
        self._announce = announce
        self._log_line = log_line or (lambda line: log.info("api: %s", line))
        self._server: WindowServer | None = None
        self._job: tuple[Session, str, int | None] | None = None
        self._telemetry: Telemetry | None = None  # the window's, fed from the job's session
        self._lock = threading.RLock()

    def set_announcer(self, announce: Callable[[int | None], None] | None) -> None:
        """Who says the shared API's port over Bonjour (``Discovery.set_api_port``); it is
        called (blocking, off the GUI thread) with the port once shared, None after."""
        with self._lock:
            self._announce = announce
            if announce is not None and self.running and self.settings.share:
                assert self._server is not None
                announce(self._server.port)

    # -- what the window shows -------------------------------------------------------------

    @property
    def running(self) -> bool:
        server = self._server
        return server is not None and server.running

    @property
    def address(self) -> str:
        server = self._server
        if server is not None:
            return server.address.replace(SHARED_HOST, "<this Mac's address>")
        host = "<this Mac's address>" if self.settings.share else LOOPBACK
        return f"http://{host}:{self.settings.port}/v1"

    @property
    def served(self) -> int:
        server = self._server
        return server.answers.served if server is not None else 0

    @property
    def serving(self) -> int:
        """Answers the ranks generate now (their running batch)."""
        server = self._server
        return server.answers.serving if server is not None else 0

    @property
    def waiting(self) -> int:
        server = self._server
        return server.answers.depth if server is not None else 0

    @property
    def model(self) -> str | None:
        return self._job[1] if self._job else None

    @property
    def supports(self) -> str:
        """The served model's tool call format and structured output, in one line ("" when
        not serving)."""
        server = self._server
        prompts = server.job.served.prompts if server is not None else None
        if prompts is None:
            return ""
        from core.serve.features import features_said

        return features_said(not prompts.wait(0), prompts.ready, prompts.tool_format)

    @property
    def models(self) -> ServedModels | None:
        """The models served beside the job (issue 37), while serving; None otherwise."""
        server = self._server
        return server.models if server is not None and server.running else None

    def list_keys(self) -> list[KeyInfo]:
        try:
            return self.store.keys()
        except (paths.FolderError, OSError) as error:
            self.error = str(error)
            return []

    def new_key(self, label: str = "") -> str:
        """A new key, returned once (shown with a copy button, never again)."""
        _info, key = self.store.create(label)
        self.changed.emit()
        return key

    def revoke(self, key_id: str) -> bool:
        revoked = self.store.revoke(key_id)
        self.changed.emit()
        return revoked

    # -- following the settings and the job (blocking: off the GUI thread) -------------------

    def apply(self, settings: ApiSettings) -> None:
        """New settings: saved, and the server restarted as they say."""
        with self._lock:
            self.settings = replace(settings)
            save_settings(self.settings)
            self._stop()
            self._start()
        self.changed.emit()

    def attach(
        self,
        session: Session,
        model: str,
        context: int | None,
        telemetry: Telemetry | None = None,
    ) -> None:
        """A job is ready: serve it when the API is on (``telemetry``: the window's, fed
        from ``session``: what the API keeps is then what the window shows)."""
        with self._lock:
            self._job = (session, model, context)
            self._telemetry = telemetry
            self._stop()
            self._start()
        self.changed.emit()

    def detach(self) -> None:
        """The job ended: stop serving (open streams end, their answers are cancelled)."""
        with self._lock:
            self._job = None
            self._stop()
        self.changed.emit()

    def close(self) -> None:
        self.detach()

    def _start(self) -> None:
        self.error = ""
        if not self.settings.enabled or self._job is None:
            return
        from core.serve.server import ServeError, ServerOptions
        from core.serve.window_server import WindowServer

        session, model, context = self._job
        gate = Gate(store=self.store, open_=not self.settings.needs_key)
        try:
            server = WindowServer(  # the job first; models dropped on the window beside it
                session,
                model,
                context,
                gate,
                ServerOptions.for_job(
                    session.spec or session.job_spec(),
                    self.settings.host,
                    self.settings.port,
                    metrics_without_key=self.settings.metrics_without_key,
                    shared_prompt_cache=self.settings.shared_prompt_cache,
                ),
                log=self._log_line,
                on_sent=self._on_sent,
                telemetry=self._telemetry,
                on_calls=self._on_calls,
            )
            server.start()
        except ServeError as error:
            self.error = str(error)
            return
        self._server = server
        if self._announce is not None and self.settings.share:
            self._announce(server.port)

    def _stop(self) -> None:
        server = self._server
        if server is not None:
            server.stop()
            self._server = None  # "not running" only once it has stopped
            if self._announce is not None and self.settings.share:
                self._announce(None)


def examples(address: str, model: str, key: str | None) -> dict[str, Any]:
    """The curl and Python lines a person copies to use the API."""
    shown = key or "<your key>"
    curl = (
        f"curl {address}/chat/completions \\\n"
        f'  -H "Authorization: Bearer {shown}" \\\n'
        '  -H "Content-Type: application/json" \\\n'
        f'  -d \'{{"model": "{model}", "messages": [{{"role": "user", '
        '"content": "What is the capital of France?"}]}\''
    )
    python = (
        "from openai import OpenAI\n\n"
        f'client = OpenAI(base_url="{address}", api_key="{shown}")\n'
        "answer = client.chat.completions.create(\n"
        f'    model="{model}",\n'
        '    messages=[{"role": "user", "content": "What is the capital of France?"}],\n'
        ")\n"
        "print(answer.choices[0].message.content)"
    )
    return {"curl": curl, "python": python}
