"""``macmesh plan MODEL [--node NAME:MEM_GB[@CHIP] ...]``: what fits where, why, and an
estimate of how fast it would decode on those Macs.

It reads the model folder (headers only; a folder whose files hold nothing but their
headers is planned too, and the plan says the weights are absent) and plans it on the
Macs given with ``--node``,
or on this machine alone when none are given: the first question a person asks is "does
it fit on my Mac?", and the answer says which machine it assumed. The table and the JSON
are ``core.plan.report``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
from typing import TextIO

from core.cli.interrupt import INTERRUPTED
from core.cli.options import add_split_argument
from core.library.resolve import resolve_model
from core.model.info import ModelError
from core.plan.chips import CHIPS, normalise_chip
from core.plan.choose import plan_by_speed
from core.plan.kvcontext import context_fits
from core.plan.memory import Link, Node, PlanOptions
from core.plan.report import format_plan, plan_to_dict
from core.plan.split import parse_split
from core.settings import load_settings
from core.units import GIB, MIB
from core.worker import kvbits
from core.worker.vocab import Strategy

# Far above any Mac (512 GB today), low enough that every byte count stays an ordinary
# number: an absurd value is a typo, said so, not a plan.
MAX_NODE_GB = 1_000_000
MAX_WIRED_MB = MAX_NODE_GB * 1024
MAX_CONTEXT = 1_000_000_000
MAX_BATCH = 100_000
WEIGHTS_ABSENT = (
    "Planned from the safetensors headers alone: the weights are not on this Mac "
    "(download the model to run it)."
)


def parse_node(text: str) -> Node:
    """NAME:MEM_GB[:WIRED_LIMIT_MB][@CHIP] → Node; ValueError with the expected form
    otherwise. The chip ("M3 Ultra", "m4-max") gives the plan its speed estimate."""
    chip = None
    head, at, tail = text.rpartition("@")
    if at and ":" not in tail:
        chip = normalise_chip(tail)
        if chip is None:
            raise ValueError(
                f"{text[:60]!r}: unknown chip {tail[:30]!r}; known: {', '.join(CHIPS)}"
            )
        text = head
    parts = text.split(":")
    form = "expected NAME:MEM_GB[:WIRED_LIMIT_MB][@CHIP], e.g. studio:192@M3-Ultra or mini:64:57344"
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
    return Node(parts[0].strip(), int(memory * GIB), wired_limit_mb=wired, chip=chip)


def this_machine() -> Node:
    """This computer as a node: physical memory, and on macOS its iogpu.wired_limit_mb."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    wired = chip = None
    if platform.system() == "Darwin":
        memory = int(_sysctl("hw.memsize") or memory)
        wired = int(_sysctl("iogpu.wired_limit_mb") or 0) or None
        chip = _sysctl("machdep.cpu.brand_string", number=False)  # "Apple M3 Ultra"
    name = socket.gethostname().split(".")[0] or "this-mac"
    return Node(name, memory, wired_limit_mb=wired, chip=chip)


def _sysctl(name: str, *, number: bool = True) -> str | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    value = out.stdout.strip()
    return value if out.returncode == 0 and value and (value.isdecimal() or not number) else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="macmesh plan",
        description="Plan how to run a model folder on one or more Macs: strategy, layers "
        "per Mac, memory per Mac, and whether it fits.",
        epilog="Without --node the plan is for this machine alone (its physical memory and, "
        "on macOS, its iogpu.wired_limit_mb). GB are 2^30 bytes, as Apple sizes memory. "
        "Exit status: 0 it fits, 1 it does not fit or the strategy is invalid, 2 bad input.",
    )
    parser.add_argument(
        "model",
        help="a model folder (config.json + safetensors; files holding only their headers "
        "are enough to plan, and the plan says the weights are absent), a name `macmesh "
        "models` lists (ORG/NAME), or hf:ORG/NAME (the cached copy, else planned from the "
        "Hub's headers without downloading)",
    )
    parser.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME:MEM_GB[:WIRED_MB][@CHIP]",
        help="a Mac and its memory in GB, optionally its iogpu.wired_limit_mb and its chip "
        "(@M3-Ultra, @M4-Max, ...: it gives the plan a speed estimate); repeat for each Mac",
    )
    parser.add_argument(
        "--strategy",
        choices=[s.value for s in Strategy],
        default=Strategy.AUTO.value,
        help="auto (default) recommends one: with every chip known (@CHIP), the fastest "
        "estimate among the strategies that fit",
    )
    parser.add_argument(
        "--context",
        type=int,
        default=PlanOptions.context_length,
        metavar="N",
        help="context length in tokens to reserve KV cache for (default 4096)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help="sequences generated at once (default: the batch setting, what a chat job runs)",
    )
    parser.add_argument(
        "--prompt-cache-mb",
        type=int,
        metavar="MB",
        help="each rank's prompt cache bound, counted in its share (default: the "
        "prompt_cache_mb setting; 0: none)",
    )
    parser.add_argument(
        "--kv-bits",
        type=int,
        metavar="BITS",
        help="the KV cache quantized at 8 or 4 bits (16: not; default: the kv_bits "
        "setting); the plan then shows the longest context at 16 bits and at these",
    )
    parser.add_argument(
        "--kv-group-size",
        type=int,
        metavar="N",
        help="the quantized KV cache's group size, 32, 64 or 128 (default: the "
        "kv_group_size setting)",
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
    add_split_argument(parser)
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
    saved = load_settings()
    args.batch = saved.batch if args.batch is None else args.batch
    if args.prompt_cache_mb is None:
        args.prompt_cache_mb = saved.prompt_cache_mb
    if args.prompt_cache_mb < 0:
        parser.error("--prompt-cache-mb must be 0 (none) or more")
    args.kv_bits = saved.kv_bits if args.kv_bits is None else args.kv_bits
    if args.kv_group_size is None:
        args.kv_group_size = saved.kv_group_size
    try:
        kvbits.check(args.kv_bits, args.kv_group_size)
    except ValueError as error:
        parser.error(str(error))
    if not (1 <= args.context <= MAX_CONTEXT and 1 <= args.batch <= MAX_BATCH):
        parser.error(
            f"--context must be 1 to {MAX_CONTEXT:,} tokens and --batch 1 to {MAX_BATCH:,}"
        )
    if not 0 <= args.margin < 1:  # also refuses nan
        parser.error("--margin must be between 0 and 1")
    if args.split is not None:
        try:
            args.split = parse_split(args.split)
        except ValueError as error:
            parser.error(str(error))
    return args, nodes


def plan_cli(argv: list[str], out: TextIO | None = None) -> int:
    """``macmesh plan MODEL [--node NAME:MEM_GB ...] ...``; returns the exit status."""
    out = out or sys.stdout
    try:  # argparse reports bad input (and --help) by exiting: return its status instead
        args, nodes = _parse(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 2
    try:
        model = resolve_model(args.model)
    except ModelError as error:
        print(f"macmesh plan: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while the Hub is asked (hf:ORG/NAME): one line
        print("macmesh: interrupted; nothing was planned", file=sys.stderr)
        return INTERRUPTED
    links = [Link(a.name, b.name, 80.0, True) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]
    options = PlanOptions(
        strategy=args.strategy,
        context_length=args.context,
        batch=args.batch,
        prompt_cache_bytes=args.prompt_cache_mb * MIB,
        kv_bits=args.kv_bits,
        kv_group_size=args.kv_group_size,
        margin_fraction=args.margin,
        split=args.split,
    )
    links = links if args.rdma else []
    choice = plan_by_speed(model, nodes, links, options)
    plan, estimate = choice.plan, choice.estimate
    contexts = context_fits(model, nodes, plan, links)
    if args.json:
        data = plan_to_dict(plan, estimate)
        data["estimates_by_strategy"] = {
            strategy.value: e.to_dict() for strategy, e in choice.per_strategy.items()
        }
        data["weights_absent"] = model.weights_absent
        data["longest_context_by_kv_bits"] = {str(c.bits): c.tokens for c in contexts}
        text = json.dumps(data, indent=2)
    else:
        text = format_plan(plan, estimate)
        if len(choice.per_strategy) > 1:
            text += "\nEstimate per strategy:\n" + "\n".join(f"  {line}" for line in choice.lines())
        text += "\nLongest context that fits, this plan's batch and prompt cache:\n"
        text += "\n".join(f"  {c.line()}" for c in contexts)
        if model.weights_absent:
            text += f"\n{WEIGHTS_ABSENT}"
    print(text, file=out)
    return 0 if plan.fits else 1
