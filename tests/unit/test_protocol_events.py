"""The rank's events as types: ``parse_event`` is the one door from a line to an event.

Every kind the worker writes parses back as itself; a line that is not JSON, not an
object, of an unknown kind, missing a required field or with a field of the wrong type
is not an event (the launcher keeps it as a log line of the rank)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from core.run.job.launcher import Job, JobSpec
from core.run.job.rank_status import RankStatus
from core.worker import protocol as p

LINKS = [
    {"a": 0, "b": 1, "points": [{"bytes": 4096, "seconds": 2e-5, "bytes_per_s": 2.0e8}]},
]
ALL_SUM = [{"bytes": 4096, "seconds": 3e-5, "bytes_per_s": 1.4e8}]


# Each kind as the worker makes it (``rank`` and ``t`` stamped by ``written``).
def _kinds(rank: int) -> dict[str, p.Event]:
    t = time.monotonic()
    return {
        p.HELLO: p.Hello(
            event=p.HELLO,
            rank=rank,
            t=t,
            size=2,
            backend="ring",
            strategy="pipeline",
            pid=7,
            host="a",
        ),
        p.LOADING: p.Loading(event=p.LOADING, rank=rank, t=t, stage="weights"),
        p.LOADED: p.Loaded(
            event=p.LOADED,
            rank=rank,
            t=t,
            load_s=1.5,
            memory_bytes=1 << 20,
            layers=[0, 12],
            strategy="pipeline",
            device="cpu",
            blas={"name": "OpenBLAS", "path": "/x.so", "threads": 2, "gflops": 80.0, "fast": True},
            weights={"precision": "float32", "dequantized": True, "from": "4-bit"},
            ring_wait=True,
            adapter={"name": "a", "type": "lora", "fused": True, "precision": "float32"},
        ),
        p.READY: p.Ready(event=p.READY, rank=rank, t=t),
        p.TOKEN: p.Token(
            event=p.TOKEN, rank=rank, t=t, request="r1", index=0, token=42, text="Par"
        ),
        p.DONE: p.Done(
            event=p.DONE,
            rank=rank,
            t=t,
            request="r1",
            prompt_tokens=12,
            prompt_tps=120.5,
            generation_tokens=4,
            generation_tps=9.5,
            ttft_s=0.25,
            finish_reason="length",
            peak_memory_bytes=2000,
            text="Paris",
        ),
        p.TRAFFIC: p.Traffic(
            event=p.TRAFFIC, rank=rank, t=t, interval_s=0.5, sent={"1": 4096}, received={"1": 2048}
        ),
        p.HEARTBEAT: p.Heartbeat(event=p.HEARTBEAT, rank=rank, t=t, stage="reading"),
        p.LINK_TEST: p.LinkTest(
            event=p.LINK_TEST, rank=rank, t=t, request="t1", size=2, links=LINKS, all_sum=ALL_SUM
        ),
        p.LINK_PROGRESS: p.LinkProgress(
            event=p.LINK_PROGRESS,
            rank=rank,
            t=t,
            request="t1",
            done=3,
            total=10,
            bytes=65536,
            pair=[0, 1],
            elapsed_s=1.25,
        ),
        p.ERROR: p.Error(
            event=p.ERROR,
            rank=rank,
            t=t,
            message="Rank 0 refused a request: 'id'",
            fatal=False,
            request="r2",
        ),
        p.STOPPED: p.Stopped(event=p.STOPPED, rank=rank, t=t),
        p.TRAIN: p.Train(
            event=p.TRAIN,
            rank=rank,
            t=t,
            iteration=10,
            iters=100,
            train_loss=2.5,
            learning_rate=1e-5,
            tokens_per_s=300.0,
            trained_tokens=4096,
            peak_memory_bytes=1 << 30,
        ),
        p.VALIDATION: p.Validation(event=p.VALIDATION, rank=rank, t=t, iteration=10, val_loss=2.75),
        p.CHECKPOINT: p.Checkpoint(
            event=p.CHECKPOINT,
            rank=rank,
            t=t,
            iteration=10,
            path="/tmp/a/0000010_adapters.safetensors",
        ),
        p.TRAINED: p.Trained(
            event=p.TRAINED,
            rank=rank,
            t=t,
            adapter="/tmp/a",
            iterations=100,
            train_loss=2.0,
            val_loss=None,
            stopped=False,
        ),
    }


def written(kind: str, rank: int = 1) -> str:
    stream = io.StringIO()
    p.EventWriter(rank=rank, stream=stream).write(_kinds(rank)[kind])
    (line,) = stream.getvalue().splitlines()
    return line


def test_every_kind_of_the_protocol_has_a_writer_here() -> None:
    assert _kinds(0).keys() == p.EVENTS


@pytest.mark.parametrize("kind", sorted(p.EVENTS))
def test_every_kind_the_worker_writes_parses_back_as_itself(kind: str) -> None:
    line = written(kind, rank=1)
    event = p.parse_event(line)
    assert event is not None
    assert event == json.loads(line)  # nothing added, nothing dropped
    assert event["event"] == kind and event["rank"] == 1 and isinstance(event["t"], float)


@pytest.mark.parametrize(
    "record",
    [
        # Optional fields may be absent: a heartbeat once loaded, an error for no request,
        # a fine-tune's loaded event (no ring_wait, no adapter).
        {"event": "heartbeat", "rank": 0, "t": 1.0},
        {"event": "error", "rank": 1, "t": 1.0, "message": "Rank 1 failed", "fatal": True},
        {
            "event": "error",
            "rank": 0,
            "t": 1.0,
            "message": "The prompt is 9000 tokens; this model's context is 8192.",
            "fatal": False,
            "request": "r3",
            "code": p.CONTEXT_LENGTH_EXCEEDED,
        },
        {
            "event": "loaded",
            "rank": 0,
            "t": 1.0,
            "load_s": 0.0,
            "memory_bytes": 5,
            "layers": None,
            "strategy": "single",
            "device": "gpu",
            "blas": None,
            "weights": {},
        },
        # null where the table allows it; a whole number where a float is declared.
        {
            "event": "done",
            "rank": 0,
            "t": 3,
            "request": "r1",
            "prompt_tokens": 1,
            "prompt_tps": 0,
            "generation_tokens": 0,
            "generation_tps": 0,
            "ttft_s": None,
            "finish_reason": None,
            "peak_memory_bytes": 0,
            "text": "",
        },
        {
            "event": "trained",
            "rank": 0,
            "t": 1.0,
            "adapter": "/a",
            "iterations": 0,
            "train_loss": None,
            "val_loss": None,
            "stopped": True,
        },
        # A field a newer worker adds is kept.
        {"event": "ready", "rank": 0, "t": 1.0, "model": "tiny"},
    ],
)
def test_valid_lines_are_events_as_sent(record: dict[str, Any]) -> None:
    assert p.parse_event(json.dumps(record)) == record


def _with(kind: str, **changes: Any) -> str:
    """A valid line of ``kind`` with fields changed (a value of ``...`` removes it)."""
    record = json.loads(written(kind))
    for key, value in changes.items():
        if value is ...:
            del record[key]
        else:
            record[key] = value
    return json.dumps(record)


@pytest.mark.parametrize(
    "line",
    [
        # Missing a required field.
        _with(p.TOKEN, text=...),
        _with(p.TOKEN, rank=...),
        _with(p.TOKEN, t=...),
        _with(p.DONE, request=...),
        _with(p.LOADED, weights=...),
        _with(p.TRAFFIC, sent=...),
        _with(p.ERROR, fatal=...),
        _with(p.TRAIN, iters=...),
        _with(p.LINK_TEST, links=...),
        # A field of the wrong type.
        _with(p.TOKEN, text=5),
        _with(p.TOKEN, index="0"),
        _with(p.TOKEN, index=1.0),  # a count is a whole number
        _with(p.TOKEN, token=True),  # a bool is not a number
        _with(p.TOKEN, rank="zero"),
        _with(p.TOKEN, t="soon"),
        _with(p.TOKEN, request=None),
        _with(p.DONE, ttft_s="fast"),
        _with(p.DONE, peak_memory_bytes=None),
        _with(p.HELLO, size=[2]),
        _with(p.LOADING, stage=3),
        _with(p.HEARTBEAT, stage=None),  # optional, but text when there
        _with(p.LOADED, layers=[0, "12"]),
        _with(p.LOADED, blas="OpenBLAS"),
        _with(p.LOADED, ring_wait="yes"),
        _with(p.LOADED, adapter=None),
        _with(p.TRAFFIC, sent={"1": "lots"}),
        _with(p.TRAFFIC, sent=[1, 2]),
        _with(p.TRAFFIC, interval_s=None),
        _with(p.LINK_TEST, links=[{"a": 0, "b": 1}]),
        _with(p.LINK_TEST, all_sum=[{"bytes": "4096", "seconds": 1.0, "bytes_per_s": 1.0}]),
        _with(p.ERROR, fatal="yes"),
        _with(p.ERROR, code=503),
        _with(p.TRAINED, stopped=None),
        _with(p.CHECKPOINT, path=["/a"]),
        _with(p.VALIDATION, val_loss="2.5"),
        # An unknown kind, or no kind that can be one.
        _with(p.READY, event="a-future-kind"),
        _with(p.READY, event=["ready"]),
        _with(p.READY, event=None),
        _with(p.READY, event=...),
    ],
)
def test_malformed_lines_are_not_events(line: str) -> None:
    assert p.parse_event(line) is None


@pytest.mark.parametrize(
    "line", ["", "   ", "Loading weights…", "{not json", "[1, 2]", '"text"', "null", "{}"]
)
def test_lines_that_are_not_json_objects_are_not_events(line: str) -> None:
    assert p.parse_event(line) is None


def test_surrounding_whitespace_is_not_part_of_the_line() -> None:
    assert p.parse_event("  " + written(p.READY) + "\r\n") is not None


class _Lines:
    """A rank process as the launcher's reader sees it: its stdout lines."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def stdout_lines(self) -> list[str]:
        return self.lines


def test_the_launcher_passes_on_events_and_keeps_other_lines_in_the_ranks_log(
    tmp_path: Path,
) -> None:
    """What a rank prints that is no event (a library's chatter, a malformed or unknown
    event) is kept in its log, not passed on; the events are, as parsed."""
    job = Job(JobSpec(model=tmp_path), run_dir=tmp_path)
    status = RankStatus(rank=1)
    job.ranks = [status]
    seen: list[p.Event] = []
    job.event.connect(seen.append)
    chatter = "[mlx] something a library printed"
    malformed = _with(p.TOKEN, text=5)
    unknown = _with(p.READY, event="a-future-kind")
    lines = [written(p.LOADING), chatter, malformed, unknown, written(p.LOADED), written(p.TOKEN)]
    job._read_events(_Lines([line + "\n" for line in lines]), status)  # type: ignore[arg-type]
    assert [e["event"] for e in seen] == [p.LOADING, p.LOADED, p.TOKEN]
    assert seen[0] == json.loads(lines[0])
    assert list(status.log) == [chatter, malformed, unknown]
    assert status.loaded


def test_a_line_nested_deeper_than_json_goes_is_not_an_event() -> None:
    """A rank's stdout line 100,000 levels deep makes json raise RecursionError: it is a
    bad line like any other, not an exception that would end the launcher's reader."""
    assert p.parse_event('{"event": "ready", "x": ' + "[" * 100_000 + "]" * 100_000 + "}") is None
    assert p.parse_event("{" + '"a":{' * 100_000 + "}" * 100_001) is None
