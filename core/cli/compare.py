"""``macmesh compare``: one Mac against the cluster, the same prompt and tokens.

``macmesh compare MODEL --hosts a,b,...`` on real Macs, ``macmesh compare --demo
[--nodes N]`` on the demo cluster. It runs the prompt on the strongest Mac that holds
the model alone, then on the cluster, and prints both runs side by side with the
speedup, or why there is none (``--json``: one document with both runs and the ratio).
With ``--adapter PATH`` it compares answers instead: the base model, then base + the
adapter, on the same nodes, the two answers side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TextIO, TypeVar

from core.cli.answer import DEFAULT_PROMPT, check_max_tokens
from core.cli.demo import demo_model_said
from core.cli.interrupt import Stage, first_interrupt_only, interrupted
from core.cli.options import add_adapter_argument, add_split_argument, split_of
from core.cli.steps import follow
from core.cli.where import add_where_arguments, where_hosts
from core.library.resolve import resolve_model
from core.model.info import ModelError, read_model_info
from core.run.errors import ClusterError
from core.run.job.launcher import JobError
from core.run.planning import EstimateBeside, estimate_cell
from core.run.tasks.compare import (
    AdapterComparison,
    Comparison,
    RunFigures,
    compare,
    compare_adapter,
    headlines,
)
from core.units import rate, seconds, size
from core.worker.vocab import Strategy

Compared = TypeVar("Compared", Comparison, AdapterComparison)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        nargs="?",
        help="a model folder, a name `macmesh models` lists, or hf:ORG/NAME once downloaded "
        "(--demo: optional)",
    )
    add_where_arguments(parser)
    parser.add_argument(
        "--strategy", choices=(Strategy.PIPELINE, Strategy.TENSOR), default=Strategy.PIPELINE
    )
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-tokens", type=int, default=48)
    add_split_argument(parser)
    add_adapter_argument(
        parser,
        "compare the base model with base + this adapter (folder or name), on the same nodes",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def compare_cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="macmesh compare", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    stage = Stage("reading the model")
    with first_interrupt_only():
        try:
            return run_compare(args, sys.stdout, sys.stderr, stage)
        except KeyboardInterrupt:
            return interrupted(stage, sys.stderr)


def run_compare(args: argparse.Namespace, out: TextIO, err: TextIO, stage: Stage) -> int:
    try:
        check_max_tokens(args.max_tokens)
        hosts = where_hosts(args, "a comparison needs")
        if args.model is None and not args.demo:
            raise ClusterError("name the model folder to compare (or use --demo)")
        if args.model:
            info = resolve_model(args.model, to_run=True)
        else:
            info = read_model_info(demo_model_said(err, stage))
    except (ClusterError, ModelError, ValueError) as exc:
        err.write(f"macmesh: {exc}\n")
        return 2

    watch = follow(stage, err)  # each run named, its checks with their fixes, its copies

    if args.adapter:
        return _said(
            lambda: compare_adapter(
                info,
                hosts,
                args.strategy,
                args.prompt,
                args.max_tokens,
                args.adapter,
                watch=watch,
                split=split_of(args),
            ),
            answers_side_by_side,
            args.json,
            out,
            err,
        )
    return _said(
        lambda: compare(
            info,
            hosts,
            args.strategy,
            args.prompt,
            args.max_tokens,
            watch=watch,
            split=split_of(args),  # read inside _said: a bad --split is one line
        ),
        lambda result: side_by_side(result, result.beside),
        args.json,  # with the estimates, and "lead": what the window shows large
        out,
        err,
    )


def _said(
    run: Callable[[], Compared],
    as_text: Callable[[Compared], str],
    as_json: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    """Run a comparison task and print its result (``--json``: its dict): exit 2 when it
    cannot start, 1 when a run failed, 0 once printed (a run not kept said on ``err``)."""
    try:
        result = run()
    except (ClusterError, ValueError) as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    except JobError as exc:
        err.write(f"macmesh: the comparison failed: {exc}\n")
        return 1
    if result.not_kept:
        err.write(f"macmesh: {result.not_kept}\n")
    out.write(json.dumps(result.to_dict()) + "\n" if as_json else as_text(result))
    return 0


def answers_side_by_side(result: AdapterComparison) -> str:
    """The two runs' figures in columns, then each answer in full, then the headline."""
    runs = [result.base, result.adapted]
    rows = [
        ("", [f"{r.label} ({', '.join(r.nodes)})" for r in runs]),
        ("generation", [f"{rate(r.generation_tps)} tokens/s" for r in runs]),
        ("tokens", [str(r.generation_tokens) for r in runs]),
    ]
    width = max(len(cell) for _, cells in rows for cell in cells)
    lines = [f"{name:<12} " + "  ".join(f"{c:<{width}}" for c in cells) for name, cells in rows]
    for run in runs:
        lines += ["", f"{run.label}:", *(f"  {line}" for line in run.text.strip().splitlines())]
    lines += ["", result.headline()]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def side_by_side(result: Comparison, beside: EstimateBeside | None = None) -> str:
    """The two runs' figures in columns, the estimate for the real Macs beside them, the
    headline (on the demo: the estimate for the real Macs, then what the simulated Macs
    measured, said plainly to share this machine's cores and loopback)."""
    runs: list[RunFigures] = [r for r in (result.single, result.cluster) if r is not None]
    beside = beside or EstimateBeside({}, simulated=False)
    estimated = [beside.estimates.get(r.label) for r in runs]
    rows = [
        ("", [f"{r.label} ({', '.join(r.nodes)})" for r in runs]),
        ("generation", [f"{rate(r.generation_tps)} tokens/s" for r in runs]),
        ("prompt", [f"{rate(r.prompt_tps)} tokens/s" for r in runs]),
        ("first token", [seconds(r.ttft_s) if r.ttft_s is not None else "—" for r in runs]),
        (
            "memory",
            [", ".join(f"{n} {size(b)}" for n, b in r.memory_bytes.items()) for r in runs],
        ),
    ]
    if any(e is not None for e in estimated):
        rows.append(("estimate", [estimate_cell(e) for e in estimated]))
    ratios = result.estimate_ratios
    if ratios:  # real Macs: how far the estimate was from what they did
        rows.append(
            (
                "measured/est",
                [f"{ratios[r.label]:.2f}×" if r.label in ratios else "—" for r in runs],
            )
        )
    width = max(len(cell) for _, cells in rows for cell in cells)
    lines = [f"{name:<12} " + "  ".join(f"{c:<{width}}" for c in cells) for name, cells in rows]
    said = headlines(result, beside)  # on the demo: the estimate first, then the measure
    lines += ["", said.lead, *([said.measured] if said.measured else []), *result.notes]
    for e in estimated:
        if e is not None and e.tokens_per_s is not None:
            lines.append(e.summary())
    return "\n".join(line.rstrip() for line in lines) + "\n"
