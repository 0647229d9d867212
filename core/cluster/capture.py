"""A capture: what every node's probe printed, redacted, in one zip a person can send
with a bug report, and that a test turns back into simulated Macs (issue 27).

Layout (format 1)::

    manifest.json                      format, MacMesh's version, when, the nodes (alias,
                                       state, message, versions), the sections, the logs,
                                       and every redaction rule with its count
    nodes/<alias>/<section>.stdout     each probe command's output, as printed
    nodes/<alias>/<section>.stderr
    nodes/<alias>/<section>.rc         its exit code ("cut": the output stopped there)
    logs/<run>/rank<N>.log             the last job's logs (the newest runs/<run>/)

Every text goes through one ``Redactor`` (``core.cluster.redact``) that first learns from
all of them, so one host has one alias everywhere. ``read_capture`` reads one back with
the limits a file from elsewhere deserves (its size, its members' names and count).
"""

from __future__ import annotations

import getpass
import json
import os
import platform
import re
import time
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import __version__, paths
from core.cluster.probe.facts import NodeFacts
from core.cluster.probe.script import BEGIN, END, STDERR
from core.cluster.probe.sections import Section, split_sections
from core.cluster.redact import Redactor
from core.cluster.registry import Node
from core.jsonfile import FileProblem, bounded_number, loads_bounded, open_regular

FORMAT = "macmesh-capture"
VERSION = 1
LOG_TAIL_BYTES = 256 * 1024  # of each rank's log: its end says why a job failed
MAX_MEMBERS = 2000
MAX_MEMBER_BYTES = 16 * 1024 * 1024
MAX_TOTAL_BYTES = 128 * 1024 * 1024
MAX_ZIP_BYTES = 128 * 1024 * 1024
MAX_NODES = 256  # more Macs than a Thunderbolt cluster has; a window paints them all
MANIFEST_DEPTH = 16
_SAFE = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")


class CaptureError(ValueError):
    """A file that is not a capture MacMesh can read; the message says why, in one line."""


@dataclass(frozen=True)
class Capture:
    """A capture read back: its manifest and each node's sections by alias."""

    manifest: dict[str, Any]
    nodes: dict[str, dict[str, Section]] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)  # "run/rankN.log" → text


def _sections(node: Node) -> dict[str, Section]:
    facts = node.facts if isinstance(node.facts, NodeFacts) else None
    return split_sections(facts.probe_output) if facts is not None else {}


def newest_logs(root: Path | None = None) -> tuple[str, dict[str, str]]:
    """The newest run folder under ``<log folder>/runs`` and its ranks' logs (the end of
    each): ("", {}) when no job ran yet."""
    runs = (root or paths.log_dir()) / "runs"
    try:
        folders = [p for p in runs.iterdir() if p.is_dir()]
    except OSError:
        return "", {}
    if not folders:
        return "", {}
    newest = max(folders, key=lambda p: (p.stat().st_mtime, p.name))
    logs = {}
    for log in sorted(newest.glob("rank*.log")):
        with open(log, "rb") as stream:
            stream.seek(max(0, log.stat().st_size - LOG_TAIL_BYTES))
            logs[log.name] = stream.read().decode("utf-8", "replace")
    return newest.name, logs


def _versions(facts: NodeFacts | None) -> dict[str, str | None]:
    if facts is None:
        return {}
    return {
        "os": facts.os_name,
        "macos": facts.macos_version,
        "macos_build": facts.macos_build,
        "python": facts.python_version,
        "mlx": facts.mlx_version,
        "mlx_lm": facts.mlx_lm_version,
        "macmesh_app": facts.macmesh_app_version,
    }


def build_capture(
    nodes: Sequence[Node],
    redactor: Redactor | None = None,
    log_root: Path | None = None,
) -> dict[str, str]:
    """The capture's members (name → text), every text redacted. Pure but for reading
    the logs (``log_root``: the log folder, default MacMesh's)."""
    redactor = redactor or Redactor()
    sections = {node.name: _sections(node) for node in nodes}
    run, logs = newest_logs(log_root)
    for node in nodes:  # names first, in order (this machine is mac-1): mac-N is node N
        redactor.host(node.name)
    for node in nodes:  # then their host names, each as its node's alias
        redactor.host(node.hostname, same_as=node.name)
    redactor.host(platform.node())
    for node in nodes:
        redactor.user(node.user)
    redactor.user(getpass.getuser())
    texts = [t for found in sections.values() for s in found.values() for t in (s.stdout, s.stderr)]
    texts += [node.probe_message for node in nodes] + list(logs.values())
    for text in texts:
        redactor.learn(text)
    members: dict[str, str] = {}
    described = []
    for node in nodes:
        alias = redactor.host(node.name) or "node"
        facts = node.facts if isinstance(node.facts, NodeFacts) else None
        described.append(
            {
                "alias": alias,
                "this_machine": node.is_self,
                "kind": node.kind or None,
                "state": node.probe_state.value,
                "message": redactor.redact(node.probe_message),
                "sources": sorted(str(s) for s in node.sources),
                # The MacMesh a node announces (its _macmesh._tcp record), beside its probe's.
                "versions": {"macmesh": node.macmesh_version or None, **_versions(facts)},
            }
        )
        for name, section in sections[node.name].items():
            stem = f"nodes/{alias}/{name}"
            members[f"{stem}.stdout"] = redactor.redact(section.stdout)
            members[f"{stem}.stderr"] = redactor.redact(section.stderr)
            members[f"{stem}.rc"] = "cut\n" if section.rc is None else f"{section.rc}\n"
    for name, text in logs.items():
        members[f"logs/{run}/{name}"] = redactor.redact(text)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "macmesh": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "nodes": described,
        "logs": sorted(k for k in members if k.startswith("logs/")),
        "redaction": redactor.rules(),
    }
    return {"manifest.json": json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", **members}


def write_capture(
    path: Path,
    nodes: Sequence[Node],
    redactor: Redactor | None = None,
    log_root: Path | None = None,
) -> Path:
    """``build_capture`` into the zip at ``path`` (written beside it, then moved in
    place: never half a file). Raises OSError."""
    members = build_capture(nodes, redactor, log_root)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, text in members.items():
                archive.writestr(name, text)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def read_capture(path: Path) -> Capture:
    """A capture file read back, checked member by member before anything is built from
    it: a regular file of bounded size, a zip whose members are stored or deflated, not
    encrypted, of safe names and bounded sizes, each whose CRC holds; a manifest of
    format 1, bounded nesting, ``nodes`` a list of at most ``MAX_NODES`` objects.
    CaptureError (one line naming the file and what is wrong) otherwise."""
    try:
        file = open_regular(path, MAX_ZIP_BYTES)
    except FileProblem as problem:
        if not path.exists():
            raise CaptureError(f"{path} does not exist: give the path of a capture .zip") from None
        if path.is_dir():
            raise CaptureError(f"{path} is a folder: give the path of a capture .zip") from None
        raise CaptureError(f"{problem}: give the path of a capture .zip") from None
    with file:
        try:
            archive = zipfile.ZipFile(file)
        except (OSError, ValueError, zipfile.BadZipFile) as error:
            raise CaptureError(f"{path} is not a capture (a zip file): {error}") from None
        with archive:
            texts = _members(path, archive)
    try:
        manifest = loads_bounded(texts.get("manifest.json", ""), MANIFEST_DEPTH)
    except ValueError as error:
        if "manifest.json" in texts:
            raise CaptureError(f"{path}: manifest.json is {error}") from None
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CaptureError(f"{path} has no MacMesh capture manifest (manifest.json)")
    if manifest.get("version") != VERSION:
        raise CaptureError(f"{path} is capture format {manifest.get('version')!r}; this reads 1")
    _check_nodes(path, manifest.get("nodes", []))
    nodes: dict[str, dict[str, Section]] = {}
    for name in texts:
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == "nodes" and parts[2].endswith(".rc"):
            alias, section = parts[1], parts[2].removesuffix(".rc")
            stem = f"nodes/{alias}/{section}"
            rc_text = texts[name].strip()
            rc = None if rc_text == "cut" else _int(rc_text, name, path)
            nodes.setdefault(alias, {})[section] = Section(
                section, rc, texts.get(f"{stem}.stdout", ""), texts.get(f"{stem}.stderr", "")
            )
    if len(nodes) > MAX_NODES:
        raise CaptureError(f"{path} holds {len(nodes):,} nodes: a capture has at most {MAX_NODES}")
    logs = {n.removeprefix("logs/"): t for n, t in texts.items() if n.startswith("logs/")}
    return Capture(manifest, nodes, logs)


_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}


def _members(path: Path, archive: zipfile.ZipFile) -> dict[str, str]:
    """Every member's text, each checked before it is read (method, encryption, name,
    size) and as it is (its CRC, its deflate stream)."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise CaptureError(f"{path} holds {len(infos)} files: a capture has far fewer")
    if sum(i.file_size for i in infos) > MAX_TOTAL_BYTES:
        raise CaptureError(f"{path} unpacks to more than {MAX_TOTAL_BYTES >> 20} MB")
    texts: dict[str, str] = {}
    for info in infos:
        if info.is_dir():
            continue
        name = info.filename[:80]
        parts = info.filename.split("/")
        if not all(_SAFE.match(p) and p not in (".", "..") for p in parts):
            raise CaptureError(f"{path}: {name!r} is not a capture member name")
        if info.filename in texts:
            raise CaptureError(f"{path}: {name} is in it twice")
        if info.flag_bits & 0x1:
            raise CaptureError(f"{path}: {name} is encrypted; a capture never is")
        if info.compress_type not in _METHODS:
            raise CaptureError(
                f"{path}: {name} is packed with method {info.compress_type}; a capture's "
                "members are stored or deflated"
            )
        if info.file_size > MAX_MEMBER_BYTES or info.compress_size > MAX_MEMBER_BYTES:
            raise CaptureError(f"{path}: {name} is larger than a capture holds")
        try:
            with archive.open(info) as member:
                data = member.read(MAX_MEMBER_BYTES + 1)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError) as error:
            raise CaptureError(f"{path}: {name} is damaged ({error})") from None
        if len(data) > MAX_MEMBER_BYTES:
            raise CaptureError(f"{path}: {name} is larger than a capture holds")
        texts[info.filename] = data.decode("utf-8", "replace")
    return texts


def _check_nodes(path: Path, nodes: Any) -> None:
    """The manifest's ``nodes``: a list of at most ``MAX_NODES`` objects."""
    if not isinstance(nodes, list):
        raise CaptureError(
            f'{path}: manifest.json "nodes" is {type(nodes).__name__} {str(nodes)[:20]!r}, '
            "not a list of nodes"
        )
    if len(nodes) > MAX_NODES:
        raise CaptureError(
            f"{path}: manifest.json lists {len(nodes):,} nodes; a capture has at most {MAX_NODES}"
        )
    for n, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise CaptureError(f"{path}: manifest.json node {n + 1} is not an object")


def _int(text: str, name: str, path: Path) -> int:
    try:
        return bounded_number(text, 10)
    except ValueError:
        raise CaptureError(f"{path}: {name} is not an exit code") from None


def probe_output(sections: dict[str, Section]) -> str:
    """A node's sections as the probe script would print them (what ``parse_probe``
    reads): a captured node's facts come back from its capture."""
    parts = []
    for name, s in sections.items():
        end = "\n" if s.rc is None else f"\n{END} {name} rc={s.rc}@@\n"
        parts.append(f"{BEGIN} {name}@@\n{s.stdout}\n{STDERR} {name}@@\n{s.stderr}{end}")
    return "".join(parts)
