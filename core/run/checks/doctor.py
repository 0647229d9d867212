"""``macmesh doctor``'s report: every setup problem of this Mac and the nodes found or
named, each with its fix, grouped by what it blocks (issue 27).

- **Finding** (``doctor_finding``): Bonjour, the Local Network permission, Remote Login,
  the firewall, the host key and our key's access.
- **Running**: the Python a job would use and its mlx / mlx-lm (preflight's own
  ``python_check`` and ``version_checks``), free disk, memory and the GPU wired limit.
- **Linking** (``doctor_linking``): every Thunderbolt cable, RDMA per node, cable and port,
  IPv4 on the cables, the Thunderbolt Bridge, and the path the ring would take
  (``choose_backend`` and preflight's ``backend_checks``; ``try_links``: ringcheck's
  TCP connects over those paths, as preflight tries them).

Pure over what the scanner found (``Seen``), so each verdict is tested on fixture
facts; the command (``core.cli.doctor``) gathers, prints and exits 0 only when every
node can run a job (``DoctorReport.ok``: every node ready, no check failed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from core.cluster.discovery import Interfaces
from core.cluster.probe.facts import NodeFacts
from core.plan.memory import Node as PlanNode
from core.plan.memory import PlanOptions, node_budget
from core.run.checks.doctor_finding import finding_checks
from core.run.checks.doctor_linking import linking_checks
from core.run.checks.preflight import Gathered, blas_check, python_check, version_checks
from core.run.checks.report import CLUSTER, Check
from core.run.checks.seen import Seen
from core.units import size

Group = Literal["finding", "running", "linking"]
GROUPS: tuple[Group, ...] = ("finding", "running", "linking")
TITLES: dict[Group, str] = {
    "finding": "Finding the Macs",
    "running": "Running a job",
    "linking": "Linking the Macs",
}
LOW_DISK_BYTES = 20 * 1024**3  # below this, a model copy will not fit: say so


@dataclass(frozen=True)
class Finding:
    """One check of the report and the group of what it blocks."""

    group: Group
    check: Check

    def to_dict(self) -> dict[str, str]:
        return {"group": self.group, **self.check.to_dict()}


@dataclass(frozen=True)
class DoctorReport:
    nodes: tuple[str, ...]
    ready: tuple[str, ...]  # the nodes probed successfully
    findings: tuple[Finding, ...]
    interfaces: tuple[str, ...] | str

    @property
    def ok(self) -> bool:
        """Every node can run a job: there is one, each is ready, no check fails."""
        failed = any(f.check.status == "fail" for f in self.findings)
        return bool(self.nodes) and len(self.ready) == len(self.nodes) and not failed

    def group(self, group: Group) -> list[Check]:
        return [f.check for f in self.findings if f.group == group]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "interfaces": self.interfaces,
            "nodes": list(self.nodes),
            "ready": list(self.ready),
            "checks": [f.to_dict() for f in self.findings],
            "failed": sum(f.check.status == "fail" for f in self.findings),
            "warnings": sum(f.check.status == "warn" for f in self.findings),
        }


def diagnose(
    seen: Sequence[Seen],
    interfaces: Interfaces,
    *,
    on_mac: bool,
    try_links: bool = False,
    send_errors: Mapping[str, int | None] | None = None,
    offers: bool = True,
) -> DoctorReport:
    """The report over ``seen`` (this machine first, then by name). ``on_mac``: this
    machine is a Mac (Bonjour then needs the Local Network permission); ``try_links``:
    the ring's chosen paths tried with TCP connects over SSH (False: as probed; the only
    part that is not pure); ``send_errors``: this Mac's mDNS send on each browsed
    interface (``core.cluster.localnet.mdns_send_errors``; None: not tried); ``offers``
    False: no network change is offered, nor pointed at by a fix (the demo)."""
    ready = [s for s in seen if s.facts is not None and s.target is not None]
    finding = finding_checks(seen, interfaces, on_mac, send_errors or {})
    findings = [Finding("finding", c) for c in finding]
    findings += [Finding("running", c) for c in running_checks(ready)]
    findings += [Finding("linking", c) for c in linking_checks(ready, try_links, offers=offers)]
    shown = interfaces if isinstance(interfaces, str) else tuple(interfaces)
    return DoctorReport(
        tuple(s.node.name for s in seen),
        tuple(s.node.name for s in ready),
        tuple(findings),
        shown,
    )


def diagnose_here(
    seen: Sequence[Seen], interfaces: Interfaces, *, on_mac: bool, try_links: bool
) -> DoctorReport:
    """The report as ``macmesh doctor`` and the window's Check my Macs make it over the
    Macs they found: on a Mac, with this Mac's own mDNS sends out of each browsed
    interface first (the Local Network permission's first sign)."""
    sends = None
    if on_mac:
        from core.cluster.localnet import browsed_addresses, mdns_send_errors

        sends = mdns_send_errors(browsed_addresses(interfaces))
    return diagnose(seen, interfaces, on_mac=on_mac, try_links=try_links, send_errors=sends)


def diagnose_demo(nodes: Sequence[Any], *, on_mac: bool, python: str) -> DoctorReport:
    """The report over the demo's simulated Macs (``core.run.demo.demo_nodes``, or a
    replayed capture's), as ``macmesh doctor --demo`` and the window's Check my Macs on
    the demo make it: each reached on this machine, where its rank runs (``python``: the
    Python they run), on loopback (their paths are loopback by construction). Their
    linking is their simulated hardware's (``core.run.demo``: cables, RDMA per port, the
    backend real Macs so cabled would run); no ring path over a network nor a network
    change is offered for Macs that do not exist: the demo's own backend is said once."""
    from core.cluster.probe.facts import run_local_probe
    from core.run.checks.seen import simulated_seen
    from core.run.demo import BACKEND_NOTE

    here = run_local_probe(python=python)
    report = diagnose(simulated_seen(nodes, here), ("127.0.0.1",), on_mac=on_mac, offers=False)
    kept = [
        f
        for f in report.findings
        if not (f.group == "linking" and f.check.name in ("network", "ring-path"))
    ]
    if len(report.ready) > 1:
        kept.append(Finding("linking", Check.ok(CLUSTER, "demo-backend", BACKEND_NOTE)))
    return replace(report, findings=tuple(kept))


# -- running -----------------------------------------------------------------------------


def running_checks(ready: Sequence[Seen]) -> list[Check]:
    """Python and its mlx / mlx-lm (preflight's checks), the skew between nodes, free
    disk, memory and the GPU wired limit, for every ready node."""
    gathered = [Gathered(s.target, s.facts) for s in ready if s.target is not None]
    checks: list[Check] = []
    for g in gathered:
        assert g.facts is not None
        checks.append(python_check(g))
        if g.facts.runs_on_cpu:
            checks.append(blas_check(g.facts, g.target.name))
    checks += version_checks(gathered)
    if (paths := python_paths_check(ready)) is not None:
        checks.append(paths)
    for g in gathered:
        assert g.facts is not None
        checks.append(disk_check(g.facts))
        checks += memory_checks(g.facts)
    return checks


def python_paths_check(ready: Sequence[Seen]) -> Check | None:
    """Nodes whose Pythons (or users) differ: MacMesh starts each rank with its own
    node's Python, but ``mlx.launch`` by hand runs one path everywhere (oMLX #2735 is
    this case failing). None with fewer than two nodes whose Python is known."""
    found = {
        s.node.name: s.facts.python_executable
        for s in ready
        if s.facts is not None and s.facts.python_executable
    }
    if len(found) < 2:
        return None
    users = {s.node.user for s in ready if s.node.user}
    shown = ", ".join(f"{name}: {path}" for name, path in found.items())
    if len(set(found.values())) == 1 and len(users) <= 1:
        return Check.ok(
            CLUSTER, "python-paths", f"Every node's Python is at {shown.split(': ')[-1]}."
        )
    who = f" and log in as different users ({', '.join(sorted(users))})" if len(users) > 1 else ""
    return Check.warn(
        CLUSTER,
        "python-paths",
        f"The nodes' Pythons are at different paths ({shown}){who}: MacMesh starts each "
        "node's own, but `mlx.launch` by hand (--show-launch) runs one path on every node.",
        "Nothing to do for MacMesh. To launch by hand, give every node a Python with mlx "
        "and mlx-lm at one path (e.g. `/opt/homebrew/bin/python3 -m pip install mlx "
        "mlx-lm` on each), or run with --python PATH where every node has it.",
    )


def disk_check(facts: NodeFacts) -> Check:
    """Free space where MacMesh keeps its cache (the home folder's disk)."""
    name, free = facts.name, facts.disk_free_bytes
    if free is None:
        why = facts.unknowns.get("disk_free_bytes", "it was not reported")
        return Check.warn(name, "disk", f"{name}'s free disk space is unknown ({why}).")
    if free < LOW_DISK_BYTES:
        return Check.warn(
            name,
            "disk",
            f"{name} has only {size(free)} free on its disk: a model copied there may not fit.",
            f"Free space on {name} (System Settings > General > Storage), or give it "
            "another cache folder (--cache-root).",
        )
    return Check.ok(name, "disk", f"{name} has {size(free)} free on its disk.")


def memory_checks(facts: NodeFacts) -> list[Check]:
    """Memory, what the GPU may take of it (the wired limit), and the pressure now."""
    name = facts.name
    if not facts.memory_bytes:
        why = facts.unknowns.get("memory_bytes", "it was not reported")
        return [
            Check.fail(
                name,
                "memory",
                f"{name}'s memory is unknown ({why}): no plan can place a model there.",
                f"Check that `sysctl -n hw.memsize` works on {name}, then run the doctor again.",
            )
        ]
    if facts.is_macos is False:  # a Linux host: MLX on its CPU, no GPU limit to read
        free = f", {size(facts.free_memory_bytes)} available now" if facts.free_memory_bytes else ""
        return [
            Check.ok(
                name,
                "memory",
                f"{name} has {size(facts.memory_bytes)}{free}; MLX runs on its CPU there.",
            )
        ]
    budget = node_budget(PlanNode(name, facts.memory_bytes, facts.wired_limit_mb), PlanOptions())
    limit = f"{size(budget.gpu_limit_bytes)} for the GPU ({budget.gpu_limit_source})"
    checks = [Check.ok(name, "memory", f"{name} has {size(facts.memory_bytes)}; {limit}.")]
    if "wired_limit_mb" in facts.unknowns:
        checks.append(
            Check.warn(
                name,
                "memory",
                f"{name}'s GPU wired limit could not be read ({facts.unknowns['wired_limit_mb']}): "
                "the plan assumes the macOS default.",
            )
        )
    if facts.memory_pressure is not None and facts.memory_pressure >= 2:
        level = "critical" if facts.memory_pressure >= 4 else "warning"
        checks.append(
            Check.warn(
                name,
                "memory",
                f"{name}'s memory pressure is {level} right now"
                + (f" ({size(facts.free_memory_bytes)} free)." if facts.free_memory_bytes else "."),
                f"Quit apps on {name} that use a lot of memory before starting a job.",
            )
        )
    return checks


# -- for the terminal ----------------------------------------------------------------------

_MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


def format_doctor(report: DoctorReport) -> str:
    """Each group under its title, a check per line with its fix under it, the verdict."""
    lines: list[str] = []
    for group in GROUPS:
        checks = report.group(group)
        if not checks:
            continue
        lines.append(TITLES[group])
        for c in checks:
            lines.append(f"  [{_MARK[c.status]}] {c.message}")
            if c.fix and c.status != "ok":
                lines.append(f"         → {c.fix}")
        lines.append("")
    failed = sum(f.check.status == "fail" for f in report.findings)
    if report.ok:
        lines.append(f"Every node can run a job ({', '.join(report.nodes)}).")
    elif not report.nodes:
        lines.append("No node found: name one with --host, or browse more with --interfaces.")
    else:
        blocked = [n for n in report.nodes if n not in report.ready]
        said = f"{failed} check{'s' if failed != 1 else ''} failed"
        if blocked:
            said += f"; {', '.join(blocked)} could not be probed"
        lines.append(f"Not ready: {said}. Fix what each FAIL says, then run macmesh doctor again.")
    return "\n".join(lines) + "\n"
