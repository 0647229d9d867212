"""Worker entry point: join the cluster, load this rank's shard, serve.

Run by the launcher as ``python -m core.worker --model PATH --strategy S``
with MLX's environment contract (MLX_RANK plus MLX_HOSTFILE for ring, or
MLX_IBV_DEVICES and MLX_JACCL_COORDINATOR for jaccl). With ``--prompt`` it
runs one request and exits: the form ``mlx.launch`` can start by hand.
``--version`` prints what this worker is (``version.py``) and exits.
"""

from __future__ import annotations

import argparse
import os
import queue
import socket
import sys
import time
import traceback
from typing import TYPE_CHECKING

import mlx.core as mx

from core.worker import kvbits, ringwait
from core.worker import protocol as p
from core.worker.blas import blas_report
from core.worker.reporter import Reporter
from core.worker.residency import METER, measure_name
from core.worker.version import print_version
from core.worker.vocab import Backend, LoadingStage, Strategy, Task

if TYPE_CHECKING:  # mlx-lm takes seconds to import: the worker imports it once beating
    from core.worker.requests import Commands

# What a rank runs: ``auto`` is only ever a request, settled before a rank starts.
STRATEGIES = tuple(s for s in Strategy if s is not Strategy.AUTO)
BACKENDS = tuple(b for b in Backend if b is not Backend.AUTO)
WEIGHTS = ("auto", "float", "quantized")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m core.worker", description=__doc__)
    parser.add_argument("--model", required=True, help="the model folder on this node")
    # Plain values as choices: argparse's messages then read "pipeline", not the enum's repr.
    parser.add_argument(
        "--strategy", choices=[s.value for s in STRATEGIES], default=Strategy.PIPELINE.value
    )
    parser.add_argument(
        "--backend", choices=[b.value for b in BACKENDS], default=Backend.RING.value
    )
    parser.add_argument(
        "--split", help="pipeline layers per rank, rank order, e.g. 12,18 (default: even)"
    )
    parser.add_argument(
        "--weights",
        choices=WEIGHTS,
        default="auto",
        help="on the CPU: dequantize to float32, keep quantized, or auto (when memory has room)",
    )
    parser.add_argument(
        "--adapter", help="an mlx-lm adapter folder on this node, fused into the model"
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=p.DEFAULT_BATCH,
        help="requests generating at once (1: one at a time, each in full)",
    )
    parser.add_argument(
        "--prompt-cache-mb",
        type=int,
        default=p.DEFAULT_PROMPT_CACHE_MB,
        help="KV caches kept between requests, at most this many MB a rank (0: none)",
    )
    parser.add_argument(
        "--kv-bits",
        type=int,
        default=kvbits.NONE,
        help="store the KV cache quantized at 8 or 4 bits (16: as computed; core.worker.kvquant)",
    )
    parser.add_argument(
        "--kv-group-size",
        type=int,
        default=kvbits.DEFAULT_GROUP_SIZE,
        help="elements sharing one scale in the quantized KV cache (32, 64 or 128)",
    )
    parser.add_argument("--prompt", help="run this one request, then exit")
    parser.add_argument("--max-tokens", type=int, default=p.DEFAULT_MAX_TOKENS)
    parser.add_argument("--no-chat", action="store_true", help="send --prompt as raw text")
    parser.add_argument("--task", choices=[t.value for t in Task], default=Task.CHAT.value)
    parser.add_argument("--data", help="finetune: the data folder (train.jsonl, valid.jsonl)")
    parser.add_argument("--settings", help="finetune: the settings, JSON or a JSON file")
    parser.add_argument("--out", help="finetune: the adapter folder to write (rank 0)")
    parser.add_argument(
        "--version", action="store_true", help="print one JSON line of versions, then exit"
    )
    args = parser.parse_args(argv)
    args.strategy, args.backend = Strategy(args.strategy), Backend(args.backend)
    args.task = Task(args.task)
    if not 1 <= args.batch <= p.MAX_BATCH:
        parser.error(f"--batch must be 1 to {p.MAX_BATCH}")
    if args.prompt_cache_mb < 0:
        parser.error("--prompt-cache-mb must be 0 (none) or more")
    try:
        kvbits.check(args.kv_bits, args.kv_group_size)
    except ValueError as error:
        parser.error(str(error))
    if args.task is Task.FINETUNE and not (args.data and args.settings and args.out):
        parser.error("--task finetune needs --data, --settings and --out")
    return args


def init_group(backend: Backend) -> mx.distributed.Group:
    if backend is Backend.SINGLE:
        return mx.distributed.init()
    # MLX knows one RDMA backend: a ring of cables and a full mesh differ only in devices.
    mlx_backend = Backend.JACCL if backend.is_jaccl else backend
    return mx.distributed.init(strict=True, backend=mlx_backend.value)


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv) == ["--version"]:
        return print_version()
    args = parse_args(argv)
    rank = int(os.environ.get("MLX_RANK", "0"))
    # stdout carries events only: anything a library prints goes to the log.
    events = p.EventWriter(rank, sys.stdout)
    sys.stdout = sys.stderr
    # Beat from here on, saying the stage: silence then names the rank that hangs.
    reporter = Reporter(events, stage=LoadingStage.STARTING)
    reporter.start()
    try:
        return _main(args, rank, events, reporter)
    finally:
        reporter.stop()


def _main(args: argparse.Namespace, rank: int, events: p.EventWriter, reporter: Reporter) -> int:
    # Imported once the heartbeat runs: mlx-lm takes seconds to import.
    from core.worker.serve import read_commands
    from core.worker.sharding import ShardError
    from core.worker.traffic import TrafficCounter

    telemetry = os.environ.get(p.ENV_TELEMETRY, "1") != "0"
    commands = None if args.prompt else read_commands(events, rank)
    reporter.enter(LoadingStage.JOINING)
    if commands is not None and os.environ.get(p.ENV_JOIN) == "1" and not wait_for_join(commands):
        events.write(p.Stopped(event=p.STOPPED, rank=rank, t=time.monotonic()))
        return 0
    reporter.beat()  # told to join: this rank was alive then (MLX's init is silent)
    try:
        group = init_group(args.backend)
    except Exception as exc:
        said = f"Rank {rank} could not join the cluster: {exc}"
        events.write(
            p.Error(event=p.ERROR, rank=rank, t=time.monotonic(), message=said, fatal=True)
        )
        return 1
    counter = TrafficCounter(group.rank(), group.size(), args.backend) if telemetry else None
    if counter is not None:
        counter.install()
    reporter.counter = counter
    events.write(
        p.Hello(
            event=p.HELLO,
            rank=rank,
            t=time.monotonic(),
            size=group.size(),
            backend=args.backend,
            strategy=args.strategy,
            pid=os.getpid(),
            host=socket.gethostname(),
        )
    )
    try:
        run(args, group, events, reporter, commands, telemetry)
    except ShardError as exc:
        said = f"Rank {rank}: {exc}"
        events.write(
            p.Error(event=p.ERROR, rank=rank, t=time.monotonic(), message=said, fatal=True)
        )
        return 1
    except Exception as exc:
        traceback.print_exc()
        said = f"Rank {rank} failed: {type(exc).__name__}: {exc}"
        events.write(
            p.Error(event=p.ERROR, rank=rank, t=time.monotonic(), message=said, fatal=True)
        )
        return 1
    # Every rank's last word on its generation's peak (rank 0's done says it per answer).
    stopped = p.Stopped(event=p.STOPPED, rank=rank, t=time.monotonic())
    peak = METER.peak() if METER.loaded else None
    if peak is not None:
        stopped["peak_generation_bytes"] = peak
    events.write(stopped)
    return 0


def wait_for_join(commands: queue.Queue[p.Command]) -> bool:
    """Wait (heartbeating) for the controller's ``join``; False when told to stop first."""
    while True:
        op = commands.get()["op"]
        if op == p.OP_JOIN:
            return True
        if op == p.OP_STOP:
            return False


def run(
    args: argparse.Namespace,
    group: mx.distributed.Group,
    events: p.EventWriter,
    reporter: Reporter,
    commands: Commands | None,
    telemetry: bool,
) -> None:
    # lazy (start-up order): mlx-lm takes seconds to import; the heartbeat runs first
    from core.worker.serve import generate, serve
    from core.worker.sharding import ShardError, load_shard, synchronise

    if args.task is Task.FINETUNE:
        from core.worker.finetune import finetune

        finetune(args, group, events, reporter, commands)
        return
    started = time.monotonic()
    split = [int(n) for n in args.split.split(",")] if args.split else None
    shard = load_shard(
        args.model,
        group,
        args.strategy,
        split,
        progress=reporter.enter,
        float_weights={"auto": None, "float": True, "quantized": False}[args.weights],
        adapter=args.adapter,
    )
    if args.kv_bits != kvbits.NONE:
        from core.worker.kvquant import install

        try:  # every rank alike: its held full-attention layers' caches quantized
            layers = install(shard.model, args.kv_bits, args.kv_group_size, shard.config)
        except ValueError as error:
            raise ShardError(f"The KV cache cannot be quantized: {error}") from None
        sys.stderr.write(  # the rank's log: what its caches are
            f"macmesh worker: the KV cache of {layers} layers quantized at {args.kv_bits} "
            f"bits, groups of {args.kv_group_size}\n"
        )
    on_cpu = mx.default_device() == mx.cpu
    reporter.stage = None  # loaded: heartbeats carry no stage from here on
    peak_load = METER.next_phase()  # heartbeats say the generation's peak from here on
    loaded = p.Loaded(
        event=p.LOADED,
        rank=events.rank,
        t=time.monotonic(),
        load_s=round(time.monotonic() - started, 3),
        memory_bytes=int(mx.get_active_memory()),
        layers=list(shard.layers) if shard.layers else None,
        strategy=args.strategy,
        device="cpu" if on_cpu else "gpu",
        # A rank on the reference BLAS is ~30x slower: say what this one runs on.
        blas=blas_report() if on_cpu else None,
        weights=shard.weights,
    )
    # Whether its ring waits sleep (core.worker.ringwait) or spin, holding a core.
    loaded["ring_wait"] = ringwait.active() if on_cpu else None
    if shard.adapter:
        loaded["adapter"] = shard.adapter
    # This rank's peak while loading and what it held before the weights (residency).
    loaded["memory_measure"], loaded["base_bytes"] = measure_name(), METER.base
    loaded["peak_load_bytes"] = peak_load
    events.write(loaded)
    synchronise(group)
    if group.rank() == 0:
        events.write(p.Ready(event=p.READY, rank=events.rank, t=time.monotonic()))
    if args.prompt:
        command = p.GenerateCommand(
            op=p.OP_GENERATE,
            id="cli",
            prompt=args.prompt,
            max_tokens=args.max_tokens,
            chat=not args.no_chat,
        )
        generate(shard, command, events, group.rank(), telemetry)
        return
    assert commands is not None  # read_commands ran: there is no --prompt
    kv = (args.kv_bits, args.kv_group_size)
    serve(shard, group, events, commands, telemetry, args.batch, args.prompt_cache_mb << 20, kv)
