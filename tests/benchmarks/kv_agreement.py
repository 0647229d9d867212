"""How far a quantized KV cache moves the demo model's greedy tokens (issue 37, item 4:
"the same greedy text as 16-bit on at least 95 % of tokens for the demo prompts").

Two measures, over the demo prompts (``PROMPTS``: the eight chat prompts of
``tests/e2e/test_serve_kv_bits.py``, the chat template applied as ``macmesh serve`` does),
against the cache as computed (float32 on this CPU: the "16-bit" of ``--kv-bits 16``):

- **teacher-forced**: the 16-bit greedy answer's tokens fed after the prompt, once with
  each cache; at every answer position, whether that cache's next-token argmax is the
  16-bit cache's. Every position sees the same text, so one near tie that flips counts
  once. A quantized cache quantizes a token's keys and values in the forward call that
  writes them, before its attention reads them (``QuantKV.update_and_fetch``), so one
  forward pass over prompt and answer gives the same next-token choices as feeding the
  answer a token at a time (``teacher_forced``; ``stepwise`` checks it);
- **free-running up to the first difference**: each cache generates its own greedy answer;
  the share of the 16-bit answers' tokens it repeats, each answer counted up to its first
  difference (one flipped near tie loses the rest of the answer).

The caches: ``16`` (mlx-lm's ``KVCache``, as computed), ``float16`` and ``bfloat16`` (the
same, stored rounded to that dtype: what a Mac's cache holds when the model runs in 16
bits), and ``8`` and ``4`` (the layers' caches ``core.worker.kvquant.install`` gives,
group 64). Run in a process with OpenBLAS preloaded as a CPU rank runs (``measure``):

    .venv/bin/python -m tests.benchmarks.kv_agreement      (one JSON document)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from core.worker import kvbits

TOPICS = (
    "the sea",
    "a cat",
    "the moon",
    "a city",
    "a lighthouse",
    "a train",
    "a forest",
    "a baker",
)
PROMPTS = [f"Tell me a short story about {topic}." for topic in TOPICS]
TOKENS = 24  # the e2e test's answers
GROUP = kvbits.DEFAULT_GROUP_SIZE
SETTINGS = ("16", "float16", "bfloat16", "8", "4")


class StoredAs(KVCache):
    """mlx-lm's cache, its keys and values stored rounded to ``dtype`` and read back at the
    activations' dtype (the attention still runs in float32 here)."""

    def __init__(self, dtype: mx.Dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        computed = keys.dtype
        k, v = super().update_and_fetch(keys.astype(self.dtype), values.astype(self.dtype))
        return k.astype(computed), v.astype(computed)


def cache_maker(model: Any, config: dict[str, Any], setting: str) -> Callable[[], list[Any]]:
    """A fresh cache for every layer of ``model`` at ``setting`` (one of ``SETTINGS``)."""
    from core.worker import kvquant

    layers = len(model.layers)
    if setting in ("float16", "bfloat16"):
        dtype = getattr(mx, setting)
        return lambda: [StoredAs(dtype) for _ in range(layers)]
    bits = int(setting)
    if "make_cache" in vars(model):  # an earlier setting's install: start from the model's own
        object.__delattr__(model, "make_cache")
    quantized = kvquant.install(model, bits, GROUP, config)
    made = getattr(model, "make_cache", None)
    if bits != kvbits.NONE:
        assert quantized == layers, (quantized, layers)  # every layer, as the ranks run it
        assert made is not None
        return made  # type: ignore[no-any-return]
    return lambda: [KVCache() for _ in range(layers)]


def greedy(
    model: Any, caches: list[Any], prompt: list[int], tokens: int, eos: set[int]
) -> list[int]:
    """The greedy answer, a token at a time after the prompt read whole."""
    logits = model(mx.array(prompt)[None], cache=caches)
    answer: list[int] = []
    while len(answer) < tokens:
        token = int(mx.argmax(logits[0, -1]).item())
        answer.append(token)
        if token in eos:
            break
        logits = model(mx.array([token])[None], cache=caches)
    return answer


def teacher_forced(
    model: Any, caches: list[Any], prompt: list[int], answer: list[int]
) -> list[int]:
    """The next-token argmax at each answer position (after the prompt and after each
    answer token but the last), from one forward pass over prompt and answer."""
    logits = model(mx.array(prompt + answer[:-1])[None], cache=caches)
    return [int(t) for t in mx.argmax(logits[0, len(prompt) - 1 :], axis=-1).tolist()]


def stepwise(model: Any, caches: list[Any], prompt: list[int], answer: list[int]) -> list[int]:
    """``teacher_forced`` fed a token at a time, as a rank generates."""
    logits = model(mx.array(prompt)[None], cache=caches)
    picked = [int(mx.argmax(logits[0, -1]).item())]
    for token in answer[:-1]:
        logits = model(mx.array([token])[None], cache=caches)
        picked.append(int(mx.argmax(logits[0, -1]).item()))
    return picked


def up_to_first_difference(plain: list[int], other: list[int]) -> int:
    same = 0
    for a, b in zip(plain, other, strict=False):
        if a != b:
            break
        same += 1
    return same


def measure_here(
    model_dir: Path, tokens: int = TOKENS, settings: tuple[str, ...] = SETTINGS, free: bool = True
) -> dict[str, Any]:
    """In this process: the demo model as a CPU rank holds it (float32 weights); the
    free-running measure too when ``free`` (a greedy answer for every setting: slower)."""
    from core.worker.sharding import load_shard

    shard = load_shard(model_dir, mx.distributed.init(), "single", float_weights=True)
    model, tokenizer = shard.model, shard.tokenizer
    config = json.loads((model_dir / "config.json").read_text())
    eos = {int(t) for t in (getattr(tokenizer, "eos_token_ids", None) or [])}
    prompts = [
        [
            int(t)
            for t in tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True
            )
        ]
        for p in PROMPTS
    ]
    settings = ("16", *(s for s in settings if s != "16"))
    makers = {s: cache_maker(model, config, s) for s in settings}
    answers = {
        s: [greedy(model, makers[s](), p, tokens, eos) for p in prompts]
        for s in (settings if free else ("16",))
    }
    forced = {
        s: [
            teacher_forced(model, makers[s](), p, a)
            for p, a in zip(prompts, answers["16"], strict=True)
        ]
        for s in settings
    }
    total = sum(len(a) for a in answers["16"])
    figures: dict[str, Any] = {
        "prompts": len(prompts),
        "answer_tokens": total,
        "group_size": GROUP,
        # The 16-bit pass's own choices are its greedy answer: the one forward pass over
        # prompt and answer reads what generating it read.
        "16_forced_is_its_answer_pct": _pct(
            sum(_same(f, a) for f, a in zip(forced["16"], answers["16"], strict=True)), total
        ),
    }
    for s in settings[1:]:
        agree = sum(_same(f, p) for f, p in zip(forced[s], forced["16"], strict=True))
        figures[s] = {
            "teacher_forced_as_16_pct": _pct(agree, total),
            "teacher_forced_differing_positions": total - agree,
        }
        if free:
            kept = sum(
                up_to_first_difference(p, o) for p, o in zip(answers["16"], answers[s], strict=True)
            )
            figures[s]["free_running_as_16_up_to_first_difference_pct"] = _pct(kept, total)
            figures[s]["free_running_answers_identical"] = sum(
                a == b for a, b in zip(answers["16"], answers[s], strict=True)
            )
    if "8" in forced:  # one pass gives what feeding the answer a token at a time gives
        figures["8_one_pass_is_stepwise"] = forced["8"][0] == stepwise(
            model, makers["8"](), prompts[0], answers["16"][0]
        )
    return figures


def _same(a: list[int], b: list[int]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))


def _pct(part: int, whole: int) -> float:
    return round(100 * part / max(1, whole), 1)


def measure(
    model_dir: Path, tokens: int = TOKENS, settings: tuple[str, ...] = SETTINGS, free: bool = True
) -> dict[str, Any]:
    """``measure_here`` in a process with OpenBLAS preloaded, as a CPU rank runs."""
    from core.run.job.mlxenv import cpu_rank_env
    from core.worker.blas import find_openblas

    found = find_openblas()
    env = dict(os.environ)
    env.update(
        cpu_rank_env(
            found["path"] if found else None, os.cpu_count() or 1, 1, env.get("LD_PRELOAD")
        )
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.benchmarks.kv_agreement",
            "here",
            str(model_dir),
            str(tokens),
            ",".join(settings),
            "free" if free else "forced",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
        timeout=900,
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["blas_preloaded"] = found["path"] if found else None
    return figures


if __name__ == "__main__":
    if sys.argv[1:2] == ["here"]:
        chosen = tuple(sys.argv[4].split(","))
        print(
            json.dumps(
                measure_here(Path(sys.argv[2]), int(sys.argv[3]), chosen, sys.argv[5] == "free")
            )
        )
    else:
        from core.model.demo_model import ensure_demo_model

        print(json.dumps(measure(ensure_demo_model()), indent=2))
