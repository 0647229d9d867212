"""``macmesh nodes``: the facts the app's cluster pane shows, headless.

    macmesh nodes [--interfaces IF,...] [--host HOST ...] [--wait SECONDS] [--python PATH]
                  [--no-publish] [--json]

Starts a ``Scanner`` (Bonjour on the chosen interfaces, the remembered hand-added hosts
plus ``--host`` ones, this machine), waits ``--wait`` seconds for Bonjour and then until
every probe has ended, and prints each node: kind, chip, memory, macOS, Python and mlx
versions, the RDMA verdict with its fix, the probe state and its reason; then the
Thunderbolt topology and the cables a full mesh still needs. ``--json`` prints the same
as one JSON document. ``--host`` hosts are probed, not remembered.

SSH files come from ``~/.ssh`` (or ``$MACMESH_SSH_DIR``); hosts from the config folder
(``$MACMESH_CONFIG_DIR``). Exit status: 0 when at least one node listed is ready, 1 when
none is (the report, then one line on stderr saying what to do), 2 for bad arguments,
with a one-line message.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

from core.cluster.discovery import Interfaces, choose_interfaces
from core.cluster.hosts import HostList, parse_host
from core.cluster.probe.facts import NodeFacts
from core.cluster.rdma import GUIDES, node_verdict
from core.cluster.registry import Node, ProbeState
from core.cluster.scanner import Scanner
from core.cluster.topology import Topology
from core.settings import load_settings
from core.units import size

PROBE_WAIT_CAP_S = 240.0  # past --wait, how long to wait for probes still running


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interfaces",
        metavar="IF,...",
        help="where Bonjour looks: interface names or addresses, or 'all' "
        "(default: the saved setting, else all on a Mac and 127.0.0.1 elsewhere)",
    )
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="HOST",
        help="also probe this host ([user@]host[:port]); repeatable; not remembered",
    )
    parser.add_argument(
        "--wait",
        type=_seconds,
        default=3.0,
        metavar="SECONDS",
        help="how long to listen for Bonjour before waiting for the probes (default 3)",
    )
    parser.add_argument(
        "--python",
        metavar="PATH",
        help="the Python to ask about on every node (default: this one's path, else python3)",
    )
    parser.add_argument(
        "--no-publish",
        action="store_true",
        help="do not announce this machine (it is then not listed)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")


def nodes_cli(argv: list[str], out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(
        prog="macmesh nodes", description="List the Macs (and Linux hosts) MacMesh finds."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        with scanned(args) as (scanner, nodes):
            topology = scanner.topology()
    except ValueError as error:
        return _bad(str(error))
    interfaces = scanner.interfaces
    if args.json:
        json.dump(report(nodes, topology, interfaces), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(render(nodes, topology))
    if not any(node.probe_state is ProbeState.READY for node in nodes):
        sys.stderr.write(f"macmesh nodes: {not_ready_message(nodes)}\n")
        return 1
    return 0


@contextlib.contextmanager
def scanned(args: argparse.Namespace) -> Iterator[tuple[Scanner, list[Node]]]:
    """A scanner over ``args``' interfaces and hosts (``add_arguments``), started and
    waited on: it and its nodes, this machine first; closed on leaving. ValueError with
    one line for a host or an interface that cannot be (``macmesh nodes``, ``doctor``)."""
    extra = [parse_host(text) for text in args.host]
    interfaces = choose_interfaces(args.interfaces, load_settings().interfaces)
    hosts = HostList(remember=False)
    for host in extra:
        hosts.add(host)
    scanner = Scanner(
        interfaces=interfaces, host_list=hosts, publish=not args.no_publish, python=args.python
    )
    try:
        scanner.start()  # ValueError: an interface that does not exist
        time.sleep(args.wait)
        scanner.wait_idle(PROBE_WAIT_CAP_S)
        nodes = sorted(scanner.registry.nodes(), key=lambda n: (not n.is_self, n.name.lower()))
        yield scanner, nodes
    finally:
        scanner.close()


def not_ready_message(nodes: list[Node]) -> str:
    """The one line printed when no node is ready: what was found, and what to do."""
    if not nodes:
        return (
            "no node found. Name one with --host [user@]HOST[:PORT], "
            "or browse more with --interfaces all or a longer --wait."
        )
    return (
        f"none of the {len(nodes)} node(s) found is ready. Fix what each one says above "
        "(Remote Login, the SSH key, the host key), then run macmesh nodes again."
    )


def report(nodes: list[Node], topology: Topology, interfaces: Interfaces) -> dict[str, Any]:
    """The JSON document: every node's facts and state, then the topology."""
    return {
        "interfaces": interfaces if isinstance(interfaces, str) else list(interfaces),
        "nodes": [node_json(node) for node in nodes],
        "topology": topology_json(topology),
    }


def node_json(node: Node) -> dict[str, Any]:
    facts = node.facts if isinstance(node.facts, NodeFacts) else None
    data: dict[str, Any] = {
        "name": node.name,
        "kind": node.kind or None,
        "this_machine": node.is_self,
        "sources": sorted(str(s) for s in node.sources),
        "host": node.ssh_host,
        "addresses": list(node.addresses),
        "port": node.ssh_port,
        "user": node.user,
        "model_id": node.model_id,
        "state": node.probe_state.value,
        "message": node.probe_message,
    }
    if facts is None:
        return data
    verdict = node_verdict(facts)
    data.update(
        model_id=facts.model_id or node.model_id,
        os=facts.os_name,
        chip=facts.chip,
        memory_bytes=facts.memory_bytes,
        macos=facts.macos_version,
        macos_build=facts.macos_build,
        python=facts.python_version,
        python_executable=facts.python_executable,
        mlx=facts.mlx_version,
        mlx_lm=facts.mlx_lm_version,
        thunderbolt_ports=[
            {
                "port": port.receptacle,
                "interface": port.interface,
                "connected": port.connected,
                "speed_gbps": port.speed_gbps,
                "addresses": _addresses(facts, port.interface),
            }
            for port in facts.thunderbolt
        ],
        network=[
            {
                "interface": i.name,
                "kind": i.kind,
                "port": i.port,
                "up": i.up,
                "status": i.status,
                "addresses": [a.ip for a in i.addresses],
                "members": list(i.members),
            }
            for i in facts.interfaces
            if i.kind != "other"
        ],
        bridge={
            "exists": facts.bridge_exists,
            "active": facts.bridge_active,
            "members": list(facts.bridge_members),
        },
        rdma={
            "state": verdict.state,
            "reason": verdict.reason,
            "guide": verdict.guide,
            "fix": GUIDES.get(verdict.guide or ""),
        },
        unknowns=dict(facts.unknowns),
    )
    return data


def _addresses(facts: NodeFacts, interface: str | None) -> list[str]:
    found = facts.interface(interface) if interface else None
    return [a.ip for a in found.addresses] if found else []


def topology_json(topology: Topology) -> dict[str, Any]:
    return {
        "nodes": list(topology.nodes),
        "shape": topology.shape if topology.nodes else None,
        "verdict": topology.verdict if topology.nodes else "No Mac is ready.",
        "cables": [cable.describe() for cable in topology.cables],
        "missing": [str(missing) for missing in topology.missing],
        "stray": [stray.describe() for stray in topology.stray],
        "notes": list(topology.notes),
    }


def render(nodes: list[Node], topology: Topology) -> str:
    """The text report: a block per node, then the topology."""
    if not nodes:
        lines = ["No nodes found. Add one with --host, or check --interfaces."]
    else:
        lines = []
        for node in nodes:
            lines += _node_lines(node)
            lines.append("")
    lines.append("Topology: " + (topology.verdict if topology.nodes else "no Mac is ready."))
    lines += [f"  {missing}" for missing in topology.missing]
    lines += [f"  note: {stray.describe()}" for stray in topology.stray]
    return "\n".join(lines) + "\n"


def _node_lines(node: Node) -> list[str]:
    facts = node.facts if isinstance(node.facts, NodeFacts) else None
    title = node.name + (" (this machine)" if node.is_self else "")
    kind = node.kind or "?"
    lines = [f"{title} — {kind}, {node.ssh_host}" + (f":{node.ssh_port}" if node.ssh_port else "")]
    state = node.probe_state.value
    if node.probe_state is not ProbeState.READY or facts is None:
        lines.append(f"  {state}: {node.probe_message}" if node.probe_message else f"  {state}")
        return lines
    memory = size(facts.memory_bytes) if facts.memory_bytes else "memory unknown"
    system = (
        f"macOS {facts.macos_version}"
        if facts.macos_version
        else (facts.os_name or "system unknown")
    )
    lines.append(f"  {facts.chip or 'chip unknown'}, {memory}, {system}")
    python = (
        f"Python {facts.python_version} ({facts.python_executable})"
        if facts.python_version
        else f"Python unknown ({facts.unknowns.get('python_version', 'not found')})"
    )
    mlx = f"mlx {facts.mlx_version or 'missing'}, mlx-lm {facts.mlx_lm_version or 'missing'}"
    lines.append(f"  {python}; {mlx}")
    verdict = node_verdict(facts)
    fix = f" Fix: {GUIDES[verdict.guide]}." if verdict.guide else ""
    lines.append(f"  RDMA {verdict.state}: {verdict.reason}{fix}")
    lines.append(f"  {state}")
    return lines


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 600:
        raise argparse.ArgumentTypeError("--wait must be from 0 to 600 seconds")
    return value


def _bad(message: str) -> int:
    sys.stderr.write(f"macmesh nodes: {message}\n")
    return 2


__all__ = ["add_arguments", "node_json", "nodes_cli", "not_ready_message", "render", "report"]
