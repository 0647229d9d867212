"""Pure parsers for the text the probe's macOS commands print.

Formats: ``docs/macos-outputs.md`` (the section named in each
docstring). Each parser returns a small frozen dataclass, or ``Unknown(reason)`` when
the text is not what the command prints; none raises on bad input, so one malformed
section never hides the others. ``system_profiler``'s JSON is in ``profiler.py``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from core.cluster.probe.sections import Unknown, first_line

NO_IB_DEVICES = "No IB devices found"


def _lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").split("\n")


@dataclass(frozen=True)
class MacOSVersion:
    """``sw_vers``: e.g. 26.2 (25C56). JACCL wants the same build on every node."""

    version: str
    build: str | None
    major: int
    minor: int
    product: str | None = None


def parse_sw_vers(text: str) -> MacOSVersion | Unknown:
    """``sw_vers`` ("Key:<tabs>value" lines)."""
    values: dict[str, str] = {}
    for line in _lines(text):
        key, sep, value = line.partition(":")
        if sep and value.strip():
            values[key.strip()] = value.strip()
    version = values.get("ProductVersion")
    if version is None:
        return Unknown("sw_vers printed no ProductVersion")
    match = re.fullmatch(r"(\d+)(?:\.(\d+))?(?:\.\d+)*", version)
    if not match:
        return Unknown(f"sw_vers: unreadable ProductVersion {version!r}")
    return MacOSVersion(
        version=version,
        build=values.get("BuildVersion"),
        major=int(match[1]),
        minor=int(match[2] or 0),
        product=values.get("ProductName"),
    )


@dataclass(frozen=True)
class SysctlHardware:
    """``sysctl -n hw.memsize hw.model machdep.cpu.brand_string``; a field None when absent."""

    memory_bytes: int | None
    model_id: str | None
    chip: str | None


_MODEL_ID = re.compile(r"[A-Za-z]+\d+,\d+")
_CHIP = re.compile(r"[A-Za-z][A-Za-z0-9 ().,@_+-]*")  # "Apple M3 Ultra", "Intel(R) Core(TM) i9"


def parse_sysctl_hw(text: str) -> SysctlHardware | Unknown:
    """Values one a line (or ``name: value`` lines without ``-n``). An unknown key is left
    out of the output rather than printed empty, so values are recognised by their shape,
    not their position."""
    memory = model = chip = None
    for line in _lines(text):
        key, sep, value = line.strip().rpartition(": ")
        if key == "hw.memsize" and value.isdecimal():
            memory = int(value)
        elif key == "hw.model":
            model = value
        elif key == "machdep.cpu.brand_string":
            chip = value
        elif sep or not value:
            continue
        elif value.isdecimal() and memory is None:
            memory = int(value)
        elif _MODEL_ID.fullmatch(value) and model is None:
            model = value
        elif chip is None and _CHIP.fullmatch(value):
            chip = value
    if memory is None and model is None and chip is None:
        return Unknown("sysctl printed none of hw.memsize, hw.model, machdep.cpu.brand_string")
    return SysctlHardware(memory, model, chip)


@dataclass(frozen=True)
class HardwarePort:
    name: str
    device: str
    mac: str | None = None


@dataclass(frozen=True)
class HardwarePorts:
    """``networksetup -listallhardwareports``: the hardware port → interface table."""

    ports: tuple[HardwarePort, ...]

    def thunderbolt(self) -> dict[int, str]:
        """Receptacle number → interface: "Thunderbolt 2" → 2 → "en3"."""
        table = {}
        for port in self.ports:
            match = re.fullmatch(r"Thunderbolt (\d+)", port.name)
            if match:
                table[int(match[1])] = port.device
        return table

    @property
    def bridge(self) -> str | None:
        """The Thunderbolt Bridge's interface (``bridge0``), when the port exists."""
        return next((p.device for p in self.ports if p.name == "Thunderbolt Bridge"), None)


def parse_networksetup(text: str) -> HardwarePorts | Unknown:
    """Blocks of "Hardware Port / Device / Ethernet Address", until the VLAN footer."""
    ports: list[HardwarePort] = []
    name = device = mac = None
    for line in [*_lines(text), ""]:
        if line.startswith("VLAN Configurations"):
            break
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "Hardware Port":
            name, device, mac = value, None, None
        elif key == "Device":
            device = value
        elif key == "Ethernet Address":
            mac = value
        elif not line.strip() and name and device:
            ports.append(HardwarePort(name, device, mac))
            name = device = mac = None
    if name and device:
        ports.append(HardwarePort(name, device, mac))
    if not ports:
        return Unknown("networksetup listed no hardware ports")
    return HardwarePorts(tuple(ports))


@dataclass(frozen=True)
class Bridge:
    """``ifconfig bridge0``. ``active`` None when ifconfig printed no status line."""

    exists: bool
    members: tuple[str, ...] = ()
    active: bool | None = None


def parse_ifconfig_bridge(stdout: str, stderr: str = "") -> Bridge | Unknown:
    """Members (``\\tmember: en2 flags=...``) and ``\\tstatus: active|inactive``."""
    if "does not exist" in stderr or "Device not found" in stderr:
        return Bridge(exists=False)
    members: list[str] = []
    active = None
    for line in _lines(stdout):
        match = re.match(r"\s+member: (\S+)", line)
        if match:
            members.append(match[1])
        match = re.match(r"\s+status: (\S+)", line)
        if match:
            active = match[1] == "active"
    if not re.match(r"bridge\d+: flags=", stdout):
        return Unknown(f"ifconfig bridge0: {first_line(stderr) or 'unexpected output'}")
    return Bridge(exists=True, members=tuple(members), active=active)


@dataclass(frozen=True)
class RdmaCtl:
    """``rdma_ctl status``: one word."""

    enabled: bool


def parse_rdma_ctl(text: str) -> RdmaCtl | Unknown:
    word = text.strip().lower()
    if word in ("enabled", "disabled"):
        return RdmaCtl(enabled=word == "enabled")
    return Unknown(f"rdma_ctl status said {first_line(text)!r}, not enabled/disabled")


@dataclass(frozen=True)
class IbvDevice:
    name: str
    guid: str


@dataclass(frozen=True)
class IbvDevices:
    """``ibv_devices``. ``stack`` False: "No IB devices found" (no RDMA stack at all)."""

    stack: bool
    devices: tuple[IbvDevice, ...] = ()

    @property
    def rdma_names(self) -> tuple[str, ...]:
        return tuple(sorted(d.name for d in self.devices if d.name.startswith("rdma_")))


def parse_ibv_devices(stdout: str, stderr: str = "") -> IbvDevices | Unknown:
    """rdma-core's table: two header lines, then ``    name<pad>\\tGUID`` per device."""
    if NO_IB_DEVICES in stdout or NO_IB_DEVICES in stderr:
        return IbvDevices(stack=False)
    lines = _lines(stdout)
    if not any(line.strip().startswith("device") for line in lines[:2]):
        return Unknown(f"ibv_devices: {first_line(stderr or stdout) or 'no output'}")
    devices = []
    for line in lines[2:]:
        fields = line.split()
        if len(fields) == 2 and re.fullmatch(r"[0-9a-fA-F]{16}", fields[1]):
            devices.append(IbvDevice(fields[0], fields[1].lower()))
    return IbvDevices(stack=True, devices=tuple(devices))


@dataclass(frozen=True)
class IbvPort:
    number: int
    state: str  # "PORT_ACTIVE", "PORT_DOWN", ...
    link_layer: str | None = None


@dataclass(frozen=True)
class IbvDeviceInfo:
    name: str
    transport: str | None
    node_guid: str | None
    ports: tuple[IbvPort, ...]


@dataclass(frozen=True)
class IbvDevInfo:
    """``ibv_devinfo``: one block per device (``hca_id:``), ports with their state."""

    devices: tuple[IbvDeviceInfo, ...]

    def port_states(self) -> dict[str, str]:
        """Device → state of its first port (a Thunderbolt RDMA device has one port)."""
        return {d.name: d.ports[0].state for d in self.devices if d.ports}


def parse_ibv_devinfo(stdout: str, stderr: str = "") -> IbvDevInfo | Unknown:
    if NO_IB_DEVICES in stdout or NO_IB_DEVICES in stderr:
        return IbvDevInfo(devices=())
    devices: list[IbvDeviceInfo] = []
    current: dict[str, Any] | None = None

    def flush() -> None:
        if current is not None:
            ports = tuple(IbvPort(**port) for port in current.pop("ports") if "state" in port)
            devices.append(IbvDeviceInfo(ports=ports, **current))

    for line in _lines(stdout):
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if key == "hca_id":
            flush()
            current = {"name": value, "transport": None, "node_guid": None, "ports": []}
        elif current is None:
            continue
        elif key == "transport":
            current["transport"] = value
        elif key == "node_guid":
            current["node_guid"] = value
        elif key == "port" and value.isdecimal():
            current["ports"].append({"number": int(value)})
        elif key == "state" and current["ports"]:
            current["ports"][-1]["state"] = value.split()[0] if value else "?"
        elif key == "link_layer" and current["ports"]:
            current["ports"][-1]["link_layer"] = value
    flush()
    if not devices:
        return Unknown(f"ibv_devinfo: {first_line(stderr or stdout) or 'no devices listed'}")
    return IbvDevInfo(tuple(devices))


@dataclass(frozen=True)
class WiredLimit:
    """``sysctl iogpu.wired_limit_mb``; ``limit_mb`` None means 0, the macOS default."""

    limit_mb: int | None


def parse_wired_limit(text: str) -> WiredLimit | Unknown:
    """``iogpu.wired_limit_mb: 0``, or ``... : 0 -> 458752`` right after setting it."""
    match = re.search(r"iogpu\.wired_limit_mb:\s*(-?\d+)(?:\s*->\s*(-?\d+))?", text)
    if not match:
        return Unknown(f"iogpu.wired_limit_mb: {first_line(text) or 'no value'}")
    value = int(match[2] if match[2] is not None else match[1])
    return WiredLimit(limit_mb=value if value > 0 else None)


@dataclass(frozen=True)
class MemoryPressure:
    """``sysctl -n kern.memorystatus_vm_pressure_level``: 1 normal, 2 warn, 4 critical."""

    level: int

    @property
    def label(self) -> str:
        return {1: "normal", 2: "warning", 4: "critical"}.get(self.level, f"level {self.level}")


def parse_memory_pressure(text: str) -> MemoryPressure | Unknown:
    value = text.strip()
    if not value.isdecimal():
        return Unknown(f"memory pressure: {first_line(text) or 'no value'}")
    return MemoryPressure(int(value))


@dataclass(frozen=True)
class VmStat:
    """``vm_stat``: page counts. Free memory counts free and speculative pages; available
    adds inactive pages, which macOS hands out without swapping."""

    page_size: int
    free_pages: int
    inactive_pages: int
    speculative_pages: int = 0

    @property
    def free_bytes(self) -> int:
        return (self.free_pages + self.speculative_pages) * self.page_size

    @property
    def available_bytes(self) -> int:
        return (self.free_pages + self.speculative_pages + self.inactive_pages) * self.page_size


def parse_vm_stat(text: str) -> VmStat | Unknown:
    """Header "(page size of N bytes)", then ``Pages free:<spaces>N.`` lines."""
    page = re.search(r"page size of (\d+) bytes", text)
    counts = {
        m[1].strip(): int(m[2])
        for m in re.finditer(r"^\"?([^\":\n]+)\"?:\s+(\d+)\.?\s*$", text, re.MULTILINE)
    }
    if not page or "Pages free" not in counts or "Pages inactive" not in counts:
        return Unknown("vm_stat: no page size or no free/inactive page counts")
    return VmStat(
        page_size=int(page[1]),
        free_pages=counts["Pages free"],
        inactive_pages=counts["Pages inactive"],
        speculative_pages=counts.get("Pages speculative", 0),
    )


@dataclass(frozen=True)
class DiskFree:
    """``df -Pk .`` in the node's home: the free space where MacMesh keeps its cache."""

    available_bytes: int


def parse_df(text: str) -> DiskFree | Unknown:
    """POSIX ``df -P -k``: a header, then the file system's row, read by the model
    check's own reader (``core.remote.modelcheck.parse_df``)."""
    from core.remote.modelcheck import parse_df as free_bytes  # paramiko: only when asked

    found = [free for line in text.splitlines() if (free := free_bytes(line)) is not None]
    if not found:
        return Unknown(f"df: {first_line(text) or 'no file system row'}")
    return DiskFree(available_bytes=found[-1])


@dataclass(frozen=True)
class MemInfo:
    """Linux's ``/proc/meminfo`` (a ring-only node): total and available memory."""

    total_bytes: int
    available_bytes: int | None


def parse_meminfo(text: str) -> MemInfo | Unknown:
    """``MemTotal:       24589708 kB`` lines; MemAvailable since Linux 3.14."""
    values = {
        m[1]: int(m[2]) * 1024 for m in re.finditer(r"^(\w+):\s+(\d+) kB\s*$", text, re.MULTILINE)
    }
    if "MemTotal" not in values:
        return Unknown("/proc/meminfo: no MemTotal line")
    return MemInfo(values["MemTotal"], values.get("MemAvailable"))


@dataclass(frozen=True)
class Kernel:
    """``uname -sr``: e.g. Darwin 25.2.0 (macOS 26 is Darwin 25)."""

    system: str
    release: str

    @property
    def major(self) -> int | None:
        match = re.match(r"(\d+)", self.release)
        return int(match[1]) if match else None


def parse_uname(text: str) -> Kernel | Unknown:
    fields = text.split()
    if len(fields) != 2:
        return Unknown(f"uname: unexpected output {first_line(text)!r}")
    return Kernel(fields[0], fields[1])


@dataclass(frozen=True)
class PythonVersions:
    """The node's Python, and mlx / mlx-lm as installed for it (None: not installed)."""

    python: str
    executable: str | None
    mlx: str | None
    mlx_lm: str | None
    cores: int | None = None
    blas: str | None = None  # Linux: the fast BLAS a rank there preloads (None: none found)
    blas_source: str | None = None  # "pip cmeel-openblas" or "system"


def _json_object(line: str) -> dict[str, Any] | None:
    """The JSON object a whole line holds, else None (a probe's Python may print other
    lines first)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):  # a line nested deeper than json goes
        return None
    return data if isinstance(data, dict) else None


def parse_python_versions(text: str) -> PythonVersions | Unknown:
    """The probe's one JSON line; other lines (a sitecustomize's chatter) are skipped."""
    for line in _lines(text):
        data = _json_object(line)
        if data is None or not isinstance(data.get("python"), str):
            continue

        def text_or_none(key: str, data: dict[str, Any] = data) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        cores = data.get("cores")
        return PythonVersions(
            data["python"],
            text_or_none("executable"),
            text_or_none("mlx"),
            text_or_none("mlx_lm"),
            cores if isinstance(cores, int) and not isinstance(cores, bool) else None,
            text_or_none("blas"),
            text_or_none("blas_source"),
        )
    return Unknown(f"python: {first_line(text) or 'no version printed'}")


@dataclass(frozen=True)
class AppVersion:
    """MacMesh.app on a node, from its worker's ``--version`` line."""

    executable: str | None  # the app binary: that node's "python" for the worker
    macmesh: str | None
    mlx: str | None
    mlx_lm: str | None

    KEYS: ClassVar[tuple[str, ...]] = ("executable", "macmesh", "mlx", "mlx_lm")


def parse_app_version(text: str) -> AppVersion | Unknown:
    """The probe's ``macmesh_app`` section: the app binary's path on the first line, then
    its ``MacMesh -m core.worker --version`` JSON line (one with a ``macmesh`` key)."""
    path = None
    for line in _lines(text):
        line = line.strip()
        if path is None and line.startswith("/"):
            path = line
        data = _json_object(line)
        if data is None or "macmesh" not in data:
            continue
        values = [data.get(k) if isinstance(data.get(k), str) else None for k in AppVersion.KEYS]
        executable, *versions = values
        return AppVersion(path or executable, *versions)
    return Unknown(f"MacMesh.app: {first_line(text) or 'no version printed'}")
