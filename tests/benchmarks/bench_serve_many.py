"""Several models behind one server (issue 37), on the demo (``MACMESH_BENCH_ONLY=serve_many``):

- ``first_request``: a request (16 tokens) to a model not loaded (its load, then the
  answer) against the same request once it is loaded (the median of 3).
- ``interference``: two models (the demo model twice, under two names: the same work
  each) each streaming to 4 clients at once, against each alone: each model's aggregate
  tokens/s and the interference (1 - together / alone), the medians of ROUNDS rounds
  taken in turn (alone A, alone B, together). ``separate_macs``: the two on
  separate simulated Macs (Studio A+B and C+D) with every thread of each model's rank
  processes pinned to its own core (``os.sched_setaffinity``; one model per core: one
  per "Mac"), alone and together alike: the issue's "separate Macs", whose bound is
  15 %. ``shared_macs``: both on Studio A+B, unpinned, sharing every core. The API
  server and the clients run in this process on any core in both (a real cluster's
  server shares one machine too). ``other_processes_cores``: the cores the machine's
  other processes kept busy meanwhile (the medians, alone and together): on a machine
  shared with other work, a model alone on its core has the other core's spare time
  for that work, two models together have none, so this share is what the "together"
  figures lost to others, not to each other.
- ``unload_stall``: the longest gap between text pieces of one model's 3 streams while
  the other model is unloaded through the API (``tests/helpers/stalls.py``: the gaps
  that overlap the unload's window against those wholly outside it), and the longest
  gap of the same streams with nothing unloading. The e2e test holds the attributable
  stall to 1 s (tests/e2e/test_serve_many.py).

    .venv/bin/python -m tests.benchmarks.bench_serve_many [MODEL]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

from core.cluster.probe.facts import NodeFacts
from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.keys import Gate
from core.serve.models import FOREVER, ModelRegistry, ModelSpec, ServeSettings
from core.serve.serve_many import ManyServer
from tests.helpers.serving import free_port
from tests.helpers.stalls import stall_in_window
from tests.helpers.wait import wait_until

CLIENTS = 4
TOKENS = 64
ROUNDS = 3  # alone, alone, together: in turn, the medians
A, B = "model-a", "model-b"


def _say(label: str, value: Any) -> Any:
    print(f"serve_many: {label}: {value}", file=sys.stderr, flush=True)
    return value


@contextmanager
def _serving(
    model: Path, macs: dict[str, Sequence[NodeFacts]], at_start: Sequence[str]
) -> Iterator[ManyServer]:
    info = read_model_info(model)

    def maker(facts: Sequence[NodeFacts]) -> Callable[[], Session]:
        return lambda: Session(info, simulated_hosts(facts), strategy="pipeline")

    specs = [
        ModelSpec(name, maker(facts), name in at_start, FOREVER) for name, facts in macs.items()
    ]
    registry = ModelRegistry(specs, ServeSettings(Gate(open_=True), lambda line: None, 64))
    server = ManyServer(registry, "127.0.0.1", free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _stream(server: ManyServer, model: str, tokens: int, times: list[float] | None = None) -> int:
    """One streamed completion; its generated tokens (``times``: each text piece's
    ``time.monotonic()``)."""
    body = {
        "model": model,
        "prompt": "Once upon a time",
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
    used = 0
    with httpx.stream("POST", f"{server.address}/completions", json=body, timeout=600) as got:
        got.raise_for_status()
        for line in got.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if times is not None and chunk.get("choices") and chunk["choices"][0].get("text"):
                times.append(time.monotonic())
            if chunk.get("usage"):
                used = int(chunk["usage"]["completion_tokens"])
    return used


def _ask(server: ManyServer, model: str, tokens: int = 16) -> float:
    started = time.monotonic()
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": tokens}
    got = httpx.post(f"{server.address}/completions", json=body, timeout=600)
    got.raise_for_status()
    return time.monotonic() - started


def _rate(server: ManyServer, models: Sequence[str]) -> dict[str, float]:
    """Each model's aggregate tokens/s, its CLIENTS streams at once (all models at once)."""
    counts: dict[str, list[int]] = {m: [] for m in models}
    ends: dict[str, float] = {}
    started = time.monotonic()

    def client(model: str) -> None:
        counts[model].append(_stream(server, model, TOKENS))
        ends[model] = max(ends.get(model, 0.0), time.monotonic())

    threads = [threading.Thread(target=client, args=(m,)) for m in models for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {m: round(sum(counts[m]) / (ends[m] - started), 1) for m in models}


def bench_first_request(model: Path) -> dict[str, Any]:
    facts = demo_facts(2)
    with _serving(model, {A: facts}, at_start=()) as server:
        cold = _say("first request, not loaded (load + answer) s", _ask(server, A))
        warm = statistics.median(_ask(server, A) for _ in range(3))
    _say("the same request, loaded s", warm)
    return {"not_loaded_s": round(cold, 3), "loaded_s": round(warm, 3), "tokens": 16}


def _rank_processes(server: ManyServer, model: str) -> list[psutil.Process]:
    """``model``'s rank processes (and what they forked): this process's workers whose
    ring hostfile is in that model's job's run folder."""
    session = server.registry.entries[model].session
    assert session is not None and session.job is not None
    run_dir = str(session.job.run_dir)
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "core.worker" in " ".join(child.cmdline()) and child.environ().get(
                "MLX_HOSTFILE", ""
            ).startswith(run_dir):
                found += [child, *child.children(recursive=True)]
        except psutil.Error:
            continue
    return list({proc.pid: proc for proc in found}.values())


def _pin(server: ManyServer, cores: dict[str, int]) -> dict[str, list[int]]:
    """Every thread of each model's rank processes on its own core (a thread started
    later inherits its starter's); the pids pinned per model."""
    pinned: dict[str, list[int]] = {}
    for model, core in cores.items():
        procs = _rank_processes(server, model)
        assert procs, f"no rank process of {model} found"
        for proc in procs:
            for thread in proc.threads():
                try:
                    os.sched_setaffinity(thread.id, {core})
                except OSError:
                    continue  # a thread that ended meanwhile
        pinned[model] = [proc.pid for proc in procs]
    return pinned


def _cpu_s() -> tuple[float, float]:
    """(the machine's busy CPU seconds, this process's and its children's) so far."""
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    ours = 0.0
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            ours += sum(proc.cpu_times()[:2])
        except psutil.Error:
            continue
    return busy, ours


def _measured(server: ManyServer, models: Sequence[str], others: list[float]) -> dict[str, float]:
    """``_rate``, noting in ``others`` the cores the machine's other processes (other
    sessions' work) kept busy meanwhile: what this shared machine took from the models."""
    busy, ours, began = *_cpu_s(), time.monotonic()
    rates = _rate(server, models)
    busy_after, ours_after = _cpu_s()
    others.append(((busy_after - busy) - (ours_after - ours)) / (time.monotonic() - began))
    return rates


def _rounds(server: ManyServer, cores: dict[str, int]) -> dict[str, Any]:
    """Each model alone, then both together, ROUNDS times in turn (a load that comes
    and goes on this shared machine falls on both sides alike); the medians. Pinned
    again before each measure: threads made since."""
    alone: dict[str, list[float]] = {A: [], B: []}
    together: dict[str, list[float]] = {A: [], B: []}
    others_alone: list[float] = []
    others_together: list[float] = []
    for _ in range(ROUNDS):
        for one in (A, B):
            _pin(server, cores)
            alone[one].append(_measured(server, (one,), others_alone)[one])
        _pin(server, cores)
        for one, rate in _measured(server, (A, B), others_together).items():
            together[one].append(rate)
    median = statistics.median
    return {
        "alone_tokens_per_s": {m: round(median(alone[m]), 1) for m in (A, B)},
        "together_tokens_per_s": {m: round(median(together[m]), 1) for m in (A, B)},
        "other_processes_cores": {
            "alone": round(median(others_alone), 2),
            "together": round(median(others_together), 2),
        },
    }


def bench_interference(model: Path) -> dict[str, Any]:
    four = demo_facts(4)
    cpus = sorted(os.sched_getaffinity(0))
    out: dict[str, Any] = {"clients_per_model": CLIENTS, "tokens": TOKENS, "cpus": len(cpus)}
    for label, macs, pinned in (
        ("separate_macs", {A: four[:2], B: four[2:]}, True),
        ("shared_macs", {A: four[:2], B: four[:2]}, False),
    ):
        if pinned and len(cpus) < 2:
            out[label] = {"skipped": "one core: no core of its own for each model"}
            continue
        with _serving(model, macs, at_start=(A, B)) as server:
            _rate(server, (A,))  # warm up both (the first answer's graph)
            _rate(server, (B,))
            cores = {A: cpus[0], B: cpus[1]} if pinned else {}
            measured = _rounds(server, cores)
        alone, together = measured["alone_tokens_per_s"], measured["together_tokens_per_s"]
        out[label] = {
            "pinned_cores": cores or None,
            "rounds": ROUNDS,
            **measured,
            "interference": {m: round(1 - together[m] / alone[m], 3) for m in (A, B)},
        }
        _say(label, out[label])
    return out


def bench_unload_stall(model: Path) -> dict[str, Any]:
    facts = demo_facts(2)
    with _serving(model, {A: facts, B: facts}, at_start=(A, B)) as server:

        def streams(during: Callable[[], None] | None) -> dict[str, Any]:
            times: list[list[float]] = [[] for _ in range(3)]
            threads = [
                threading.Thread(target=_stream, args=(server, A, 200, times[i])) for i in range(3)
            ]
            for thread in threads:
                thread.start()
            # every stream is streaming (some pieces each) before the unload starts
            wait_until(lambda: all(len(t) > 20 for t in times), 120, "the three streams")
            began = time.monotonic()
            if during is not None:
                during()
            ended = time.monotonic()
            for thread in threads:
                thread.join()
            stall = stall_in_window(times, began, ended)
            return {"window_s": round(ended - began, 3), **stall.to_dict()}

        streams(None)  # warm up
        quiet = streams(None)
        unloading = streams(
            lambda: httpx.post(
                f"http://127.0.0.1:{server.port}/models/unload", json={"model": B}, timeout=300
            ).raise_for_status()
        )
    return _say(
        "unload_stall",
        {
            "longest_gap_quiet_s": max(
                quiet["longest_gap_in_window_s"], quiet["longest_gap_outside_s"]
            ),
            "unloading": unloading,
        },
    )


def bench_serve_many(model: Path) -> dict[str, Any]:
    return {
        "first_request": bench_first_request(model),
        "interference": bench_interference(model),
        "unload_stall": bench_unload_stall(model),
    }


if __name__ == "__main__":
    from core.model.demo_model import ensure_demo_model

    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ensure_demo_model()
    print(json.dumps(bench_serve_many(path), indent=2))
