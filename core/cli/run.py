"""``macmesh run MODEL --hosts a,b,...``: the model on real Macs over SSH, one answer.

Probe the hosts, plan, check (every check with its fix, and the backend: jaccl when RDMA
joins the ranks as it needs, else ring, said plainly), copy what nodes lack, launch on
the hosts in the plan's rank order, ask once, stop; ``--show-launch`` prints the
equivalent ``mlx.launch`` command and hostfile instead. The steps are
``core.run.session.Session``'s, the same object the window's Start drives; this module
only reads arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from core.cli.answer import (
    DEFAULT_PROMPT,
    adapter_about,
    check_max_tokens,
    launch_and_ask,
)
from core.cli.interrupt import Stage, first_interrupt_only, interrupted
from core.cli.session import add_cluster_arguments, open_session
from core.cli.steps import follow, starting
from core.model.info import ModelError
from core.run.errors import ClusterError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        help="the model on this Mac (copied to nodes that lack it): a folder, a name "
        "`macmesh models` lists (ORG/NAME), or hf:ORG/NAME once downloaded",
    )
    parser.add_argument("--hosts", required=True, help="[user@]host[:port],... in any order")
    add_cluster_arguments(parser)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--show-launch", action="store_true", help="print the equivalent mlx.launch; run nothing"
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON summary line")


def run_cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="macmesh run", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Probe, plan, check, copy, launch, ask once, stream the answer, summarise, stop.
    Ctrl-C at any step: one line, every copy and rank stopped, 130."""
    stage = Stage("reading the model")
    with first_interrupt_only():
        try:
            return _run(args, out, err, stage)
        except KeyboardInterrupt:
            return interrupted(stage, err)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO, stage: Stage) -> int:
    try:
        check_max_tokens(args.max_tokens)
        session = open_session(args, err, follow(stage, err), args.show_launch)
        if args.show_launch:
            launch = session.launch_command()
        else:
            spec = session.job_spec()
    except (ClusterError, ModelError, ValueError) as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    plan, report = session.plan, session.report
    assert plan is not None and report is not None
    if args.show_launch:
        if args.json:
            out.write(json.dumps(launch) + "\n")
        else:
            out.write(
                "# on every node, MacMesh's core/ and core/worker/ (worker "
                f"{launch['worker_hash']}) must be importable: add --cwd <that folder>\n"
            )
            out.write(" ".join(launch["command"]) + "\n")
            out.write("hostfile.json:\n" + json.dumps(launch["hostfile"], indent=2) + "\n")
        return 0
    err.write(starting(session.rank_nodes()))
    about = {
        "strategy": spec.rank_strategy,
        "nodes": spec.nodes,
        "hosts": list(plan.nodes_used),
        "backend": spec.rank_backend,
        "split": spec.split,
        "model": session.info.name,
        **adapter_about(session),
        "preflight": [check.to_dict() for check in report.checks],
    }
    return launch_and_ask(
        session, args.prompt, args.max_tokens, about, "the cluster", out, err, args.json, stage
    )
