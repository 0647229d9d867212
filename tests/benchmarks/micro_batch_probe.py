"""Would micro-batches keep a 2-rank pipeline's stages busy? A probe, not the worker.

With one batch, a pipeline of N ranks runs one stage at a time: rank 1 (the first
layers) computes, sends the hidden state, and waits for rank 0 (the last layers, the
head, the sampling) to send the tokens back. Split the batch in M micro-batches and
rank 1 can compute micro-batch B while rank 0 computes A. This probe measures the
decoding steps alone (no requests, no events), on the demo model's real pipeline shard
(``core.worker.sharding``: the same ``PipelineStage``, float32 weights, OpenBLAS), each
way in alternating rounds:

- plain: what the worker runs, mlx-lm's ``BatchGenerator`` with the batch of ``B`` in one
  step, rank 0's tokens summed to rank 1 (``core.worker.batching``'s ``from_rank0``);
- micro: ``M`` micro-batches, each step of each queued behind the others on the
  generation stream; the tokens go back from rank 0 to rank 1 with ``send``/``recv``
  (an ``all_sum`` would make rank 1 wait for rank 0 before its next micro-batch: the
  stream runs in order), so both directions keep their own order on both ranks.

It checks greedy exactness (the micro-batched tokens equal the plain batch's) and prints
one JSON line from rank 0: tokens/s each way and their ratio.

    .venv/bin/python -m tests.benchmarks.micro_batch_probe [--batch 8] [--micro 2]

(it starts its own two local ranks with the launcher's CPU environment)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _rank_main(args: argparse.Namespace) -> None:
    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator, generation_stream
    from mlx_lm.models.cache import make_prompt_cache

    from core.worker.batching import greedy
    from core.worker.requests import from_rank0
    from core.worker.sharding import load_shard

    group = mx.distributed.init(strict=True, backend="ring")
    rank = group.rank()
    shard = load_shard(Path(args.model), group, "pipeline")
    model = shard.model
    batch, micro, steps = args.batch, args.micro, args.steps
    prompt_len = 24
    prompts = mx.array(
        [[(17 * b + 31 * i) % 4000 + 100 for i in range(prompt_len)] for b in range(batch)]
    )

    def prefill(rows: mx.array) -> tuple[list[Any], mx.array]:
        cache = make_prompt_cache(model)
        logits = model(rows, cache=cache)[:, -1, :]
        token = mx.argmax(logits, axis=-1)
        if rank != 0:
            token = token * 0
        token = mx.distributed.all_sum(token, group=group)
        mx.eval(token, [c.state for c in cache])
        return cache, token

    def plain(tokens_out: list[list[int]]) -> float:
        """The worker's own path: mlx-lm's BatchGenerator, rank 0's tokens summed to
        rank 1 (``core.worker.batching``'s sampler), one step in flight."""
        generator = BatchGenerator(
            model,
            sampler=from_rank0(greedy, group),
            completion_batch_size=batch,
            prefill_batch_size=batch,
        )
        uids = generator.insert(prompts.tolist(), max_tokens=[steps + 1] * batch)
        by_step: list[dict[int, int]] = []
        start = 0.0
        while len(by_step) < steps + 1:
            _, responses = generator.next()
            if not responses:
                continue
            if not by_step:
                start = time.perf_counter()  # the prefill's token: decoding starts
            by_step.append({r.uid: int(r.token) for r in responses})
        elapsed = time.perf_counter() - start
        mx.synchronize(generation_stream)
        generator.close()
        tokens_out.extend([step[uid] for uid in uids] for step in by_step[1:])
        return elapsed

    def generators(tokens_out: list[list[int]]) -> float:
        """Micro-batches as ``micro`` BatchGenerators stepped in turn (the smallest layer
        over mlx-lm's): each step evaluates its sampled tokens, which on rank 1 are rank
        0's (an ``all_sum``), before the next micro-batch's layers may run on the stream."""
        size = batch // micro
        made = [
            BatchGenerator(
                model,
                sampler=from_rank0(greedy, group),
                completion_batch_size=size,
                prefill_batch_size=size,
            )
            for _ in range(micro)
        ]
        uids = [
            g.insert(prompts[m * size : (m + 1) * size].tolist(), max_tokens=[steps + 1] * size)
            for m, g in enumerate(made)
        ]
        by_step: list[list[dict[int, int]]] = [[] for _ in made]
        start = 0.0
        while any(len(seen) < steps + 1 for seen in by_step):
            for m, g in enumerate(made):
                if len(by_step[m]) >= steps + 1:
                    continue
                _, responses = g.next()
                if responses:
                    by_step[m].append({r.uid: int(r.token) for r in responses})
            if not start and all(by_step):
                start = time.perf_counter()  # every prefill's token: decoding starts
        elapsed = time.perf_counter() - start
        mx.synchronize(generation_stream)
        for g in made:
            g.close()
        for step in range(1, steps + 1):
            tokens_out.append([by_step[m][step][uid] for m in range(micro) for uid in uids[m]])
        return elapsed

    def micro_batched(tokens_out: list[list[int]]) -> float:
        size = batch // micro
        parts = [prefill(prompts[m * size : (m + 1) * size]) for m in range(micro)]
        caches = [cache for cache, _ in parts]
        ys = [y for _, y in parts]
        with mx.stream(generation_stream):
            start = time.perf_counter()
            pending: list[list[mx.array | None]] = [[None] * micro for _ in range(steps)]
            for step in range(steps):
                for m in range(micro):
                    y = ys[m]
                    if step > 0:  # the tokens of this micro-batch's last step, from rank 0
                        y = mx.distributed.recv_like(y, 0, group=group) if rank != 0 else y
                    logits = model(y[:, None], cache=caches[m])[:, -1, :]
                    if rank == 0:
                        token = mx.argmax(logits, axis=-1)
                        sent = mx.distributed.send(token, 1, group=group)
                        mx.async_eval(sent, token)
                        ys[m] = token
                        pending[step][m] = token
                    else:
                        # The zeros of the skipped head keep the send in the graph.
                        done = logits[:, 0]
                        mx.async_eval(done, [c.state for c in caches[m]])
                        ys[m] = y
                        pending[step][m] = done
                if step > 0 and rank == 0:  # read the step before (already computed)
                    tokens_out.append(
                        [t for part in pending[step - 1] for t in part.tolist()]  # type: ignore[union-attr]
                    )
            # rank 1's last recvs: the final step's tokens are read by nobody, drain them
            if rank != 0:
                for m in range(micro):
                    mx.eval(mx.distributed.recv_like(ys[m], 0, group=group))
            else:
                tokens_out.append([t for part in pending[-1] for t in part.tolist()])  # type: ignore[union-attr]
            mx.synchronize(generation_stream)
            return time.perf_counter() - start

    sides = ("plain", "micro", "generators") if args.generators else ("plain", "micro")
    rounds: dict[str, list[float]] = {side: [] for side in sides}
    cpu_s = dict.fromkeys(sides, 0.0)  # this rank's CPU time, both ranks' summed below
    runs = {"plain": plain, "micro": micro_batched, "generators": generators}
    same = True
    for round_ in range(args.rounds):
        order = sides if round_ % 2 == 0 else sides[::-1]
        got: dict[str, list[list[int]]] = {}
        for side in order:
            tokens: list[list[int]] = []
            used = time.process_time()
            elapsed = runs[side](tokens)
            cpu_s[side] += time.process_time() - used
            rounds[side].append(batch * steps / elapsed)
            got[side] = tokens
        if rank == 0:
            same = same and all(got[side] == got["plain"] for side in sides)
    summed = mx.distributed.all_sum(mx.array([cpu_s[side] for side in sides]), group=group)
    both = dict(zip(sides, (float(x) for x in summed.tolist()), strict=True))  # type: ignore[union-attr]
    per_token = 1000 / (args.rounds * batch * steps)
    if rank == 0:
        plain_tps = statistics.median(rounds["plain"])
        micro_tps = statistics.median(rounds["micro"])
        print(
            json.dumps(
                {
                    "batch": batch,
                    "micro_batches": micro,
                    "steps": steps,
                    "rounds": args.rounds,
                    "plain_tps": [round(x, 2) for x in rounds["plain"]],
                    "micro_tps": [round(x, 2) for x in rounds["micro"]],
                    "micro_vs_plain": round(micro_tps / plain_tps, 3),
                    "greedy_tokens_equal": same,
                    # Both ranks' CPU time per token (prefill included on both sides): on
                    # free cores micro could gain at most 2 x plain/micro of it (its two
                    # stages fully overlapped, plain's fully serial).
                    "cpu_ms_per_token": {side: round(both[side] * per_token, 2) for side in sides},
                    **(
                        {
                            "generators_tps": [round(x, 2) for x in rounds["generators"]],
                            "generators_vs_plain": round(
                                statistics.median(rounds["generators"]) / plain_tps, 3
                            ),
                        }
                        if args.generators
                        else {}
                    ),
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                }
            ),
            flush=True,
        )


def micro_vs_plain(
    model: Path | str,
    batch: int = 8,
    micro: int = 2,
    steps: int = 32,
    rounds: int = 6,
    generators: bool = False,
) -> dict[str, Any]:
    """Start the probe's two local ranks (the launcher's CPU environment: OpenBLAS, the
    ring waits that sleep, cores shared) and return rank 0's figures."""
    from core.run.job import cpu, mlxenv

    ports = mlxenv.free_ports(2)
    with tempfile.TemporaryDirectory() as folder:
        hostfile = Path(folder) / "hostfile.json"
        hostfile.write_text(mlxenv.ring_hostfile([("127.0.0.1", port) for port in ports]))
        procs = []
        for rank in range(2):
            env = mlxenv.rank_env(rank, "ring", str(hostfile))
            env.update(cpu.local_cpu_env(2, env))
            argv = [sys.executable, "-m", "tests.benchmarks.micro_batch_probe", "--rank"]
            argv += ["--model", str(model), "--batch", str(batch), "--micro", str(micro)]
            argv += ["--steps", str(steps), "--rounds", str(rounds)]
            argv += ["--generators"] if generators else []
            out = subprocess.PIPE if rank == 0 else subprocess.DEVNULL
            procs.append(subprocess.Popen(argv, env=env, stdout=out, text=True))
        try:
            said, _ = procs[0].communicate(timeout=1800)
            codes = [procs[0].returncode, procs[1].wait(timeout=60)]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    if any(codes):
        raise RuntimeError(f"the micro-batch probe's ranks exited {codes}")
    figures: dict[str, Any] = json.loads(said.strip().splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--generators",
        action="store_true",
        help="also time micro-batches as BatchGenerators stepped in turn",
    )
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.micro < 1 or args.batch % args.micro:
        parser.error("--micro must divide --batch")
    if args.model is None:
        from core.model.demo_model import ensure_demo_model

        args.model = str(ensure_demo_model())
    if args.rank:
        _rank_main(args)
        return 0
    figures = micro_vs_plain(
        args.model, args.batch, args.micro, args.steps, args.rounds, args.generators
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
