"""One architecture through the paths people run, against mlx-lm's own greedy answer.

- ``reference``: mlx-lm's ``generate`` in this process (greedy, ``TOKENS`` tokens) for the
  first turn of two conversations and the second turn of the first.
- ``through_serve``: ``macmesh serve --demo --model FOLDER`` on N simulated Macs with a
  strategy: the two first turns sent at once (continuous batching, two in the batch), then
  the second turn of the first, which must reuse its cached prefix (the prompt cache).
- ``through_demo``: ``macmesh demo --headless --model FOLDER --json``: one answer.

Both give the answers' texts, or the planner's refusal (tensor where the heads do not
divide, or neither mlx-lm nor MacMesh's own sharding finds anything to split).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.helpers.serving import serve_command

TOKENS = 8
FIRST = ["What is the capital of France?", "Name a colour."]
SECOND = "And of Spain?"
PIPELINE_SPLIT = "3,1"  # rank 0's layers start at 1: masks and caches by an odd offset
STRATEGIES = {
    "single": ["--nodes", "1"],
    "pipeline": ["--nodes", "2", "--strategy", "pipeline", "--split", PIPELINE_SPLIT],
    "tensor": ["--nodes", "2", "--strategy", "tensor"],
}


@dataclass
class Answers:
    """The first turns' texts, the second turn's, and its cached prompt tokens; or the
    refusal's message."""

    first: list[str]
    second: str = ""
    cached: int = 0
    refused: str = ""


def conversation(answer: str) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": FIRST[0]},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": SECOND},
    ]


def reference(folder: Path) -> Answers:
    """mlx-lm's own greedy answers, one process, no MacMesh."""
    from mlx_lm import generate, load

    model, tokenizer = load(str(folder))

    def answer(messages: list[dict[str, str]]) -> str:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        return str(generate(model, tokenizer, ids, max_tokens=TOKENS, verbose=False))

    first = [answer([{"role": "user", "content": q}]) for q in FIRST]
    return Answers(first, answer(conversation(first[0])))


def _env(home: Path) -> dict[str, str]:
    return dict(
        os.environ,
        MACMESH_DATA_DIR=str(home / "data"),
        MACMESH_LOG_DIR=str(home / "logs"),
        MACMESH_CONFIG_DIR=str(home / "config"),
        HF_HUB_OFFLINE="1",
    )


def refusal(stderr: str) -> str:
    """The planner's one line when tensor cannot work, else empty."""
    for line in stderr.splitlines():
        if "Tensor parallelism is not possible" in line:
            return line.removeprefix("macmesh: ").strip()
    return ""


def through_demo(folder: Path, strategy: str, home: Path) -> Answers:
    """``macmesh demo --headless --model FOLDER`` with the first question."""
    args = [sys.executable, "-m", "gui.cli", "demo", "--headless", "--json"]
    args += ["--model", str(folder), *STRATEGIES[strategy]]
    args += ["--prompt", FIRST[0], "--max-tokens", str(TOKENS)]
    done = subprocess.run(args, capture_output=True, text=True, env=_env(home), timeout=300)
    if done.returncode != 0:
        said = refusal(done.stderr)
        assert said, f"demo {strategy} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        return Answers([], refused=said)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return Answers([summary["text"]])


def through_serve(folder: Path, strategy: str, home: Path) -> Answers:
    """``macmesh serve --demo --model FOLDER``: two first turns at once, then a second."""
    try:
        served = serve_command(
            ["--demo", "--model", str(folder), *STRATEGIES[strategy]], home, _env(home), 300
        )
    except AssertionError as exc:
        said = refusal(str(exc))
        if said:
            return Answers([], refused=said)
        raise
    try:
        headers = {"Authorization": f"Bearer {served.key}"}
        with httpx.Client(base_url=served.base_url, headers=headers, timeout=120) as client:

            def ask(messages: list[dict[str, str]]) -> dict:
                body = {"model": folder.name, "messages": messages, "max_tokens": TOKENS}
                body["temperature"] = 0
                reply = client.post("/chat/completions", json=body)
                assert reply.status_code == 200, reply.text
                return dict(reply.json())

            with ThreadPoolExecutor(2) as pool:
                firsts = list(pool.map(ask, [[{"role": "user", "content": q}] for q in FIRST]))
            texts = [r["choices"][0]["message"]["content"] for r in firsts]
            second = ask(conversation(texts[0]))
        assert served.ranks_alive(), "\n".join(served.err[-40:])
    finally:
        code = served.stop()
    assert code == 0, "\n".join(served.err[-40:])
    details = second["usage"].get("prompt_tokens_details") or {}
    return Answers(
        texts, second["choices"][0]["message"]["content"], int(details.get("cached_tokens", 0))
    )
