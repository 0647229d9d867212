"""The link test's arithmetic and its baseline: results per link against the rated speed."""

from __future__ import annotations

import pytest

from core.cli.linktest import described
from core.cluster.topology import build_topology
from core.run.measure import links as linktest
from core.run.measure.links import Nominal, cable_nominals, link_results
from core.run.planning import EstimateBeside, shared_machine
from core.run.tasks.compare import Comparison, RunFigures, headlines
from core.run.tasks.linktest import LinkTest
from core.worker import protocol as p
from core.worker.linktest import DEFAULT_SIZES, ring_pairs
from tests.fixtures.macos.hosts import load_facts

GB = 1e9


def _event(pairs: list[tuple[int, int]], rate: float, latency: float) -> dict:
    """Ranks' table: every size at ``rate`` bytes/s plus a fixed ``latency``."""
    links = []
    for a, b in pairs:
        points = [
            {"bytes": n, "seconds": latency + n / rate, "bytes_per_s": n / (latency + n / rate)}
            for n in reversed(DEFAULT_SIZES)  # any order: sorted by size on the way in
        ]
        links.append({"a": a, "b": b, "points": points})
    return {"event": p.LINK_TEST, "links": links, "all_sum": []}


def test_the_rank_sizes_and_the_controllers_agree() -> None:
    assert linktest.SIZES == DEFAULT_SIZES
    assert DEFAULT_SIZES[0] == 4096 and DEFAULT_SIZES[-1] == 64 << 20


@pytest.mark.parametrize(
    ("size", "pairs"),
    [(1, []), (2, [(0, 1)]), (3, [(0, 1), (1, 2), (2, 0)]), (4, [(0, 1), (1, 2), (2, 3), (3, 0)])],
)
def test_ring_neighbours_are_the_pairs(size: int, pairs: list[tuple[int, int]]) -> None:
    assert ring_pairs(size) == pairs


def test_latency_from_the_smallest_message_bandwidth_from_the_largest() -> None:
    event = _event([(0, 1), (1, 2), (2, 0)], rate=8.6 * 2**30, latency=9e-6)
    tb5 = Nominal("Thunderbolt 5", 80 * GB / 8)
    results = link_results(event, ["a", "b", "c"], tb5)
    assert [r.nodes for r in results] == [("a", "b"), ("b", "c"), ("c", "a")]
    first = results[0]
    assert first.latency_s == pytest.approx(9e-6 + 4096 / (8.6 * 2**30))
    assert first.bytes_per_s == pytest.approx((64 << 20) / (9e-6 + (64 << 20) / (8.6 * 2**30)))
    assert first.share == pytest.approx(first.bytes_per_s / (10 * GB))
    assert 0.9 < first.share < 0.93  # the launch coverage's "93 % of TB5", near enough
    assert "% of Thunderbolt 5" in first.describe() and first.describe().startswith("a ↔ b")
    data = first.to_dict()
    assert data["ranks"] == [0, 1] and len(data["points"]) == len(DEFAULT_SIZES)
    assert [pt["bytes"] for pt in data["points"]] == sorted(DEFAULT_SIZES)


def test_a_link_without_a_known_rate_has_no_share() -> None:
    results = link_results(_event([(0, 1)], GB, 1e-5), ["a", "b"], {})
    assert results[0].share is None and results[0].nominal.label == "rate unknown"
    assert "%" not in results[0].describe()


def test_the_cli_says_the_demos_links_are_this_machines_loopback() -> None:
    """Issue 25 item 3: on the demo the link test says plainly, in Compare's words, that
    the simulated Macs share this machine's cores and loopback; on real Macs it does not."""
    nodes = ["Studio A", "Studio B", "Studio C"]
    event = _event([(0, 1), (1, 2), (2, 0)], rate=2 * GB, latency=2e-5)
    tested = LinkTest(nodes, link_results(event, nodes, Nominal("loopback TCP", 3 * GB)), [])
    lines = described(tested, simulated=True).splitlines()
    assert lines[:3] == [r.describe() for r in tested.results]
    opening = shared_machine(3)
    assert opening.startswith("Simulated Macs: the 3 demo Macs share this machine's ")
    assert lines[3].startswith(opening + ", so these rates are loopback's")
    assert "real Macs' cables" in lines[3]
    # Compare says it in the same words.
    said = headlines(
        Comparison(
            None,
            RunFigures("cluster", nodes, "pipeline", 3, 9.0, 90.0, 0.5, 8, 4, {}, ""),
            "pipeline",
        ),
        EstimateBeside({}, simulated=True),
    )
    assert opening.removeprefix("Simulated Macs: ") + ", so " in said.measured
    real = described(tested, simulated=False)
    assert "Simulated" not in real and len(real.splitlines()) == 3


def test_cable_rates_come_from_the_thunderbolt_cables() -> None:
    topology = build_topology(load_facts("mesh4"))
    rated = cable_nominals(topology, [("studio-a", "studio-b"), ("studio-b", "nowhere")])
    assert rated == {frozenset({"studio-a", "studio-b"}): Nominal("Thunderbolt 5", 10 * GB)}


def test_the_tcp_baseline_moves_every_size_over_loopback() -> None:
    points = linktest.tcp_ping_pong("127.0.0.1", [4096, 1 << 20], scale=0.05)
    assert [pt["bytes"] for pt in points] == [4096, 1 << 20]
    assert all(pt["seconds"] > 0 and pt["bytes_per_s"] > 0 for pt in points)
    assert points[0]["bytes_per_s"] == pytest.approx(points[0]["bytes"] / points[0]["seconds"])


@pytest.mark.parametrize(
    "command",
    [
        {"sizes": []},
        {"sizes": [0]},
        {"sizes": [2**31]},
        {"sizes": "4096"},
        {"sizes": [True]},
        {"pairs": [[0, 0]]},
        {"pairs": [[0]]},
        {"pairs": [[0, -1]]},
        {"pairs": "0,1"},
        {"scale": 0},
        {"scale": 11},
        {"scale": "1"},
        {"scale": True},
    ],
)
def test_a_link_test_command_out_of_bounds_is_refused(command: dict) -> None:
    line = p.encode_command(p.OP_LINK_TEST, id="t1", **command)
    with pytest.raises(ValueError):
        p.parse_command(line)


def test_a_link_test_command_within_bounds_is_taken() -> None:
    line = p.encode_command(
        p.OP_LINK_TEST, id="t1", sizes=[4096, 1 << 20], pairs=[[0, 1], [1, 0]], scale=0.5
    )
    assert p.parse_command(line)["sizes"] == [4096, 1 << 20]


def test_a_thunderbolt_4_cable_is_rated_at_40_gbps() -> None:
    topology = build_topology(load_facts("mini-tb4"))
    rated = cable_nominals(topology, [("mini-g", "mini-h")])
    assert rated == {frozenset({"mini-g", "mini-h"}): Nominal("Thunderbolt 4", 5 * GB)}


def test_the_ranks_tell_each_step_of_the_test_in_order() -> None:
    """Issue 25 item 10: progress per link and per size (``link_progress`` on rank 0)."""
    mx = pytest.importorskip("mlx.core")
    from core.worker.linktest import measure

    group = mx.distributed.init()  # one process: a group of one
    told: list[tuple] = []
    sizes = [4096, 16384, 65536]
    # Pairs this rank is not in: it walks past them, as a rank outside a pair does.
    measure(group, sizes, pairs=[(1, 2), (2, 3)], progress=lambda *step: told.append(step))
    assert [(d, t, n, pair) for d, t, n, pair, _s in told] == [
        (1, 6, 4096, (1, 2)),
        (2, 6, 4096, (2, 3)),
        (3, 6, 16384, (1, 2)),
        (4, 6, 16384, (2, 3)),
        (5, 6, 65536, (1, 2)),
        (6, 6, 65536, (2, 3)),
    ]
    elapsed = [s for *_rest, s in told]
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0


def test_a_link_progress_event_is_an_event() -> None:
    line = (
        '{"event": "link_progress", "rank": 0, "t": 1.0, "request": "t1", "done": 1,'
        ' "total": 4, "bytes": 4096, "pair": [0, 1], "elapsed_s": 0.5}'
    )
    event = p.parse_event(line)
    assert event is not None and event["event"] == p.LINK_PROGRESS and event["pair"] == [0, 1]
    assert p.parse_event(line.replace('"done": 1', '"done": "one"')) is None


def test_a_stop_is_taken_at_the_end_of_a_size() -> None:
    mx = pytest.importorskip("mlx.core")
    from core.worker.linktest import measure

    group = mx.distributed.init()
    told: list[int] = []
    table = measure(
        group,
        [4096, 16384, 65536],
        pairs=[(1, 2), (2, 3)],
        progress=lambda done, *_: told.append(done),
        stop=lambda: len(told) >= 1,  # asked during the first size
    )
    assert table == ([], [], True)  # nothing measured is kept
    assert told == [1, 2]  # the first size ends, the second never starts
