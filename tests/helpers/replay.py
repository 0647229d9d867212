"""A capture (``macmesh doctor --capture``) back as simulated Macs: one call turns it into
a fixture set with the convention of ``tests/fixtures/macos`` (one folder per node, a
file per command: ``<stem>`` stdout, ``<stem>.stderr``, ``<stem>.rc``), which
``make_bin`` serves behind the real sshd and ``hosts.probe_output`` reads directly::

    folder = capture_fixture_set(Path("studio.zip"), tmp_path / "studio")
    facts = [parse_probe(h.name, probe_output(h)) for h in replay_hosts(folder)]

From then on the studio's cluster is a regression test: copy the folder under
``tests/fixtures/macos/`` with a PROVENANCE.md saying where the capture came from.
"""

from __future__ import annotations

from pathlib import Path

from core.cluster.capture import read_capture
from core.cluster.probe.script import RC_NOT_FOUND, RC_TIMEOUT
from core.cluster.probe.sections import Section
from tests.fixtures.macos.hosts import STEMS


def _files(section: Section) -> dict[str, str]:
    """One section as fixture files, suffix → text: none for a command not found (the
    fake is then not written and the probe finds it missing, as on that node)."""
    if section.rc == RC_NOT_FOUND and not section.stdout:
        return {}
    files = {"": section.stdout}
    rc = RC_TIMEOUT if section.rc is None else section.rc  # cut off: as a command that hung
    if section.stderr or section.rc is None:
        files[".stderr"] = section.stderr or "macmesh-replay: the output was cut off here\n"
    if rc != 0:
        files[".rc"] = f"{rc}\n"
    return files


def capture_fixture_set(capture: Path, folder: Path) -> Path:
    """The capture at ``capture`` written as a fixture set in ``folder`` (created; one
    sub-folder per node alias, in the capture's order). Sections this MacMesh's probe
    does not run are left out. Returns ``folder``."""
    read = read_capture(capture)
    folder.mkdir(parents=True, exist_ok=True)
    for alias, sections in read.nodes.items():
        host = folder / alias
        host.mkdir()
        for name, section in sections.items():
            stem = STEMS.get(name)
            if stem is None:
                continue
            for suffix, text in _files(section).items():
                (host / f"{stem}{suffix}").write_text(text)
    return folder


def captured_linux(capture: Path) -> set[str]:
    """The aliases of the capture's Linux hosts (the manifest's ``kind``): the test bench
    announces them as a Linux box does (SSH only), not as a Mac."""
    return {
        str(node.get("alias"))
        for node in read_capture(capture).manifest.get("nodes", [])
        if isinstance(node, dict) and node.get("kind") == "Linux"
    }


def replay_hosts(folder: Path) -> list[Path]:
    """The simulated nodes of a replayed capture, in the capture's order (mac-1, mac-2...)."""
    found = [p for p in folder.iterdir() if p.is_dir()]
    return sorted(found, key=lambda p: (len(p.name), p.name))
