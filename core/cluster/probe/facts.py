"""One node's facts, assembled from one probe's output (docs/design.md, Probing).

``parse_probe`` never raises on what a node prints: every fact it cannot establish is
None (or empty) and ``unknowns`` says why, keyed by the field's name, so the app can
show "unknown: rdma_ctl: command not found" next to the facts it does have.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from core.cluster.probe import parsers as p
from core.cluster.probe.ifconfig import NetInterface, parse_ifconfig, port_kind
from core.cluster.probe.profiler import Thunderbolt, parse_hardware, parse_thunderbolt
from core.cluster.probe.script import RC_NOT_FOUND, build_probe_script
from core.cluster.probe.sections import (
    Section,
    Unknown,
    first_line,
    probe_failure,
    section_problem,
    split_sections,
)

RdmaCtlState = Literal["enabled", "disabled", "absent", "unknown"]


@dataclass(frozen=True)
class ThunderboltPort:
    """One Thunderbolt receptacle: receptacle N → interface enX → RDMA device rdma_enX."""

    receptacle: int | None
    bus: str
    domain_uuid: str  # this bus's domain UUID; the peer's probe names it as its peer
    interface: str | None  # from networksetup's "Thunderbolt N"
    rdma_device: str | None  # "rdma_" + interface: the name JACCL uses for this port
    connected: bool
    speed_gbps: int | None  # the live link's speed (80: Thunderbolt 5, 40: Thunderbolt 4)
    max_gbps: int | None  # what the idle port offers (120/80: Thunderbolt 5, 40: 4)
    peer_domain_uuid: str | None = None
    peer_model: str | None = None
    peer_name: str | None = None
    peer_rdma_hint: bool = False
    via: tuple[str, ...] = ()  # docks or hubs between this port and the peer
    port_state: str | None = None  # ibv_devinfo's state for rdma_device, e.g. "PORT_ACTIVE"

    @property
    def label(self) -> str:
        return f"port {self.receptacle}" if self.receptacle is not None else self.bus


@dataclass(frozen=True)
class NodeFacts:
    """Everything one probe established about one node. Treat the dicts as read-only."""

    name: str
    model_id: str | None = None
    machine_name: str | None = None
    chip: str | None = None
    memory_bytes: int | None = None
    macos_version: str | None = None
    macos_build: str | None = None
    macos_major: int | None = None
    macos_minor: int | None = None
    darwin: str | None = None
    os_name: str | None = None  # uname's system: "Darwin" on a Mac, "Linux" on a ring-only host
    wired_limit_mb: int | None = None  # None: the macOS default (see unknowns when unread)
    free_memory_bytes: int | None = None  # free + inactive + speculative pages
    memory_pressure: int | None = None  # 1 normal, 2 warning, 4 critical
    disk_free_bytes: int | None = None  # free on the home folder's disk (df -Pk .)
    python_version: str | None = None
    python_executable: str | None = None
    mlx_version: str | None = None
    mlx_lm_version: str | None = None
    cpu_count: int | None = None
    blas_path: str | None = None  # Linux (MLX on the CPU): the fast BLAS ranks preload there
    blas_source: str | None = None  # where it comes from: "pip cmeel-openblas" or "system"
    macmesh_app: str | None = None  # MacMesh.app's binary: runs the worker with its own Python
    macmesh_app_version: str | None = None
    thunderbolt: tuple[ThunderboltPort, ...] = ()
    domain_uuids: tuple[str, ...] = ()
    rdma_ctl: RdmaCtlState = "unknown"
    ibv_stack: bool | None = None  # False: "No IB devices found"; None: not known
    rdma_devices: tuple[str, ...] = ()  # rdma_* devices ibv_devices lists
    port_states: dict[str, str] = field(default_factory=dict)  # device → port state
    bridge_exists: bool | None = None
    bridge_active: bool | None = None
    bridge_members: tuple[str, ...] = ()
    # ifconfig -a, with networksetup's port for each: the addresses ring paths can use.
    interfaces: tuple[NetInterface, ...] = ()
    unknowns: dict[str, str] = field(default_factory=dict)  # field → why it is unknown
    # When these facts were established (time.monotonic()): a Start reuses facts probed
    # moments ago instead of asking again. Not part of what the facts say.
    probed_at: float = field(default_factory=time.monotonic, compare=False, repr=False)
    # A demo Mac: what a probe of such a Mac would say, but its ranks run on this machine.
    simulated: bool = False
    # The probe's whole output, as the node printed it: what ``macmesh doctor --capture``
    # saves (every section's stdout, stderr and exit code). Not part of what the facts say.
    probe_output: str = field(default="", compare=False, repr=False)

    def age_s(self, now: float | None = None) -> float:
        """Seconds since the probe."""
        return (time.monotonic() if now is None else now) - self.probed_at

    @property
    def is_macos(self) -> bool | None:
        """True on macOS, False on another system (a Linux host: ring backend only, no
        Thunderbolt RDMA), None when the probe could not tell."""
        if self.os_name is not None:
            return self.os_name == "Darwin"
        return True if self.macos_version else None

    @property
    def runs_on_cpu(self) -> bool:
        """MLX runs on the CPU here (a Linux host, or a simulated Mac whose ranks run on
        this machine when it is not a Mac): no Metal, a BLAS matters."""
        if self.simulated:
            return sys.platform != "darwin"
        return self.os_name == "Linux"

    @property
    def thunderbolt_interfaces(self) -> tuple[str, ...]:
        return tuple(port.interface for port in self.thunderbolt if port.interface)

    @property
    def bridge_thunderbolt_members(self) -> tuple[str, ...]:
        """Bridge members that are Thunderbolt interfaces: what breaks RDMA when active."""
        tb = set(self.thunderbolt_interfaces)
        return tuple(m for m in self.bridge_members if m in tb)

    @property
    def thunderbolt_generation(self) -> int | None:
        """5 when any port offers or runs more than 40 Gb/s, 4 when ports only offer 40,
        None when the evidence is missing (every port busy at 40 Gb/s proves nothing)."""
        speeds = [s for port in self.thunderbolt for s in (port.speed_gbps, port.max_gbps) if s]
        if any(s > 40 for s in speeds):
            return 5
        if any(port.max_gbps == 40 for port in self.thunderbolt):
            return 4
        return None

    def interface(self, name: str) -> NetInterface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    @property
    def thunderbolt_network(self) -> tuple[NetInterface, ...]:
        """The Thunderbolt ports' interfaces and the bridge, as ifconfig shows them."""
        return tuple(i for i in self.interfaces if i.kind in ("thunderbolt", "bridge"))

    def port(self, receptacle: int) -> ThunderboltPort | None:
        return next((p for p in self.thunderbolt if p.receptacle == receptacle), None)


class _Reader:
    """Reads sections into fields, noting why each unreadable field is unknown."""

    def __init__(self, output: str) -> None:
        self.sections = split_sections(output)
        self.failure = probe_failure(output)
        self.unknowns: dict[str, str] = {}
        self.facts: dict[str, Any] = {}

    def section(self, name: str, *fields: str) -> Section | None:
        """The section if a parser may read it; else None, with ``fields`` marked unknown."""
        section = self.sections.get(name)
        problem = section_problem(section, name)
        if problem and section is None and self.failure:
            problem = f"the probe failed: {self.failure}"
        if problem:
            self.unknown(problem, *fields)
            return None
        return section

    def parse(
        self,
        name: str,
        parser: Callable[..., Any],
        *fields: str,
        stderr: bool = False,
        command: str = "",
    ) -> Any:
        """The parser's result for a readable section, or None with ``fields`` unknown.
        With ``command`` (its name in the reason), a failed command's exit code and first
        stderr line say why, rather than the parser's finding nothing."""
        section = self.section(name, *fields)
        if section is None:
            return None
        parsed = parser(section.stdout, section.stderr) if stderr else parser(section.stdout)
        if isinstance(parsed, Unknown):
            why = first_line(section.stderr) if command and section.rc else ""
            self.unknown(f"{command}: exit {section.rc}: {why}" if why else parsed.reason, *fields)
            return None
        return parsed

    def unknown(self, reason: str, *fields: str) -> None:
        for name in fields:
            self.unknowns.setdefault(name, reason)

    def rc(self, name: str) -> int | None:
        section = self.sections.get(name)
        return section.rc if section else None


def _thunderbolt_ports(
    tb: Thunderbolt, interfaces: dict[int, str], states: Mapping[str, str]
) -> tuple[ThunderboltPort, ...]:
    ports = []
    for bus in tb.buses:
        interface = interfaces.get(bus.receptacle) if bus.receptacle is not None else None
        device = f"rdma_{interface}" if interface else None
        peer = bus.peer
        ports.append(
            ThunderboltPort(
                receptacle=bus.receptacle,
                bus=bus.name,
                domain_uuid=bus.domain_uuid,
                interface=interface,
                rdma_device=device,
                connected=bus.connected,
                speed_gbps=bus.link_gbps,
                max_gbps=bus.max_gbps,
                peer_domain_uuid=peer.domain_uuid if peer else None,
                peer_model=peer.model_id if peer else None,
                peer_name=peer.name if peer else None,
                peer_rdma_hint=peer.rdma_hint if peer else False,
                via=peer.via if peer else (),
                port_state=states.get(device) if device else None,
            )
        )
    return tuple(ports)


def _system(r: _Reader) -> None:
    """macOS version and build, the kernel's name (Darwin, Linux) and Darwin release."""
    if version := r.parse("sw_vers", p.parse_sw_vers, "macos_version", "macos_build"):
        r.facts.update(
            macos_version=version.version,
            macos_build=version.build,
            macos_major=version.major,
            macos_minor=version.minor,
        )
        if version.build is None:
            r.unknown("sw_vers printed no BuildVersion", "macos_build")
    if kernel := r.parse("uname", p.parse_uname, "darwin", "os_name"):
        r.facts["os_name"] = kernel.system
        if kernel.system == "Darwin":
            r.facts["darwin"] = kernel.release


_HARDWARE = ("model_id", "chip", "memory_bytes")


def _hardware(r: _Reader) -> Thunderbolt | None:
    """Model, chip, memory: sysctl first, system_profiler where sysctl is silent."""
    if hw := r.parse("sysctl_hw", p.parse_sysctl_hw, *_HARDWARE):
        r.facts.update(model_id=hw.model_id, chip=hw.chip, memory_bytes=hw.memory_bytes)
    missing = [key for key in _HARDWARE if r.facts.get(key) is None]
    profiled = r.parse("system_profiler", parse_hardware, "machine_name", *missing)
    if profiled:
        r.facts["machine_name"] = profiled.machine_name
        for key in _HARDWARE:
            value = getattr(profiled, key)
            if r.facts.get(key) is None and value is not None:
                r.facts[key] = value
                r.unknowns.pop(key, None)
    for key in _HARDWARE:
        if r.facts.get(key) is None:
            r.unknown("neither sysctl nor system_profiler gave it", key)
    thunderbolt: Thunderbolt | None = r.parse("system_profiler", parse_thunderbolt, "thunderbolt")
    return thunderbolt


def _rdma(r: _Reader) -> dict[str, str]:
    """rdma_ctl, the RDMA devices and their port states (device → state)."""
    r.facts["rdma_ctl"] = "unknown"
    if r.rc("rdma_ctl") == RC_NOT_FOUND:
        r.facts["rdma_ctl"] = "absent"  # macOS before 26.2 has no RDMA over Thunderbolt
    elif ctl := r.parse("rdma_ctl", p.parse_rdma_ctl, "rdma_ctl"):
        r.facts["rdma_ctl"] = "enabled" if ctl.enabled else "disabled"

    if r.rc("ibv_devices") == RC_NOT_FOUND:
        r.facts["ibv_stack"] = False
    elif devices := r.parse("ibv_devices", p.parse_ibv_devices, "rdma_devices", stderr=True):
        r.facts.update(ibv_stack=devices.stack, rdma_devices=devices.rdma_names)

    states: dict[str, str] = {}
    if r.facts.get("ibv_stack") is not False:
        info = r.parse("ibv_devinfo", p.parse_ibv_devinfo, "port_states", stderr=True)
        states = info.port_states() if info else {}
    r.facts["port_states"] = states
    return states


def _network(r: _Reader, tb: Thunderbolt | None, states: Mapping[str, str]) -> None:
    """Thunderbolt ports with their interfaces, and the Thunderbolt Bridge."""
    interfaces: dict[int, str] = {}
    port_names: dict[str, str] = {}
    if ports := r.parse("networksetup", p.parse_networksetup, "interfaces"):
        interfaces = ports.thunderbolt()
        port_names = {port.device: port.name for port in ports.ports}
    if listed := r.parse("ifconfig", parse_ifconfig, "addresses", command="ifconfig -a"):
        r.facts["interfaces"] = tuple(
            replace(i, port=port_names[i.name], kind=port_kind(port_names[i.name]))
            if i.name in port_names
            else i
            for i in listed
        )
    if tb is not None:
        tb_ports = _thunderbolt_ports(tb, interfaces, states)
        r.facts.update(thunderbolt=tb_ports, domain_uuids=tuple(t.domain_uuid for t in tb_ports))
        missing = [port.label for port in tb_ports if port.interface is None]
        if missing:
            r.unknown(f"networksetup names no interface for {', '.join(missing)}", "interfaces")
    if bridge := r.parse("ifconfig_bridge0", p.parse_ifconfig_bridge, "bridge", stderr=True):
        r.facts.update(
            bridge_exists=bridge.exists,
            bridge_active=bridge.active,
            bridge_members=bridge.members,
        )


def _memory(r: _Reader) -> None:
    """GPU wired limit, free memory, memory pressure."""
    if (section := r.section("iogpu", "wired_limit_mb")) is not None:
        # "unknown oid" arrives on stderr: let the parser's reason quote it.
        limit = p.parse_wired_limit(section.stdout or section.stderr)
        if isinstance(limit, Unknown):
            r.unknown(limit.reason, "wired_limit_mb")
        else:
            r.facts["wired_limit_mb"] = limit.limit_mb
    if pressure := r.parse("vm_pressure", p.parse_memory_pressure, "memory_pressure"):
        r.facts["memory_pressure"] = pressure.level
    if disk := r.parse("df", p.parse_df, "disk_free_bytes", command="df"):
        r.facts["disk_free_bytes"] = disk.available_bytes
    if r.facts.get("os_name") == "Linux":
        _linux_memory(r)
        return
    if vm := r.parse("vm_stat", p.parse_vm_stat, "free_memory_bytes"):
        r.facts["free_memory_bytes"] = vm.available_bytes


def _linux_memory(r: _Reader) -> None:
    """A Linux host's memory, from /proc/meminfo: what its sysctl and vm_stat could not
    say (their reasons are dropped once this says it)."""
    info = r.parse("meminfo", p.parse_meminfo, "memory_bytes", "free_memory_bytes")
    if info is None:
        return
    r.facts["memory_bytes"] = info.total_bytes
    r.unknowns.pop("memory_bytes", None)
    if info.available_bytes is not None:
        r.facts["free_memory_bytes"] = info.available_bytes
        r.unknowns.pop("free_memory_bytes", None)


_PYTHON = ("python_version", "mlx_version", "mlx_lm_version")


def _python(r: _Reader) -> None:
    """The node's Python and its mlx / mlx-lm versions."""
    versions = r.parse("python", p.parse_python_versions, *_PYTHON, command="python")
    if versions is None:
        return
    r.facts.update(
        python_version=versions.python,
        python_executable=versions.executable,
        mlx_version=versions.mlx,
        mlx_lm_version=versions.mlx_lm,
        cpu_count=versions.cores,
        blas_path=versions.blas,
        blas_source=versions.blas_source,
    )
    where = versions.executable or "the node's Python"
    if versions.mlx is None:
        r.unknown(f"mlx is not installed for {where}", "mlx_version")
    if versions.mlx_lm is None:
        r.unknown(f"mlx-lm is not installed for {where}", "mlx_lm_version")


def _macmesh_app(r: _Reader) -> None:
    """MacMesh.app on the node (core.bundle.APP_BINARIES) and its version. Not having
    it is a fact (both None), not an unknown."""
    if r.rc("macmesh_app") == RC_NOT_FOUND:
        return
    fields = ("macmesh_app", "macmesh_app_version")
    app = r.parse("macmesh_app", p.parse_app_version, *fields, command="MacMesh.app")
    if app is None:
        return
    r.facts.update(macmesh_app=app.executable, macmesh_app_version=app.macmesh)


def parse_probe(name: str, output: str) -> NodeFacts:
    """The probe script's whole output on one node → its NodeFacts. Never raises."""
    r = _Reader(output)
    _system(r)
    tb = _hardware(r)
    states = _rdma(r)
    _network(r, tb, states)
    _memory(r)
    _python(r)
    _macmesh_app(r)
    return NodeFacts(name=name, unknowns=r.unknowns, probe_output=output, **r.facts)


Runner = Callable[[str], str]


def local_runner(
    env: Mapping[str, str] | None = None,
    timeout: float = 180.0,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> Runner:
    """Runs a script with this machine's /bin/sh and returns its stdout. Never raises on a
    failing script (the sections say what failed); past ``timeout`` the script's whole
    process group is stopped, so no command it started is left running. ``on_start``
    gets the shell's process (its own process group) so an owner can stop it early."""

    def run(script: str) -> str:
        proc = subprocess.Popen(
            ["/bin/sh", "-s"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
        if on_start is not None:
            on_start(proc)
        try:
            out, _ = proc.communicate(script.encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    out, _ = proc.communicate(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        return out.decode("utf-8", "replace")

    return run


def run_local_probe(
    name: str | None = None, python: str | Sequence[str] = "python3", run: Runner | None = None
) -> NodeFacts:
    """Probes this machine itself, without SSH: the same script, run with local ``sh``."""
    runner = run or local_runner()
    return parse_probe(name or platform.node() or "this Mac", runner(build_probe_script(python)))
