"""Memory short on the demo (issue 37): simulated Macs with a 900 MB GPU limit (388 MiB
usable) hold one tiny model (257 MiB a Mac, its prompt cache counted) but not two. A
model asked for unloads the least recently used idle one first (its ranks end); never one
with requests running: then the load is refused in one line and the loaded model serves
on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.errors import APIError
from core.serve.keys import Gate
from core.serve.models import FOREVER, ModelRegistry, ModelSpec, ServeSettings
from core.serve.serve_many import ManyServer
from tests.helpers.serving import free_port
from tests.helpers.tiny_models import make_tiny_model

pytestmark = pytest.mark.slow

NAMES = ("tiny-a", "tiny-b", "tiny-c")


def _maker(folder: Path) -> Callable[[], Session]:
    info = read_model_info(folder)
    small = [replace(f, wired_limit_mb=900) for f in demo_facts(2)]
    return lambda: Session(info, simulated_hosts(small), strategy="pipeline")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ManyServer, list[str]]]:
    lines: list[str] = []
    specs = [
        ModelSpec(name, _maker(make_tiny_model(tmp_path / name, seed=n)), False, FOREVER)
        for n, name in enumerate(NAMES)
    ]
    registry = ModelRegistry(specs, ServeSettings(Gate(open_=True), lines.append, 16))
    served = ManyServer(registry, "127.0.0.1", free_port())
    served.start()
    try:
        yield served, lines
    finally:
        served.stop()


def _ask(server: ManyServer, model: str) -> httpx.Response:
    body = {"model": model, "prompt": "Once", "max_tokens": 4}
    return httpx.post(f"{server.address}/completions", json=body, timeout=300)


def test_the_least_recently_used_idle_model_makes_room_never_a_busy_one(server) -> None:
    served, lines = server
    registry = served.registry
    assert _ask(served, "tiny-a").status_code == 200
    job_a = registry.entries["tiny-a"].session.job
    assert _ask(served, "tiny-b").status_code == 200  # tiny-a idle: unloaded for it
    assert registry.entries["tiny-a"].state == "unloaded" and job_a.wait(10)
    assert any("least recently used, to make room for tiny-b" in line for line in lines)

    async def hold(name: str, by: int) -> None:
        registry.entries[name].in_flight += by  # a request running through the front

    served.call(hold("tiny-b", 1))
    try:
        refused = _ask(served, "tiny-c")
        assert refused.status_code == 503
        message = refused.json()["error"]["message"]
        assert "tiny-b answering now" in message and "\n" not in message
        assert registry.entries["tiny-b"].state == "loaded"
    finally:
        served.call(hold("tiny-b", -1))
    assert _ask(served, "tiny-b").status_code == 200  # the loaded one served on
    with pytest.raises(APIError):  # the same refusal without HTTP, and no leak of state
        served.call(hold("tiny-b", 1))
        try:
            served.call(registry.ensure("tiny-c"))
        finally:
            served.call(hold("tiny-b", -1))
