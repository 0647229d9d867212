"""The simulated cluster by hand: a real sshd serving one fixture cluster's Macs on
127.0.0.2, 127.0.0.3, ..., each announced over Bonjour on 127.0.0.1 with the records a
real Mac publishes, until Ctrl-C. The pytest fixtures in ``tests/helpers/sshd.py`` are
the same parts; this is for looking at the app with "real" Macs around::

    .venv/bin/python -m tests.helpers.testbench mesh4 [--linux] [--trust]
    .venv/bin/python -m tests.helpers.testbench --replay FILE.zip [--trust]

``--replay`` serves the Macs of a capture (``macmesh doctor --capture``) instead of a
fixture set, each answering with what it printed there (``tests.helpers.replay``).

It prints the two commands to run against it (``macmesh nodes`` and the window), with
``MACMESH_SSH_DIR`` pointing at a client key the sshd accepts. Without ``--trust`` the
window asks to trust each Mac's host key, as on first contact with real Macs.
Everything stays on loopback.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from zeroconf import ServiceInfo, Zeroconf

from core.cluster import discovery as d
from core.cluster.capture import CaptureError
from tests.fixtures.macos.hosts import ROOT as FIXTURES
from tests.fixtures.macos.hosts import SETS, hosts
from tests.fixtures.macos.make_bin import make_bin
from tests.helpers.replay import capture_fixture_set, captured_linux, replay_hosts
from tests.helpers.sshd import SSHServer, running_sshd

LOOPBACK = ["127.0.0.1"]
LINUX_HOST = FIXTURES / "linux" / "debian-box"


def service(kind: str, name: str, host: str, address: str, port: int, **txt: str) -> ServiceInfo:
    return ServiceInfo(
        kind, f"{name}.{kind}", port=port, parsed_addresses=[address],
        server=f"{host}.local.", properties=txt,
    )  # fmt: skip


def mac_records(name: str, host: str, address: str, port: int) -> list[ServiceInfo]:
    """What a Mac with Remote Login on publishes (osxvers 25: macOS 26)."""
    return [
        service(d.SSH, name, host, address, port),
        service(d.SFTP_SSH, name, host, address, port),
        service(d.DEVICE_INFO, name, host, address, 0, model="Mac15,14", osxvers="25"),
    ]


def linux_records(name: str, host: str, address: str, port: int) -> list[ServiceInfo]:
    """What Avahi's ssh service file publishes on a Debian box: SSH only."""
    return [service(d.SSH, name, host, address, port)]


@contextlib.contextmanager
def published(infos: Sequence[ServiceInfo]) -> Iterator[Zeroconf]:
    """``infos`` announced on 127.0.0.1 (each registration probes its name for ~2 s, so
    they run side by side); goodbyes are sent on exit."""
    zc = Zeroconf(interfaces=LOOPBACK)
    try:
        with ThreadPoolExecutor(max(1, len(infos))) as pool:
            list(pool.map(zc.register_service, infos))
        yield zc
    finally:
        zc.close()


def trusted_known_hosts(server: SSHServer, names: Sequence[str], path: Path) -> Path:
    """A known_hosts trusting the server's key under ``names`` and its addresses."""
    kind, key = server.host_key.read_text().split()[:2]
    lines = [f"[{name.lower()}]:{server.port} {kind} {key}\n" for name in names]
    path.write_text(server.known_hosts_lines() + "".join(lines))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.testbench", description=__doc__)
    parser.add_argument("cluster", nargs="?", default="mesh4", choices=sorted(SETS))
    parser.add_argument("--linux", action="store_true", help="add the Debian box (ring only)")
    parser.add_argument("--trust", action="store_true", help="trust every host key up front")
    parser.add_argument(
        "--replay", metavar="FILE.zip", type=Path, help="serve the Macs of a capture instead"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # goodbyes on `kill` too
    with tempfile.TemporaryDirectory(prefix="macmesh-testbench-") as tmp:
        root = Path(tmp)
        linux = {LINUX_HOST.name} if args.linux else set()
        if args.replay is not None:
            try:
                host_dirs = replay_hosts(capture_fixture_set(args.replay, root / "replay"))
                linux |= captured_linux(args.replay)
            except CaptureError as error:
                parser.exit(2, f"testbench: {error}\n")
        else:
            host_dirs = hosts(args.cluster)
        host_dirs += [LINUX_HOST] if args.linux else []
        if not 1 <= len(host_dirs) <= 250:
            parser.exit(2, f"testbench: {len(host_dirs)} hosts: 1 to 250 can be served\n")
        addresses = [f"127.0.0.{n + 2}" for n in range(len(host_dirs))]
        bins = {
            a: make_bin(h, root / "bin" / h.name) for a, h in zip(addresses, host_dirs, strict=True)
        }
        with running_sshd(root / "sshd", bins, addresses) as server:
            records = []
            for address, host_dir in zip(addresses, host_dirs, strict=True):
                make = linux_records if host_dir.name in linux else mac_records
                records += make(host_dir.name, host_dir.name, address, server.port)
            if args.trust:
                names = [f"{h.name}.local" for h in host_dirs]
                trusted_known_hosts(server, names, server.client_dir / "known_hosts")
            with published(records):
                env = f"MACMESH_SSH_DIR={shlex.quote(str(server.client_dir))}"
                print(
                    f"{len(host_dirs)} simulated hosts on {', '.join(addresses)}, sshd port "
                    f"{server.port}, announced on 127.0.0.1.\n"
                    f"  {env} .venv/bin/macmesh nodes --interfaces 127.0.0.1 "
                    "--python macmesh-python\n"
                    f"  {env} .venv/bin/macmesh --interfaces 127.0.0.1\n"
                    "Ctrl-C ends it (goodbyes are sent, sshd is stopped).",
                    flush=True,
                )
                with contextlib.suppress(KeyboardInterrupt):
                    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
