"""``macmesh demo --replay FILE.zip``'s Macs (core.run.demo.replay_nodes): a capture read
back as the demo's simulated Macs, with the captured facts, cables and states."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.cluster.capture import CaptureError, write_capture
from core.cluster.registry import Node, ProbeState, Source
from core.cluster.topology import build_topology
from core.run.demo import replay_nodes
from tests.unit.test_capture import KEPT_FACTS, fixture_nodes


def captured(tmp_path: Path, fixture_set: str, *extra: Node) -> tuple[list[Node], Path]:
    nodes = [*fixture_nodes(fixture_set), *extra]
    return nodes, write_capture(tmp_path / "c.zip", nodes, log_root=tmp_path / "no-logs")


def test_a_captures_macs_come_back_as_demo_macs_with_their_facts_and_cables(
    tmp_path: Path,
) -> None:
    sleepy = Node("sleepy", probe_state=ProbeState.UNREACHABLE, probe_message="no answer")
    nodes, path = captured(tmp_path, "ring4", sleepy)
    replayed = replay_nodes(path)
    assert [n.name for n in replayed] == ["mac-1", "mac-2", "mac-3", "mac-4", "mac-5"]
    assert all(n.sources == frozenset({Source.DEMO}) for n in replayed)
    ready, lost = replayed[:4], replayed[4]
    for original, back in zip(nodes[:4], ready, strict=True):
        assert back.probe_state is ProbeState.READY and back.is_mac
        assert back.facts is not None and original.facts is not None
        assert back.facts.simulated and back.facts.probe_output  # ranks run here
        assert back.model_id == original.facts.model_id
        for fact in KEPT_FACTS:
            assert getattr(back.facts, fact) == getattr(original.facts, fact), fact
    before = build_topology([n.facts for n in nodes if n.facts is not None])
    after = build_topology([n.facts for n in ready if n.facts is not None])
    assert after.shape == before.shape == "ring" and len(after.cables) == len(before.cables)
    assert lost.probe_state is ProbeState.UNREACHABLE and lost.facts is None
    assert lost.probe_message == "no answer"


def test_a_file_that_is_not_a_capture_says_why_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "notes.zip"
    bad.write_text("not a zip")
    with pytest.raises(CaptureError, match="is not a capture") as raised:
        replay_nodes(bad)
    assert "\n" not in str(raised.value)
    empty = tmp_path / "empty.zip"
    write_capture(empty, [], log_root=tmp_path / "no-logs")
    with pytest.raises(CaptureError, match="holds no node"):
        replay_nodes(empty)
