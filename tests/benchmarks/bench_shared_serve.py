"""A server shared by keys that do not trust each other (issue 33), on the demo's 2-rank
pipeline behind the API with two keys of a key store (``MACMESH_BENCH_ONLY=shared_serve``):

- ``stall``: key A streams a long answer; meanwhile key B sends a 7.9 MB prompt to
  ``/v1/completions`` (then four at once), then a prompt as long as the context allows.
  The longest gap between A's tokens (at the client) alone and during each, and how long
  each refusal took.
- ``tenants``: the time to first token (a 1-token answer) of a 1,000-token prompt: A's
  first (cold), A's again (its own cache), B's of the very prompt A sent (another
  tenant's: must be as cold as a prompt nobody sent), and B's of a prompt nobody sent;
  rounds alternate, each with its own prefix; ``cached_tokens`` of B's are exact.

    .venv/bin/python -m tests.benchmarks.bench_shared_serve [MODEL] [tenants|stall]
    (one JSON document; both parts without a second argument; each figure is said on
    stderr as soon as it is measured)
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.keys import Gate, KeyStore
from core.serve.server import APIServer, ServerOptions
from tests.helpers.serving import free_port
from tests.helpers.wait import wait_until

HUGE = 7_900_000  # bytes: the 7.9 MB prompt
ALONE_TOKENS = 40  # the stream's tokens measured alone, before any other request
AFTER_TOKENS = 10  # and after the huge prompts' refusals, still in their window


@contextmanager
def _served(model: Path) -> Iterator[tuple[APIServer, str, list[str]]]:
    info = read_model_info(model)
    session = Session(info, simulated_hosts(demo_facts(2)), strategy="pipeline")
    session.start()
    with tempfile.TemporaryDirectory() as folder:
        store = KeyStore(Path(folder) / "api-keys.json")
        keys = [store.create(label)[1] for label in ("A", "B")]
        server = APIServer(
            session,
            info.name,
            info.context_length,
            Gate(store=store),
            ServerOptions("127.0.0.1", free_port(), max_waiting=16),
        )
        try:
            session.wait_ready(300)
            server.start()
            assert server.served.prompts is not None and server.served.prompts.wait(60)
            yield server, info.name, keys
        finally:
            server.stop()
            session.stop()


class Stream:
    """Key A's streamed answer in a thread: the arrival time of every token chunk."""

    def __init__(self, server: APIServer, model: str, key: str, max_tokens: int) -> None:
        self.arrivals: list[float] = []
        self.error = ""
        self.closed = threading.Event()
        body = {
            "model": model,
            "stream": True,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "Tell me a very long story about the sea."}],
        }
        self._args = (f"{server.address}/chat/completions", body, key)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        url, body, key = self._args
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.stream("POST", url, json=body, headers=headers, timeout=600) as response:
            for line in response.iter_lines():
                if self.closed.is_set():
                    return
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        self.error = str(chunk["error"].get("message"))
                        sys.stderr.write(f"stream A ended with an error: {self.error}\n")
                        return
                    delta = chunk["choices"][0].get("delta", {}) if chunk["choices"] else {}
                    if delta.get("content"):
                        self.arrivals.append(time.monotonic())

    def longest_gap_ends(self, start: float, end: float) -> float:
        """Seconds from the longest gap's end to ``end`` (where in the window it was)."""
        times = [t for t in self.arrivals if start <= t <= end]
        pairs = list(itertools.pairwise(times))
        return round(end - max(pairs, key=lambda ab: ab[1] - ab[0])[1], 3) if pairs else 0.0

    def longest_gap(self, start: float, end: float) -> float:
        times = [t for t in self.arrivals if start <= t <= end]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        return round(max(gaps), 3) if gaps else float("nan")


def _post(server: APIServer, path: str, key: str, body: dict[str, Any]) -> tuple[int, float, Any]:
    started = time.monotonic()
    got = httpx.post(
        f"{server.address}{path}",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=1800,  # a context-sized prompt read beside a stream on a loaded machine
    )
    return got.status_code, time.monotonic() - started, got.json()


def _said(name: str, value: Any) -> Any:
    sys.stderr.write(f"shared_serve: {name} = {value}\n")
    sys.stderr.flush()
    return value


def _context_prompt(server: APIServer) -> str:
    """Text whose tokens fill the context but for a few (the controller's tokenizer)."""
    prompts = server.served.prompts
    assert prompts is not None and prompts.context is not None
    from core.serve.requests import Ask

    unit = "The lighthouse keeper watched the grey sea roll in under the evening sky. "
    count = len(prompts.tokens(Ask(model="m", max_tokens=1, prompt=unit)) or [1])
    text = unit * ((prompts.context - 64) // count)
    return text


def bench_stall(model: Path) -> dict[str, Any]:
    with _served(model) as (server, name, (key_a, key_b)):
        stream = Stream(server, name, key_a, 2400)
        wait_until(lambda: len(stream.arrivals) >= 5, 120, "the stream's first 5 tokens")
        start, seen = time.monotonic(), len(stream.arrivals)
        # The window measured: the stream alone, over its next ALONE_TOKENS tokens.
        wait_until(lambda: len(stream.arrivals) >= seen + ALONE_TOKENS, 300, "tokens alone")
        alone = _said("longest_gap_alone_s", stream.longest_gap(start, time.monotonic()))

        huge = {"model": name, "prompt": "x" * HUGE, "max_tokens": 4}
        t0 = time.monotonic()
        status, huge_s = _said("huge prompt", _post(server, "/completions", key_b, huge)[:2])
        results: list[tuple[int, float]] = []
        threads = [
            threading.Thread(
                target=lambda: results.append(_post(server, "/completions", key_b, huge)[:2])
            )
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        refused = len(stream.arrivals)  # the window goes on past the refusals, a few tokens
        wait_until(lambda: len(stream.arrivals) >= refused + AFTER_TOKENS, 300, "tokens after")
        during_huge = _said("during huge", stream.longest_gap(t0, time.monotonic()))

        text = _context_prompt(server)
        t1 = time.monotonic()
        long_status, long_s, long_body = _post(
            server, "/completions", key_b, {"model": name, "prompt": text, "max_tokens": 1}
        )
        t2 = time.monotonic()
        during_long = _said("during context prompt", stream.longest_gap(t1, t2))
        tokens_in_stream = len([t for t in stream.arrivals if t1 <= t <= t2])
        gaps = sorted(
            (b - a for a, b in itertools.pairwise([t for t in stream.arrivals if t1 <= t <= t2])),
            reverse=True,
        )
        before_end = stream.longest_gap_ends(t1, t2)
        stream.closed.set()
    return {
        "longest_gap_alone_s": alone,
        "huge_prompt_status": status,
        "huge_prompt_refused_in_s": round(huge_s, 3),
        "four_huge_prompts_statuses": sorted(r[0] for r in results),
        "four_huge_prompts_last_refused_in_s": round(max(r[1] for r in results), 3),
        "longest_gap_during_huge_prompts_s": during_huge,
        "context_prompt_status": long_status,
        "context_prompt_tokens": (long_body.get("usage") or {}).get("prompt_tokens"),
        "context_prompt_answered_in_s": round(long_s, 2),
        "longest_gap_during_context_prompt_s": during_long,
        "other_stream_tokens_during_context_prompt": tokens_in_stream,
        "five_longest_gaps_during_context_prompt_s": [round(g, 3) for g in gaps[:5]],
        "longest_gap_ended_before_the_answer_s": before_end,
        "median_gap_during_context_prompt_s": round(statistics.median(gaps), 3) if gaps else None,
        "limit_s": 1.0,
    }


def bench_tenants(model: Path, rounds: int = 3) -> dict[str, Any]:
    figures: dict[str, list[float]] = {"a_cold": [], "a_own": [], "b_after_a": [], "b_cold": []}
    cached: dict[str, list[int]] = {key: [] for key in figures}
    with _served(model) as (server, name, (key_a, key_b)):
        words = ["river", "stone", "cloud", "lantern", "meadow", "copper", "violin", "harbour"]

        def prompt(seed: int) -> str:
            picked = [words[(seed * 7 + n * (seed + 3)) % len(words)] for n in range(900)]
            return f"Round {seed}. " + " ".join(picked) + " What comes next?"

        def ask(key: str, text: str) -> tuple[float, int]:
            body = {"model": name, "max_tokens": 1, "messages": [{"role": "user", "content": text}]}
            status, seconds, answer = _post(server, "/chat/completions", key, body)
            assert status == 200, answer
            details = answer["usage"].get("prompt_tokens_details") or {}
            return seconds, int(details.get("cached_tokens", 0))

        ask(key_a, prompt(99))  # warm up (the first answer's graph and buffers)
        ask(key_b, prompt(98))
        for n in range(rounds):
            shared, fresh = prompt(2 * n), prompt(2 * n + 1)
            for label, key, text in (
                ("a_cold", key_a, shared),
                ("a_own", key_a, shared),
                ("b_after_a", key_b, shared),
                ("b_cold", key_b, fresh),
            ):
                seconds, hits = _said(label, ask(key, text))
                figures[label].append(seconds)
                cached[label].append(hits)
    medians = {f"{k}_ttft_s": round(statistics.median(v), 3) for k, v in figures.items()}
    return {
        **medians,
        "b_after_a_vs_b_cold": round(
            statistics.median(figures["b_after_a"]) / statistics.median(figures["b_cold"]), 3
        ),
        "cached_tokens": cached,
        "rounds": rounds,
    }


def bench_shared_serve(model: Path, parts: tuple[str, ...] = ("tenants", "stall")) -> dict:
    benches = {"tenants": bench_tenants, "stall": bench_stall}
    return {part: benches[part](model) for part in parts}


if __name__ == "__main__":
    from core.model.demo_model import ensure_demo_model

    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ensure_demo_model()
    chosen = tuple(sys.argv[2:]) or ("tenants", "stall")
    print(json.dumps(bench_shared_serve(path, chosen), indent=2))
