"""``macmesh demo --headless``: the demo cluster from the terminal. Plan on the simulated
Macs, start their ranks on this machine, ask once, print the answer as it streams,
summarise, stop; the same ``core.run.session.Session`` as the window's Start.
``--kv-bits 8|4`` and ``--kv-group-size`` store the KV cache quantized, as ``run`` and
``serve`` do (planned and run; the summary says them)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from core.cli.answer import (
    DEFAULT_PROMPT,
    adapter_about,
    check_max_tokens,
    launch_and_ask,
    with_adapter,
)
from core.cli.interrupt import Stage, first_interrupt_only, interrupted
from core.cli.options import add_adapter_argument, add_split_argument, split_of
from core.cli.session import add_kv_arguments
from core.cli.steps import follow, starting
from core.library.resolve import resolve_model
from core.model.info import ModelError, read_model_info
from core.run import demo
from core.run.errors import ClusterError
from core.run.planning import Serving
from core.run.session import Session, simulated_hosts
from core.run.states import Step
from core.run.tasks.adapter_payload import adapter_payloads
from core.run.tasks.watch import Phase
from core.worker.vocab import Strategy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--headless", action="store_true", help="no window: print to the terminal")
    parser.add_argument(
        "--model",
        help="a model folder, a name `macmesh models` lists, or hf:ORG/NAME once downloaded "
        "(default: the demo model)",
    )
    parser.add_argument("--nodes", type=int, default=2, help="simulated Macs, 1-4 (default 2)")
    parser.add_argument(
        "--strategy", choices=(Strategy.PIPELINE, Strategy.TENSOR), default=Strategy.PIPELINE
    )
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-tokens", type=int, default=64)
    add_split_argument(parser)
    add_adapter_argument(parser)
    add_kv_arguments(parser)
    parser.add_argument("--json", action="store_true", help="end with one JSON summary line")


def demo_cli(argv: Sequence[str] | None = None) -> int:
    """The headless demo with its own arguments (``macmesh`` with no display)."""
    parser = argparse.ArgumentParser(prog="macmesh demo", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run_headless(parser.parse_args(argv))


def run_headless(
    args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Plan, start, ask once, print the answer as it streams, summarise, stop. Ctrl-C
    at any step: one line, every rank stopped (a conversion leaves no folder), 130."""
    stage = Stage("reading the model")
    with first_interrupt_only():
        try:
            return _headless(args, out, err, stage)
        except KeyboardInterrupt:
            return interrupted(stage, err)


def _headless(args: argparse.Namespace, out: TextIO, err: TextIO, stage: Stage) -> int:
    try:
        if args.model:
            info = resolve_model(args.model, to_run=True)
        else:
            info = read_model_info(demo_model_said(err, stage))
        session = Session(
            info,
            simulated_hosts(demo.demo_facts(args.nodes)),
            strategy=args.strategy,
            split=split_of(args),
            payloads=adapter_payloads(info, args.adapter),
            serving=Serving.chosen(kv_bits=args.kv_bits, kv_group_size=args.kv_group_size),
        )
        follow(stage, err)(session, Phase.RUN)
        session.start(Step.PLAN)
        check_max_tokens(args.max_tokens)
        spec = session.job_spec()
    except (ClusterError, ModelError, ValueError) as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    plan = session.plan
    assert plan is not None
    err.write(f"{info.summary()}\n{plan.reason}\n{with_adapter(session)}")
    err.write(starting(session.rank_nodes()))
    about = {
        "strategy": spec.rank_strategy,
        "nodes": spec.nodes,
        "split": spec.split,
        "model": info.name,
        "kv_bits": spec.kv_bits,
        "kv_group_size": spec.kv_group_size,
        **adapter_about(session),
    }
    return launch_and_ask(
        session,
        args.prompt,
        args.max_tokens,
        about,
        "the demo cluster",
        out,
        err,
        args.json,
        stage,
    )


def demo_model_said(err: TextIO, stage: Stage) -> Path:
    """The demo model's folder; converting it first (once) is said on ``err``, and an
    interrupted conversion leaves no folder."""
    if demo.needs_preparing():
        stage("preparing the demo model")
        err.write("Preparing the demo model (once)…\n")
        err.flush()
    path = demo.demo_model()
    stage("reading the model")
    return path
