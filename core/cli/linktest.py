"""``macmesh linktest``: what every link of the cluster carries, through MLX itself.

``--demo [--nodes N]`` on the demo cluster (its links are loopback, set against a plain
TCP socket pair here), or ``--hosts a,b,...`` on real Macs (set against each cable's
rate: 80 Gb/s Thunderbolt 5, 40 Gb/s Thunderbolt 4). The job is the model's (default:
the demo model, small enough to copy quickly); it starts, the links are measured from
4 KiB to 64 MiB, every rank stops.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from core.cli.interrupt import Stage, first_interrupt_only, interrupted
from core.cli.where import add_where_arguments, where_hosts
from core.cluster.topology import build_topology
from core.model.info import ModelError, read_model_info
from core.run import demo, linktest
from core.run.history import RunRecord, keep, local_versions
from core.run.launcher import JobError
from core.run.placement import ClusterError
from core.run.session import Session
from core.units import bytes_per_s
from core.worker.vocab import Backend, Strategy

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
        if args.model is None:
            stage("preparing the demo model")
        info = read_model_info(args.model or demo.demo_model())
        session = Session(info, hosts, strategy=Strategy.PIPELINE)
        stage.session = session
        if not args.demo:
            stage("probing the hosts")
            err.write(f"Probing {len(hosts)} host(s)…\n")
        facts = session.probe()
        stage("planning")
        session.make_plan()
        if not args.demo:
            stage("checking the nodes")
            report = session.preflight()
            if report is not None and not report.ok:
                raise ClusterError("the checks failed; run `macmesh run --show-launch` to see why")
            stage("copying the model")
            session.copy()
        nodes = session.rank_nodes()
        if len(nodes) < 2:
            raise ClusterError("the model's plan uses one Mac: there is no link to test")
    except (ClusterError, ModelError, ValueError) as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    try:
        stage("loading the model")
        err.write(f"Starting {len(nodes)} rank(s) on {', '.join(nodes)}…\n")
        session.launch()
        session.wait_ready()
        stage("testing the links")
        err.write("Testing the links, 4 KiB to 64 MiB…\n")
        event = session.wait_done(session.test_links(scale=scale))
    except JobError as exc:
        logs = session.job.run_dir if session.job is not None else "none"
        err.write(f"macmesh: the link test failed: {exc}\nLogs: {logs}\n")
        return 1
    finally:
        session.stop()
    pairs = [(nodes[link["a"]], nodes[link["b"]]) for link in event.get("links", [])]
    if args.demo:
        stage("measuring loopback")
        nominal: linktest.Nominal | dict[frozenset[str], linktest.Nominal]
        nominal = linktest.loopback_nominal(scale)
    else:
        nominal = linktest.cable_nominals(build_topology(facts), pairs)
    results = linktest.link_results(event, nodes, nominal)
    reduced = linktest.all_sum_results(event)
    document = {
        "nodes": nodes,
        "links": [result.to_dict() for result in results],
        "all_sum": reduced,
    }
    spec = session.spec
    record = RunRecord(
        kind="linktest",
        model=info.name,
        nodes=nodes,
        strategy=str(spec.rank_strategy) if spec else Strategy.PIPELINE,
        backend=str(spec.rank_backend) if spec else Backend.RING,
        versions=local_versions(),
        figures=document,
    )
    not_kept = keep(record)
    if not_kept:
        err.write(f"macmesh: {not_kept}\n")
    if args.json:
        out.write(json.dumps(document) + "\n")
    else:
        for result in results:
            out.write(result.describe() + "\n")
        if reduced:
            rate = bytes_per_s(reduced[-1]["bytes_per_s"])
            out.write(f"all_sum over {len(nodes)} ranks: {rate}\n")
    return 0
