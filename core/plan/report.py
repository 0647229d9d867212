"""A Plan for people and programs: a readable table, a JSON-able dict, and ``macmesh plan``.

The CLI reads the model folder (headers only) and plans it on the Macs given with
``--node``, or on this machine alone when none are given: the first question a person asks
is "does it fit on my Mac?", and the answer says which machine it assumed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from core.model.info import ModelError, read_model_info
from core.plan.memory import Link, Node, PlanOptions
from core.plan.planner import Plan, RankPlan, make_plan
from core.units import BYTES_NOTE, GIB, size
from core.worker.vocab import Strategy

_VERDICTS = {"fits": "fits", "does_not_fit": "does NOT fit", "invalid": "invalid"}


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """Everything in the Plan plus the derived numbers (usable, need, fits), JSON-able."""
    even = plan.mlx_even_split
    return {
        "model": plan.model,
        "requested": plan.requested,
        "strategy": plan.strategy,
        "verdict": plan.verdict,
        "reason": plan.reason,
        "nodes_used": list(plan.nodes_used),
        "split": list(plan.split) if plan.split is not None else None,
        "ranks": [_rank_dict(rank) for rank in plan.ranks],
        "budgets": [
            {**asdict(budget), "usable_bytes": budget.usable_bytes} for budget in plan.budgets
        ],
        "missing_bytes": plan.missing_bytes,
        "unused_bytes": plan.unused_bytes,
        "mlx_even_split": None
        if even is None
        else {
            "split": list(even.split),
            "fits": even.fits,
            "worst_node": even.worst.node,
            "worst_overflow_bytes": even.worst.overflow_bytes,
            "ranks": [_rank_dict(rank) for rank in even.ranks],
        },
        "alternatives": [asdict(alternative) for alternative in plan.alternatives],
        "warnings": list(plan.warnings),
        "options": asdict(plan.options),
        "kv_bytes_per_token": plan.kv_bytes_per_token,
    }


def _rank_dict(rank: RankPlan) -> dict[str, Any]:
    return {
        **asdict(rank),
        "layers": rank.layers,
        "need_bytes": rank.need_bytes,
        "usable_bytes": rank.usable_bytes,
        "fits": rank.fits,
        "overflow_bytes": rank.overflow_bytes,
    }


def format_plan(plan: Plan) -> str:
    """The plan as a person reads it: verdict and reason, then one row per rank."""
    lines = [f"{plan.model}: {plan.strategy} ({_VERDICTS[plan.verdict]})", plan.reason, ""]
    if plan.ranks:
        header = (
            "rank",
            "node",
            "layers",
            "weights",
            "KV cache",
            "activations",
            "margin",
            "total",
            "GPU limit",
            "free",
        )
        rows = [header] + [_row(plan, rank) for rank in plan.ranks]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines += [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ]
        lines.append("")
    even = plan.mlx_even_split
    if even is not None and plan.strategy is Strategy.PIPELINE:
        worst = even.worst
        counts = "/".join(str(c) for c in even.split)
        if even.fits:
            lines.append(f"MLX's even split ({counts}) would also fit.")
        else:
            lines.append(
                f"MLX's even split ({counts}) would need {size(worst.need_bytes)} on {worst.node}, "
                f"{size(worst.overflow_bytes)} more than it can give."
            )
    lines.append("Nodes:")
    for budget in plan.budgets:
        lines.append(
            f"  {budget.node}: {size(budget.memory_bytes)} RAM, GPU limit "
            f"{size(budget.gpu_limit_bytes)} ({budget.gpu_limit_source}), margin "
            f"{size(budget.margin_bytes)}, usable {size(budget.usable_bytes)}"
        )
    if plan.alternatives:
        lines.append("Other strategies:")
        lines += [f"  {a.strategy}: {_VERDICTS[a.verdict]}. {a.reason}" for a in plan.alternatives]
    if plan.warnings:
        lines.append("Warnings:")
        lines += [f"  - {warning}" for warning in plan.warnings]
    options = plan.options
    lines.append(
        f"Context {options.context_length} tokens, batch {options.batch}; KV cache "
        f"{size(plan.kv_bytes_per_token)} per token. {BYTES_NOTE}."
    )
    return "\n".join(lines)


def _row(plan: Plan, rank: RankPlan) -> tuple[str, ...]:
    if plan.strategy is Strategy.TENSOR:
        layers = f"all {rank.layers} (1/{len(plan.ranks)})"
    else:
        layers = f"{rank.layer_start}-{rank.layer_end - 1} ({rank.layers})"
    free = rank.usable_bytes - rank.need_bytes
    return (
        str(rank.rank),
        rank.node,
        layers,
        size(rank.weights_bytes),
        size(rank.kv_cache_bytes),
        size(rank.activation_bytes),
        size(rank.margin_bytes),
        size(rank.need_bytes + rank.margin_bytes),
        size(rank.gpu_limit_bytes),
        size(free) if free >= 0 else f"-{size(-free)} OVER",
    )


# Far above any Mac (512 GB today), low enough that every byte count stays an ordinary
# number: an absurd value is a typo, said so, not a plan.
MAX_NODE_GB = 1_000_000
MAX_WIRED_MB = MAX_NODE_GB * 1024
MAX_CONTEXT = 1_000_000_000
MAX_BATCH = 100_000


def parse_node(text: str) -> Node:
    """NAME:MEM_GB[:WIRED_LIMIT_MB] → Node; ValueError with the expected form otherwise."""
    parts = text.split(":")
    form = "expected NAME:MEM_GB or NAME:MEM_GB:WIRED_LIMIT_MB, e.g. studio:192 or mini:64:57344"
    if len(parts) not in (2, 3) or not parts[0].strip():
        raise ValueError(f"{text!r}: {form}")
    try:
        memory = float(parts[1])
        wired = int(parts[2]) if len(parts) == 3 else None
    except ValueError:  # also a 5000-digit number
        raise ValueError(f"{text[:60]!r}: {form}") from None
    # not (0 < x <= max) also refuses nan; inf and 1e400 are above the limit.
    if not 0 < memory <= MAX_NODE_GB or (wired is not None and not 0 <= wired <= MAX_WIRED_MB):
        raise ValueError(
            f"{text[:60]!r}: memory must be more than 0 and at most {MAX_NODE_GB:,} GB, "
            f"the wired limit 0 to {MAX_WIRED_MB:,} MB"
        )
    return Node(parts[0].strip(), int(memory * GIB), wired_limit_mb=wired)


def this_machine() -> Node:
    """This computer as a node: physical memory, and on macOS its iogpu.wired_limit_mb."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    wired = None
    if platform.system() == "Darwin":
        memory = int(_sysctl("hw.memsize") or memory)
        wired = int(_sysctl("iogpu.wired_limit_mb") or 0) or None
    return Node(socket.gethostname().split(".")[0] or "this-mac", memory, wired_limit_mb=wired)


def _sysctl(name: str) -> str | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip().isdecimal() else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="macmesh plan",
        description="Plan how to run a model folder on one or more Macs: strategy, layers "
        "per Mac, memory per Mac, and whether it fits.",
        epilog="Without --node the plan is for this machine alone (its physical memory and, "
        "on macOS, its iogpu.wired_limit_mb). GB are 2^30 bytes, as Apple sizes memory. "
        "Exit status: 0 it fits, 1 it does not fit or the strategy is invalid, 2 bad input.",
    )
    parser.add_argument("model", type=Path, help="a model folder (config.json + safetensors)")
    parser.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME:MEM_GB[:WIRED_MB]",
        help="a Mac and its memory in GB, optionally its iogpu.wired_limit_mb; repeat for each Mac",
    )
    parser.add_argument(
        "--strategy",
        choices=[s.value for s in Strategy],
        default=Strategy.AUTO.value,
        help="auto (default) recommends one",
    )
    parser.add_argument(
        "--context",
        type=int,
        default=PlanOptions.context_length,
        metavar="N",
        help="context length in tokens to reserve KV cache for (default 4096)",
    )
    parser.add_argument(
        "--batch", type=int, default=1, metavar="N", help="sequences generated at once (default 1)"
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=PlanOptions.margin_fraction,
        metavar="FRACTION",
        help="share of each GPU limit kept free (default 0.05)",
    )
    parser.add_argument(
        "--rdma",
        action="store_true",
        help="every pair of Macs is cabled with RDMA over Thunderbolt 5",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    return parser


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[Node]]:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        nodes = [parse_node(text) for text in args.node] or [this_machine()]
    except ValueError as error:
        parser.error(f"--node {error}")
    if len({node.name for node in nodes}) != len(nodes):
        parser.error("--node: every Mac needs its own name")
    if not (1 <= args.context <= MAX_CONTEXT and 1 <= args.batch <= MAX_BATCH):
        parser.error(
            f"--context must be 1 to {MAX_CONTEXT:,} tokens and --batch 1 to {MAX_BATCH:,}"
        )
    if not 0 <= args.margin < 1:  # also refuses nan
        parser.error("--margin must be between 0 and 1")
    return args, nodes


def plan_cli(argv: list[str], out: TextIO | None = None) -> int:
    """``macmesh plan MODEL [--node NAME:MEM_GB ...] ...``; returns the exit status."""
    out = out or sys.stdout
    try:  # argparse reports bad input (and --help) by exiting: return its status instead
        args, nodes = _parse(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 2
    try:
        model = read_model_info(args.model)
    except ModelError as error:
        print(f"macmesh plan: {error}", file=sys.stderr)
        return 2
    links = [Link(a.name, b.name, 80.0, True) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]
    options = PlanOptions(
        strategy=args.strategy,
        context_length=args.context,
        batch=args.batch,
        margin_fraction=args.margin,
    )
    plan = make_plan(model, nodes, links if args.rdma else (), options)
    text = json.dumps(plan_to_dict(plan), indent=2) if args.json else format_plan(plan)
    print(text, file=out)
    return 0 if plan.fits else 1
