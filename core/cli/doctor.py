"""``macmesh doctor``: every setup problem of this Mac and the nodes found or named, each
with its fix, grouped by what it blocks (finding, running, linking; issue 27).

    macmesh doctor [--interfaces IF,...] [--host HOST ...] [--wait SECONDS] [--python PATH]
                   [--no-publish] [--no-try-paths] [--json] [--capture FILE.zip]
    macmesh doctor --demo [--nodes N] [--no-rdma] [--json]

Finds and probes the nodes as ``macmesh nodes`` does (a ``Scanner``: Bonjour, the
remembered hosts, ``--host`` ones, this machine), then reports
(``core.run.checks.doctor``). The ring's paths are tried with a TCP connect between
their nodes unless ``--no-try-paths``. ``--capture`` also saves, redacted, what every
node's probe printed (``core.cluster.capture``). Exit status: 0 when every node can run
a job, 1 otherwise (the report says what to do), 2 for bad arguments, in one line.
``--demo`` checks the demo cluster's simulated Macs instead (the window's Check my Macs on
the demo: the same report), saying first that they are simulated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from core.cli.nodes import add_arguments as add_node_arguments
from core.cli.nodes import scanned
from core.run.checks.doctor import diagnose_here, format_doctor
from core.run.checks.seen import seen_by
from core.settings import MAX_DEMO_NODES, load_settings


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
    parser.add_argument(
        "--capture",
        metavar="FILE.zip",
        type=Path,
        help="also save what every node's probe printed, redacted, to send with a bug report",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="check the demo cluster's simulated Macs (their ranks run on this machine)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help=f"with --demo: how many simulated Macs (1 to {MAX_DEMO_NODES}; "
        "default: the saved setting)",
    )
    parser.add_argument(
        "--no-rdma",
        action="store_true",
        help="with --demo: the demo without RDMA (every simulated Mac's off; "
        "default: the saved setting)",
    )
    args = parser.parse_args(argv)
    if args.demo:
        return _demo(args, out)
    if args.nodes is not None or args.no_rdma:
        return _bad("--nodes and --no-rdma go with --demo (the demo cluster's)")
    try:
        if args.capture is not None:
            _check_capture_path(args.capture)
        with scanned(args) as (scanner, nodes):
            interfaces = scanner.interfaces
            seen = seen_by(scanner, nodes)
    except ValueError as error:
        return _bad(str(error))
    on_mac = running_on_mac()
    report = diagnose_here(seen, interfaces, on_mac=on_mac, try_links=not args.no_try_paths)
    if args.json:
        json.dump(report.to_dict(), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(format_doctor(report))
    if args.capture is not None:
        from core.cluster.capture import write_capture

        try:
            written = write_capture(args.capture, [s.node for s in seen])
        except OSError as error:
            return _bad(f"cannot write the capture {args.capture}: {error.strerror or error}")
        sys.stderr.write(f"macmesh doctor: capture saved to {written} (redacted).\n")
    return 0 if report.ok else 1


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    """``--demo``: the report over the demo cluster's simulated Macs."""
    from core.run.checks.doctor import diagnose_demo
    from core.run.demo import cabling, demo_facts, demo_nodes

    if args.capture is not None or args.host or args.interfaces:
        return _bad("--demo checks the simulated Macs: --host, --interfaces and --capture "
                    "are for real ones")  # fmt: skip
    settings = load_settings()
    count = args.nodes if args.nodes is not None else settings.demo_nodes
    rdma = settings.demo_rdma and not args.no_rdma
    try:
        nodes = demo_nodes(count, rdma=rdma)
    except ValueError as error:
        return _bad(f"--nodes: {error}")
    python = args.python or sys.executable
    report = diagnose_demo(nodes, on_mac=running_on_mac(), python=python)
    names = ", ".join(node.name for node in nodes)
    cabled = cabling(demo_facts(count, rdma=rdma)) if count > 1 else None
    if args.json:
        simulated = {"simulated": cabled.to_dict()} if cabled is not None else {}
        json.dump({"demo": True, **simulated, **report.to_dict()}, out, indent=2)
        out.write("\n")
    else:
        cables = f", a {cabled.shape}: {cabled.words()}" if cabled is not None else ""
        out.write(
            f"The demo cluster: {len(nodes)} simulated Macs ({names}){cables}; their ranks "
            "run on this machine, over loopback.\n\n"
        )
        out.write(format_doctor(report))
    return 0 if report.ok else 1


def running_on_mac() -> bool:
    """macOS asks for the Local Network permission: its checks run only there."""
    return sys.platform == "darwin"


def _check_capture_path(path: Path) -> None:
    if path.suffix.lower() != ".zip":
        raise ValueError(f"--capture wants a .zip file name, not {str(path)!r}")
    if path.is_dir():
        raise ValueError(f"--capture {str(path)!r} is a folder: give a .zip file name")
    if not path.parent.is_dir():
        raise ValueError(f"--capture: the folder {str(path.parent)!r} does not exist")


def _bad(message: str) -> int:
    sys.stderr.write(f"macmesh doctor: {message}\n")
    return 2


__all__ = ["doctor_cli"]
