"""Parsers for ``system_profiler SPHardwareDataType SPThunderboltDataType -json``.

Formats: docs/macos-outputs.md, sections "system_profiler SPThunderboltDataType
-json" and "system_profiler SPHardwareDataType -json". Real Macs add keys, reorder
buses and nest the peer Mac behind docks and hubs, so every lookup is guarded and a
bus that cannot be read is skipped, never fatal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.cluster.probe.sections import Unknown
from core.units import parse_size

RDMA_SERVICE_PROTOCOL = 64087  # the "unknown_xd_service" a peer with RDMA on advertises
_MAX_DEPTH = 8  # docks behind docks: deeper than this is not a desk


def load_profiler_json(text: str) -> dict[str, Any] | Unknown:
    """The JSON object, tolerating text printed before it (a warning on stdout)."""
    start = text.find("{")
    if start < 0:
        return Unknown("system_profiler printed no JSON")
    try:
        data = json.loads(text[start:])
    except (ValueError, RecursionError) as exc:
        return Unknown(f"system_profiler output is not valid JSON ({str(exc)[:80]})")
    if not isinstance(data, dict):
        return Unknown("system_profiler JSON is not an object")
    return data


def _str(item: Mapping[str, Any], key: str) -> str | None:
    value = item.get(key)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _entries(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = data.get(key)
    return [e for e in value if isinstance(e, Mapping)] if isinstance(value, list) else []


def _bytes(text: str | None) -> int | None:
    """ "512 GB" → 549755813888 (macOS counts memory in binary units)."""
    try:
        return parse_size(text or "")
    except ValueError:
        return None


@dataclass(frozen=True)
class Processors:
    total: int
    performance: int | None
    efficiency: int | None


def _processors(text: str | None) -> Processors | None:
    """ "proc 32:24:8:0" (recent macOS) or "proc 8:4:4" (older)."""
    match = re.fullmatch(r"proc (\d+):(\d+):(\d+)(?::\d+)*", text or "")
    if match:
        return Processors(int(match[1]), int(match[2]), int(match[3]))
    match = re.fullmatch(r"(?:proc )?(\d+)", text or "")
    return Processors(int(match[1]), None, None) if match else None


@dataclass(frozen=True)
class Hardware:
    """SPHardwareDataType's overview; a field None when the key is missing or unreadable."""

    chip: str | None
    memory_bytes: int | None
    model_id: str | None  # "Mac15,14"
    machine_name: str | None  # "Mac Studio"
    processors: Processors | None


def parse_hardware(text: str) -> Hardware | Unknown:
    data = load_profiler_json(text)
    if isinstance(data, Unknown):
        return data
    entries = _entries(data, "SPHardwareDataType")
    if not entries:
        return Unknown("system_profiler listed no SPHardwareDataType")
    item = entries[0]
    return Hardware(
        chip=_str(item, "chip_type"),
        memory_bytes=_bytes(_str(item, "physical_memory")),
        model_id=_str(item, "machine_model"),
        machine_name=_str(item, "machine_name"),
        processors=_processors(_str(item, "number_processors")),
    )


@dataclass(frozen=True)
class PeerMac:
    """A Mac at the far end of a Thunderbolt bus, as this Mac sees it."""

    domain_uuid: str  # equals the domain_uuid_key of the peer's own bus: the cable's identity
    model_id: str | None  # the peer's device_name_key, e.g. "Mac15,14"
    name: str | None  # the peer's _name, e.g. "Mac Studio"
    rdma_hint: bool  # lists unknown_xd_service 64087: a hint that RDMA is on there
    via: tuple[str, ...] = ()  # docks or hubs in between, nearest first


@dataclass(frozen=True)
class ThunderboltBus:
    """One Thunderbolt bus (one receptacle) of this Mac."""

    name: str  # "thunderboltusb4_bus_1"
    domain_uuid: str
    receptacle: int | None  # N of the hardware port "Thunderbolt N"
    speed: str | None  # as printed: "80 Gb/s", "Up to 120 Gb/s"
    link_gbps: int | None  # the live link's speed; None when idle or unreadable
    max_gbps: int | None  # what an idle port offers ("Up to N Gb/s")
    connected: bool
    peers: tuple[PeerMac, ...] = ()

    @property
    def peer(self) -> PeerMac | None:
        return self.peers[0] if self.peers else None


@dataclass(frozen=True)
class Thunderbolt:
    buses: tuple[ThunderboltBus, ...]
    skipped: int = 0  # buses without a domain UUID (a display, an unreadable entry)


def _has_rdma_service(item: Mapping[str, Any]) -> bool:
    return any(
        service.get("protocol_id_key") == RDMA_SERVICE_PROTOCOL
        or _str(service, "protocol_id_key") == str(RDMA_SERVICE_PROTOCOL)
        for service in _entries(item, "services_title")
    )


def _peers(items: list[Mapping[str, Any]], via: tuple[str, ...]) -> list[PeerMac]:
    """Every Mac under ``items``; an item without a domain UUID is a dock or hub to look
    behind. A Mac's own items are not searched: Macs do not forward Thunderbolt networks."""
    found: list[PeerMac] = []
    for item in items:
        uuid = _str(item, "domain_uuid_key")
        if uuid:
            found.append(
                PeerMac(
                    domain_uuid=uuid.upper(),
                    model_id=_str(item, "device_name_key"),
                    name=_str(item, "_name"),
                    rdma_hint=_has_rdma_service(item),
                    via=via,
                )
            )
        elif len(via) < _MAX_DEPTH:
            hop = _str(item, "_name") or _str(item, "device_name_key") or "a hub"
            found.extend(_peers(_entries(item, "_items"), (*via, hop)))
    return found


def _speed(text: str | None) -> tuple[int | None, int | None]:
    """(live link Gb/s, idle maximum Gb/s) from "80 Gb/s" or "Up to 120 Gb/s"."""
    match = re.match(r"(up to\s+)?(\d+)\s*Gb/s", text or "", re.IGNORECASE)
    if not match:
        return None, None
    return (None, int(match[2])) if match[1] else (int(match[2]), None)


def _bus(entry: Mapping[str, Any]) -> ThunderboltBus | None:
    uuid = _str(entry, "domain_uuid_key")
    if not uuid:
        return None
    tag = entry.get("receptacle_1_tag")
    tag = tag if isinstance(tag, Mapping) else {}
    receptacle = _str(tag, "receptacle_id_key")
    speed = _str(tag, "current_speed_key")
    link, top = _speed(speed)
    status = _str(tag, "receptacle_status_key")
    peers = tuple(_peers(_entries(entry, "_items"), ()))
    if status is not None:
        connected = status == "receptacle_connected"
    else:
        connected = link is not None or bool(peers)
    return ThunderboltBus(
        name=_str(entry, "_name") or "?",
        domain_uuid=uuid.upper(),
        receptacle=int(receptacle) if receptacle and receptacle.isdecimal() else None,
        speed=speed,
        link_gbps=link if connected else None,
        max_gbps=top,
        connected=connected,
        peers=peers,
    )


def parse_thunderbolt(text: str) -> Thunderbolt | Unknown:
    data = load_profiler_json(text)
    if isinstance(data, Unknown):
        return data
    if not isinstance(data.get("SPThunderboltDataType"), list):
        return Unknown("system_profiler listed no SPThunderboltDataType")
    buses, skipped = [], 0
    for entry in _entries(data, "SPThunderboltDataType"):
        bus = _bus(entry)
        if bus is None:
            skipped += 1
        else:
            buses.append(bus)
    buses.sort(key=lambda b: (b.receptacle is None, b.receptacle or 0, b.name))
    return Thunderbolt(tuple(buses), skipped)
