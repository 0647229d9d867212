"""``macmesh linktest``: what every link of the cluster carries, through MLX itself.

``--demo [--nodes N]`` on the demo cluster (its links are loopback, set against a plain
TCP socket pair here), or ``--hosts a,b,...`` on real Macs (set against each cable's
rate: 80 Gb/s Thunderbolt 5, 40 Gb/s Thunderbolt 4). The job is the model's (default:
the demo model, small enough to copy quickly); it starts, the links are measured from
4 KiB to 64 MiB, every rank stops. On the demo it says plainly that the simulated Macs
share this machine's cores and loopback, in Compare's words.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from core.cli.demo import demo_model_said
from core.cli.interrupt import Stage, first_interrupt_only, interrupted
from core.cli.steps import follow, starting
from core.cli.where import add_where_arguments, where_hosts
from core.model.info import ModelError, read_model_info
from core.run.errors import ClusterError
from core.run.job.launcher import JobError
from core.run.planning import links_simulated
from core.run.session import Session
from core.run.states import Step
from core.run.tasks.linktest import LinkTest, measure_links
from core.units import bytes_per_s
from core.worker import protocol as p
from core.worker.vocab import Strategy

# Bytes moved at each size, as a share of the default (--quick: a quarter).
QUICK_SCALE = 0.25


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_where_arguments(parser)
    parser.add_argument("--model", type=Path, help="the job's model (default: the demo model)")
    parser.add_argument(
        "--quick", action="store_true", help="move a quarter of the bytes at each size"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def linktest_cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="macmesh linktest", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    stage = Stage("reading the model")
    with first_interrupt_only():
        try:
            return run_linktest(args, sys.stdout, sys.stderr, stage)
        except KeyboardInterrupt:
            return interrupted(stage, sys.stderr)


def run_linktest(args: argparse.Namespace, out: TextIO, err: TextIO, stage: Stage) -> int:
    scale = QUICK_SCALE if args.quick else 1.0
    try:
        hosts = where_hosts(args, "a link needs")
        info = read_model_info(args.model or demo_model_said(err, stage))
        session = Session(info, hosts, strategy=Strategy.PIPELINE)
    except (ClusterError, ModelError, ValueError) as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    session.event.connect(lambda event: _say_testing(event, stage, err))
    session.step_started.connect(lambda step: _say_starting(session, step, err))
    try:
        tested = measure_links(session, scale, follow(stage, err))
    except (ClusterError, ModelError, ValueError) as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    except JobError as exc:
        logs = session.job.run_dir if session.job is not None else "none"
        err.write(f"macmesh: the link test failed: {exc}\nLogs: {logs}\n")
        return 1
    finally:
        session.stop()
    if tested.not_kept:
        err.write(f"macmesh: {tested.not_kept}\n")
    if args.json:
        out.write(json.dumps({**tested.to_dict(), "simulated": session.demo}) + "\n")
    else:
        out.write(described(tested, simulated=session.demo))
    return 0


def described(tested: LinkTest, *, simulated: bool) -> str:
    """A line per link, the all_sum's rate, and on the demo the plain caveat."""
    lines = [result.describe() for result in tested.results]
    if tested.all_sum:
        rate = bytes_per_s(tested.all_sum[-1]["bytes_per_s"])
        lines.append(f"all_sum over {len(tested.nodes)} ranks: {rate}")
    if simulated:
        lines.append(links_simulated(len(tested.nodes)))
    return "".join(f"{line}\n" for line in lines)


def _say_starting(session: Session, step: str, err: TextIO) -> None:
    if step == Step.LAUNCH:
        nodes = session.rank_nodes()
        err.write(starting(nodes))
        err.flush()


def _say_testing(event: p.Event, stage: Stage, err: TextIO) -> None:
    """Once every rank is ready the links are measured: say so."""
    if event["event"] == p.READY:
        stage("testing the links")
        err.write("Testing the links, 4 KiB to 64 MiB…\n")
        err.flush()
