"""The demo cluster: simulated Macs whose ranks run as processes on this machine.

Everything but the Macs is real: the model, the MLX distributed job on the
ring backend over loopback (127.0.0.1, distinct ports, so it works on a Mac
too), the planner's split, the events and the telemetry.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from core.model.info import ModelError, ModelInfo, read_model_info
from core.plan.memory import Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.run.launcher import Job, JobError, JobSpec
from core.run.telemetry import Telemetry
from core.settings import MAX_DEMO_NODES
from core.units import GIB, bytes_per_s, rate, seconds
from core.worker import protocol as p
from core.worker.vocab import Strategy

DEFAULT_PROMPT = "What is the capital of France?"


@dataclass(frozen=True)
class DemoMac:
    """A simulated Mac: what discovery and probing would report for a real one."""

    name: str
    model_id: str
    chip: str
    memory_bytes: int
    macos: str
    rdma: bool

    def node(self) -> Node:
        # The simulated Macs' ranks run here: on the CPU when this is not a Mac.
        cpu = sys.platform != "darwin"
        return Node(self.name, self.memory_bytes, chip=self.chip, rdma=self.rdma, cpu=cpu)


DEMO_MACS = (
    DemoMac("Studio A", "Mac15,14", "Apple M3 Ultra", 96 * GIB, "26.2", True),
    DemoMac("Studio B", "Mac16,9", "Apple M4 Max", 64 * GIB, "26.2", True),
    DemoMac("Studio C", "Mac15,14", "Apple M3 Ultra", 96 * GIB, "26.2", True),
    DemoMac("Studio D", "Mac16,9", "Apple M4 Max", 64 * GIB, "26.2", True),
)


def demo_macs(count: int) -> list[DemoMac]:
    if not 1 <= count <= MAX_DEMO_NODES:
        raise ValueError(f"the demo cluster has 1 to {MAX_DEMO_NODES} Macs, not {count}")
    return list(DEMO_MACS[:count])


def plan_demo(info: ModelInfo, count: int, strategy: str) -> Plan:
    """The planner's verdict for ``strategy`` on ``count`` demo Macs."""
    nodes = [mac.node() for mac in demo_macs(count)]
    if count == 1:
        strategy = Strategy.SINGLE
    return make_plan(info, nodes, options=PlanOptions(strategy=strategy))


def job_spec(info: ModelInfo, plan: Plan) -> JobSpec:
    """What runs is what was planned: the plan's strategy, rank count and split."""
    return JobSpec(
        model=info.path,
        strategy=plan.strategy,
        nodes=len(plan.ranks),
        split=list(plan.split) if plan.split and plan.strategy is Strategy.PIPELINE else None,
        weights=[rank.worker_weights for rank in plan.ranks],
    )


# One answer's length: far above any context a Mac holds, and a bound on what a typo asks.
MAX_TOKENS = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--headless", action="store_true", help="no window: print to the terminal")
    parser.add_argument("--model", type=Path, help="a model folder (default: the demo model)")
    parser.add_argument("--nodes", type=int, default=2, help="simulated Macs, 1-4 (default 2)")
    parser.add_argument("--strategy", choices=("pipeline", "tensor"), default="pipeline")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="end with one JSON summary line")


def run_headless(
    args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Plan, start, ask once, print the answer as it streams, summarise, stop."""
    try:
        info = read_model_info(args.model or _demo_model(err))
        plan = plan_demo(info, args.nodes, args.strategy)
    except (ModelError, ValueError) as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    if plan.verdict != "fits":
        err.write(f"macmesh: {plan.reason}\n")
        return 2
    if not 1 <= args.max_tokens <= MAX_TOKENS:
        err.write(f"macmesh: --max-tokens must be 1 to {MAX_TOKENS:,}\n")
        return 2
    spec = job_spec(info, plan)
    err.write(f"{info.summary()}\n{plan.reason}\nStarting {spec.nodes} rank(s)…\n")
    about = {
        "strategy": spec.rank_strategy,
        "nodes": spec.nodes,
        "split": spec.split,
        "model": info.name,
    }
    return run_and_summarise(spec, args, about, "the demo cluster", out, err)


def run_and_summarise(
    spec: JobSpec, args: argparse.Namespace, about: dict, what: str, out: TextIO, err: TextIO
) -> int:
    """Start ``spec``, ask ``args.prompt`` once streaming the answer to ``out``, stop every
    rank, then print ``about`` and the figures (one JSON line with ``args.json``). The
    exit code: 0, 1 when ``what`` (the cluster) failed, 130 when interrupted."""
    telemetry = Telemetry()
    job = Job(spec)
    job.event.connect(telemetry.feed)
    job.event.connect(lambda event: print_token(event, out))
    job.start()
    try:
        job.wait_ready()
        figures = ask_once(job, telemetry, args.prompt, args.max_tokens)
    except JobError as exc:
        err.write(f"\nmacmesh: {what} failed: {exc}\nLogs: {job.run_dir}\n")
        return 1
    except KeyboardInterrupt:
        err.write("\nmacmesh: interrupted; stopping every rank\n")
        return 130
    finally:
        job.stop()
    summary = {**about, **figures, "ranks": telemetry.rank_facts()}
    out.write("\n")
    out.write(json.dumps(summary) + "\n" if args.json else human_summary(summary))
    out.flush()
    return 0


def ask_once(job: Job, telemetry: Telemetry, prompt: str, max_tokens: int) -> dict:
    before = telemetry.link_totals()
    started = time.monotonic()
    request = job.generate(prompt, max_tokens=max_tokens)
    telemetry.request_started(request, started)
    done = job.wait_done(request)
    elapsed = max(time.monotonic() - started, 1e-9)
    time.sleep(p.TRAFFIC_S + 0.2)  # the ranks' last traffic reports of this request
    after = telemetry.link_totals()
    summary = next((r for r in telemetry.requests() if r.id == request), None)
    return {
        "prompt_tokens": done["prompt_tokens"],
        "prompt_tps": done["prompt_tps"],
        "generation_tokens": done["generation_tokens"],
        "generation_tps": done["generation_tps"],
        "avg_tps": summary.avg_tps if summary else None,
        "ttft_s": summary.ttft_s if summary and summary.ttft_s is not None else done["ttft_s"],
        "link_bytes_per_s": {
            link: round((after.get(link, 0) - before.get(link, 0)) / elapsed, 1) for link in after
        },
        "finish_reason": done["finish_reason"],
        "text": done["text"],
    }


def print_token(event: dict, out: TextIO) -> None:
    if event["event"] == p.TOKEN:
        out.write(event["text"])
        out.flush()


def human_summary(summary: dict) -> str:
    links = ", ".join(f"{k} {bytes_per_s(v)}" for k, v in summary["link_bytes_per_s"].items())
    return (
        f"{summary['strategy']} on {summary['nodes']} node(s): "
        f"{rate(summary['generation_tps'])} tokens/s, first token after "
        f"{seconds(summary['ttft_s'])}, prompt {rate(summary['prompt_tps'])} tokens/s"
        + (f"; links: {links}" if links else "")
        + "\n"
    )


def _demo_model(err: TextIO) -> Path:
    from core.model.demo_model import demo_model_dir, ensure_demo_model, is_complete

    if not is_complete(demo_model_dir()):
        err.write("Preparing the demo model (once)…\n")
    return ensure_demo_model()
