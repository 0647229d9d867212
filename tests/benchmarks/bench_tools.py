"""The time to first token added by tools in the prompt (issue 34, "Measured"), on the
demo's 2-rank pipeline behind the API, the demo model given Qwen2.5's tool template (so
its template renders ``tools=``) (``MACMESH_BENCH_ONLY=tools``).

Each request is a 1-token answer (its time is the prompt's processing and one token),
its own nonce first in the conversation so no prompt cache entry serves it; rounds
alternate no tools, 1 tool and 8 tools. Reported: the median time of each, the prompt's
tokens, and the time the tools add over no tools.

    .venv/bin/python -m tests.benchmarks.bench_tools [MODEL]
"""

from __future__ import annotations

import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.keys import Gate
from core.serve.server import APIServer, ServerOptions
from tests.helpers.serving import free_port
from tests.helpers.templates import TOOLS, templated

KEY = "mm-" + "b" * 40
ROUNDS = 5


def _tool(n: int) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": f"tool_{n}",
            "description": f"Looks up item {n} of the catalogue by its name and its year.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The item's name"},
                    "year": {"type": "integer", "description": "The year it was made"},
                },
                "required": ["name"],
            },
        },
    }


def _once(url: str, model: str, tools: int) -> tuple[float, int]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 1,
        "messages": [
            {"role": "system", "content": f"Session {secrets.token_hex(8)}."},
            {"role": "user", "content": "What is the weather in Paris?"},
        ],
    }
    if tools:
        body["tools"] = [_tool(n) for n in range(tools)]
    started = time.perf_counter()
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=300,
    )
    elapsed = time.perf_counter() - started
    reply.raise_for_status()
    return elapsed, int(reply.json()["usage"]["prompt_tokens"])


def bench_tools(model: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        folder_path = templated(model, Path(folder) / "demo-tools", TOOLS)
        info = read_model_info(folder_path)
        session = Session(info, simulated_hosts(demo_facts(2)), strategy="pipeline")
        session.start()
        server = APIServer(
            session,
            info.name,
            info.context_length,
            Gate(key=KEY),
            ServerOptions("127.0.0.1", free_port()),
        )
        try:
            session.wait_ready(300)
            server.start()
            assert server.served.prompts is not None and server.served.prompts.wait(120)
            url = f"http://127.0.0.1:{server.port}"
            _once(url, info.name, 0)  # warm: the first step compiles
            times: dict[int, list[float]] = {0: [], 1: [], 8: []}
            tokens: dict[int, int] = {}
            for _ in range(ROUNDS):
                for count in times:
                    elapsed, prompt = _once(url, info.name, count)
                    times[count].append(elapsed)
                    tokens[count] = prompt
                    print(f"tools={count}: {elapsed:.3f} s, {prompt} tokens", file=sys.stderr)
        finally:
            server.stop()
            session.stop()
    median = {count: statistics.median(values) for count, values in times.items()}
    return {
        "strategy": "pipeline",
        "nodes": 2,
        "rounds": ROUNDS,
        "first_token_s": {str(c): round(v, 4) for c, v in median.items()},
        "prompt_tokens": {str(c): t for c, t in tokens.items()},
        "added_by_1_tool_s": round(median[1] - median[0], 4),
        "added_by_8_tools_s": round(median[8] - median[0], 4),
    }


if __name__ == "__main__":
    from core.model.demo_model import ensure_demo_model

    chosen = Path(sys.argv[1]) if len(sys.argv) > 1 else ensure_demo_model()
    print(json.dumps(bench_tools(chosen)))
