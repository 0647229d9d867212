"""The cluster's throughput while it serves many (issue 35, item 5): with 4 API streams
at once the Tokens per second card leads with the cluster's aggregate (every answer's
tokens together) and how many generate, within 10 % of tokens ÷ wall time; the live plot
draws it; each API record of the batch keeps the batch's own figure and series."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import httpx
from pytestqt.qtbot import QtBot

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.measure.history import History, RunKind
from core.serve.service import ApiSettings
from core.worker import protocol as p
from gui.bridge import Bridge
from gui.model.planning import plan_all
from gui.run.pane import RunPane
from gui.run.presentation import PresentationView
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.helpers.serving import free_port

STREAMS = 4
WORDS = 40  # tokens an answer streams (and its end-of-sequence one)
TOKEN_S = 0.06


def _post(url: str, out: list) -> None:
    body = {
        "model": "SmolLM2-135M-Instruct-mlx-q4",
        "messages": [{"role": "user", "content": "Tell me about Paris."}],
        "max_tokens": 200,
    }
    out.append(httpx.post(f"{url}/chat/completions", json=body, timeout=60))


def test_four_api_streams_show_the_clusters_aggregate(qtbot: QtBot, demo_model: Path) -> None:
    info = read_model_info(demo_model)
    answer = " ".join(f"word{i}" for i in range(WORDS))
    bridge = Bridge()
    pane = RunPane(bridge, fake_factory(FakeBehaviour(token_s=TOKEN_S, answer=answer)))

    def before_close(_widget: RunPane) -> None:
        if pane.busy:
            pane.stop()
            qtbot.waitUntil(lambda: not pane.busy, timeout=10_000)
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.resize(1200, 800)
    pane.show()
    pane.set_plan(info, plan_all(info, demo_facts(2))["pipeline"])
    pane.api.apply(ApiSettings(enabled=True, require_key=False, port=free_port()))
    pane.start()
    qtbot.waitUntil(lambda: pane.api.running, timeout=15_000)
    session = pane.controller.session
    assert session is not None
    stamps: list[float] = []  # every token's arrival, the test's own clock
    session.event.connect(
        lambda e: stamps.append(time.monotonic()) if e["event"] == p.TOKEN else None
    )
    out: list = []
    for _ in range(STREAMS):
        threading.Thread(target=_post, args=(pane.api.address, out), daemon=True).start()
    shown: list[tuple[float, str, str]] = []  # (when, the card's number, its note)
    presented: list[tuple[str, str]] = []  # Presentation's number and unit meanwhile
    view = PresentationView(pane, lambda: None)
    qtbot.addWidget(view)

    def sample() -> bool:
        pane.redraw(force=True)
        view.refresh(force=True)
        tile = pane.numbers.tps
        if tile.note.startswith(f"all {STREAMS} · "):
            shown.append((time.monotonic(), tile.number, tile.note))
            presented.append((view.number.text(), view.unit.text()))
        return len(out) == STREAMS

    qtbot.waitUntil(sample, timeout=60_000)
    assert any(unit == f"tokens/s · {STREAMS} answers at once" for _n, unit in presented)
    assert [r.status_code for r in out] == [200] * STREAMS
    tokens = len(stamps)
    assert tokens == STREAMS * (WORDS + 1)
    # tokens ÷ wall time while all four streamed (the middle of the batch, as sampled)
    assert len(shown) >= 5, shown
    start, end = shown[len(shown) // 4][0], shown[-len(shown) // 4][0]
    inside = [t for t in stamps if start <= t <= end]
    measured = (len(inside) - 1) / (inside[-1] - inside[0])
    on_screen = statistics.median(
        float(number) for when, number, _ in shown if start <= when <= end
    )
    assert abs(on_screen - measured) <= 0.10 * measured, (on_screen, measured)
    one = statistics.median(float(note.rsplit(" ", 1)[-1]) for _w, _n, note in shown)
    assert on_screen >= 0.75 * STREAMS * one  # all four answers', not one answer's
    # The live plot draws it: the cluster's line reached the aggregate.
    _x, y = pane.plots.cluster.getData()
    assert y is not None and max(y) >= 0.8 * measured
    # History: each API answer of the batch keeps the cluster's figure over its own span
    # (every answer's tokens then), final though others still stream when it ends.
    whole = (tokens - 1) / (stamps[-1] - stamps[0])
    qtbot.waitUntil(lambda: len(History().runs()) == STREAMS, timeout=20_000)
    records = [r for r in History().runs() if r.kind == RunKind.API]
    batched = [r for r in records if "batch" in r.figures]  # not one that streamed alone
    assert batched and all(r.figures["batch"]["tokens"] <= tokens for r in batched)
    last = max(batched, key=lambda r: r.figures["batch"]["tokens"])
    batch = last.figures["batch"]
    assert batch["answers"] == STREAMS and batch["tokens"] >= tokens // 2
    assert abs(batch["tokens_per_s"] - whole) <= 0.10 * whole, (batch, whole)
    assert last.id is not None
    whole_record = History().get(last.id)
    assert whole_record is not None
    kept = whole_record.series["cluster tokens_per_s"]
    assert max(v for _t, v in kept) >= 0.8 * measured
