"""The API in front of a 2-rank pipeline demo job, for the benches that measure serving
(``bench_serve``, ``bench_serve_memory``): started, ready, and both stopped after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.model.info import ModelInfo, read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.keys import Gate
from core.serve.server import APIServer, ServerOptions
from tests.helpers.serving import free_port


@dataclass(frozen=True)
class DemoApi:
    info: ModelInfo
    session: Session
    server: APIServer

    @property
    def url(self) -> str:
        """Where a client posts a chat completion."""
        return f"{self.server.address}/chat/completions"


@contextmanager
def demo_api(model: Path, max_waiting: int) -> Iterator[DemoApi]:
    """``model`` on two demo Macs by pipeline, the API open (no key) on a free loopback
    port with room for ``max_waiting`` waiting requests; ready when it yields."""
    info = read_model_info(model)
    session = Session(info, simulated_hosts(demo_facts(2)), strategy="pipeline")
    session.start()
    server = APIServer(
        session,
        info.name,
        info.context_length,
        Gate(open_=True),
        ServerOptions("127.0.0.1", free_port(), max_waiting=max_waiting),
    )
    try:
        session.wait_ready(300)
        server.start()
        yield DemoApi(info, session, server)
    finally:
        server.stop()
        session.stop()
