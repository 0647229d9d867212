"""``macmesh doctor``: every setup problem of this Mac and the nodes found or named, each
with its fix, grouped by what it blocks (finding, running, linking; issue 27).

    macmesh doctor [--interfaces IF,...] [--host HOST ...] [--wait SECONDS] [--python PATH]
                   [--no-publish] [--no-try-paths] [--json]

Finds and probes the nodes as ``macmesh nodes`` does (a ``Scanner``: Bonjour, the
remembered hosts, ``--host`` ones, this machine), then reports
(``core.run.checks.doctor``). The ring's paths are tried with a TCP connect between
their nodes unless ``--no-try-paths``. Exit status: 0 when every node can run
a job, 1 otherwise (the report says what to do), 2 for bad arguments, in one line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TextIO

from core.cli.nodes import PROBE_WAIT_CAP_S
from core.cli.nodes import add_arguments as add_node_arguments
from core.cluster.discovery import choose_interfaces
from core.cluster.hosts import HostList, parse_host
from core.cluster.registry import ProbeState
from core.cluster.scanner import NodeNotReady, Scanner
from core.run.checks.doctor import diagnose, format_doctor
from core.run.checks.seen import Seen
from core.settings import load_settings


def doctor_cli(argv: list[str], out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(
        prog="macmesh doctor",
        description="Check this Mac and every node found or named: each problem with its fix.",
    )
    add_node_arguments(parser)
    parser.add_argument(
        "--no-try-paths",
        action="store_true",
        help="do not try the ring's paths with a TCP connect between the nodes",
    )
    args = parser.parse_args(argv)
    try:
        extra = [parse_host(text) for text in args.host]
        interfaces = choose_interfaces(args.interfaces, load_settings().interfaces)
    except ValueError as error:
        return _bad(str(error))
    hosts = HostList(remember=False)
    for host in extra:
        hosts.add(host)
    scanner = Scanner(
        interfaces=interfaces, host_list=hosts, publish=not args.no_publish, python=args.python
    )
    try:
        scanner.start()
    except ValueError as error:
        scanner.close()
        return _bad(str(error))
    try:
        time.sleep(args.wait)
        scanner.wait_idle(PROBE_WAIT_CAP_S)
        nodes = sorted(scanner.registry.nodes(), key=lambda n: (not n.is_self, n.name.lower()))
        seen = []
        for node in nodes:
            target = None
            if node.probe_state is ProbeState.READY:
                try:
                    target = scanner.target(node.name)
                except NodeNotReady:
                    target = None
            seen.append(Seen(node, scanner.probe_error(node.name), target))
    finally:
        scanner.close()
    report = diagnose(
        seen, interfaces, on_mac=sys.platform == "darwin", try_links=not args.no_try_paths
    )
    if args.json:
        json.dump(report.to_dict(), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(format_doctor(report))
    return 0 if report.ok else 1


def _bad(message: str) -> int:
    sys.stderr.write(f"macmesh doctor: {message}\n")
    return 2


__all__ = ["doctor_cli"]
