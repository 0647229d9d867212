"""Where a multi-Mac command runs: ``--demo [--nodes N]`` (the simulated Macs) or
``--hosts a,b,...`` (real Macs over SSH, with ``--python`` and ``--cache-root``), the
same for ``compare`` and ``linktest``."""

from __future__ import annotations

import argparse

from core.cli.session import make_targets
from core.run import demo
from core.run.errors import ClusterError
from core.run.session import Host, real_hosts, simulated_hosts
from core.settings import MAX_DEMO_NODES


def add_where_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--demo", action="store_true", help="the demo cluster on this machine")
    where.add_argument("--hosts", help="[user@]host[:port],... the cluster's Macs")
    parser.add_argument(
        "--nodes", type=int, default=2, help=f"with --demo: simulated Macs, 2-{MAX_DEMO_NODES}"
    )
    parser.add_argument("--python", help="with --hosts: the nodes' Python")
    parser.add_argument("--cache-root", help="with --hosts: the nodes' cache folder")


def where_hosts(args: argparse.Namespace, needs: str) -> list[Host]:
    """The hosts the arguments name: at least two (``needs`` says what for, as in
    "a link needs"). ClusterError with one line otherwise."""
    if args.demo:
        if not 2 <= args.nodes <= MAX_DEMO_NODES:
            raise ClusterError(f"--nodes: {needs} 2 to {MAX_DEMO_NODES} simulated Macs")
        return simulated_hosts(demo.demo_facts(args.nodes))
    names = [h for h in args.hosts.split(",") if h.strip()]
    if len(names) < 2:
        raise ClusterError(f"--hosts: {needs} two hosts or more")
    return real_hosts(make_targets(names, args.python, args.cache_root))
