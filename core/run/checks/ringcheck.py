"""Check each ring link before the job: does the dialer reach the listener's chosen
address (issue 18)?

For each link (rank i-1 dials rank i), the listener's node binds a socket on each of
its candidate addresses (port 0) with its own Python, then the dialer's node makes a
short TCP connect to each, both over SSH. A path that does not answer (its address is
not on that node any more, the cable was pulled, a firewall) is dropped with the reason,
so the job falls back to the next path, and preflight says so plainly. The last path
(the address MacMesh reached the node at) is kept even when it does not answer: the
job's own connect then says why.

Scripts are pure text (``LISTEN``, ``DIAL``), run with the node's Python: no new tool
is needed on the Mac. Local targets (this machine) run them as local processes.
"""

from __future__ import annotations

import contextlib
import json
import queue
import shlex
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from core.cluster.ringpath import RingLink
from core.remote.ssh import Connection, SSHError
from core.remote.targets import Target

DIAL_TIMEOUT_S = 2.0  # one TCP connect; a live Thunderbolt or LAN path answers in ms
LISTEN_S = 30.0  # the listener ends on its own after this, whatever happens
START_TIMEOUT_S = 15.0  # for the listener's first line (its Python starting)

# argv: the addresses to listen on. Prints {"ip": port or "error"} once listening, then
# accepts (and closes) connections until its stdin ends or LISTEN_S passes.
LISTEN = f"""\
import json, os, select, socket, sys, time
socks, out = {{}}, {{}}
for ip in sys.argv[1:]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((ip, 0))
        s.listen(16)
        socks[s] = ip
        out[ip] = s.getsockname()[1]
    except (OSError, ValueError) as e:
        out[ip] = getattr(e, "strerror", None) or str(e)
        s.close()
print(json.dumps(out), flush=True)
end = time.monotonic() + {LISTEN_S}
while time.monotonic() < end:
    ready, _, _ = select.select([*socks, sys.stdin], [], [], 0.5)
    for s in ready:
        if s is sys.stdin:
            if not os.read(sys.stdin.fileno(), 64):
                sys.exit(0)
        else:
            s.accept()[0].close()
"""

# argv: "ip:port" targets. Prints {"ip:port": "ok" or the error}.
DIAL = f"""\
import json, socket, sys
out = {{}}
for target in sys.argv[1:]:
    ip, port = target.rsplit(":", 1)
    try:
        socket.create_connection((ip, int(port)), timeout={DIAL_TIMEOUT_S}).close()
        out[target] = "ok"
    except OSError as e:
        out[target] = "timed out" if isinstance(e, socket.timeout) else (e.strerror or str(e))
print(json.dumps(out), flush=True)
"""


class CheckFailed(Exception):
    """The check itself could not run (not: a path did not answer)."""


class _Listener(Protocol):
    def ports(self) -> dict[str, int | str]: ...
    def stop(self) -> None: ...


@dataclass
class _RemoteListener:
    connection: Connection
    command: str

    def __post_init__(self) -> None:
        self._proc = self.connection.start(self.command, timeout=START_TIMEOUT_S)

    def ports(self) -> dict[str, int | str]:
        lines: queue.Queue[str] = queue.Queue()

        def first() -> None:
            for line in self._proc.stdout_lines():
                lines.put(line)
                return
            lines.put("")

        threading.Thread(target=first, daemon=True, name="ringcheck-listen").start()
        try:
            line = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            line = ""
        return _json(line, "the listener")

    def stop(self) -> None:
        with contextlib.suppress(OSError, SSHError):
            self._proc.close_stdin()
        if self._proc.wait(2.0) is None:
            with contextlib.suppress(SSHError):
                self._proc.kill()
        self._proc.close()


@dataclass
class _LocalListener:
    argv: list[str]

    def __post_init__(self) -> None:
        self._proc = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def ports(self) -> dict[str, int | str]:
        assert self._proc.stdout is not None
        return _json(self._proc.stdout.readline(), "the listener")

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        try:
            self._proc.wait(2.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def _json(line: str, what: str) -> dict[str, int | str]:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise CheckFailed(f"{what} printed {line.strip()[:80]!r}")
    return data


class Nodes:
    """The SSH sessions of a check, one per node, opened on first use and closed at the
    end (``with Nodes(targets) as nodes``)."""

    def __init__(self, targets: Mapping[str, Target]) -> None:
        self.targets = targets
        self._open: dict[str, Connection] = {}

    def __enter__(self) -> Nodes:
        return self

    def __exit__(self, *exc: object) -> None:
        for connection in self._open.values():
            with contextlib.suppress(Exception):
                connection.close()

    def _connection(self, name: str) -> Connection:
        if name not in self._open:
            self._open[name] = self.targets[name].connection().connect()
        return self._open[name]

    def listen(self, name: str, addresses: Sequence[str]) -> _Listener:
        target = self.targets[name]
        argv = [target.interpreter, "-c", LISTEN, *addresses]
        if target.local:
            return _LocalListener(argv)
        return _RemoteListener(self._connection(name), shlex.join(argv))

    def dial(self, name: str, endpoints: Sequence[str]) -> dict[str, int | str]:
        target = self.targets[name]
        argv = [target.interpreter, "-c", DIAL, *endpoints]
        budget = DIAL_TIMEOUT_S * len(endpoints) + START_TIMEOUT_S
        if target.local:
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=budget)
            except subprocess.TimeoutExpired as error:
                raise CheckFailed(f"the connect test on {name} took over {budget:g} s") from error
            return _json(done.stdout, f"the connect test on {name}")
        result = self._connection(name).run(shlex.join(argv), timeout=budget)
        return _json(result.stdout, f"the connect test on {name}")


def check_link(link: RingLink, nodes: Nodes) -> RingLink:
    """``link`` with every path before the first that answers dropped, each with why."""
    if len(link.paths) < 2:
        return link
    addresses = [p.address for p in link.paths]
    listener = nodes.listen(link.listener, addresses)
    try:
        ports = listener.ports()
        endpoints = {ip: f"{ip}:{port}" for ip, port in ports.items() if isinstance(port, int)}
        dialed = nodes.dial(link.dialer, list(endpoints.values())) if endpoints else {}
    finally:
        listener.stop()
    while len(link.paths) > 1:
        ip = link.paths[0].address
        port = ports.get(ip)
        if not isinstance(port, int):
            why = f"{link.listener} cannot listen there: {port or 'no answer'}"
        elif dialed.get(endpoints[ip]) != "ok":
            why = str(dialed.get(endpoints[ip], "no answer"))
        else:
            break
        link = link.without_first(why)
    return link


def check_links(
    links: Sequence[RingLink],
    targets: Mapping[str, Target],
    on_error: Callable[[RingLink, str], None] | None = None,
) -> list[RingLink]:
    """Every link checked in turn over one session per node. A link whose check cannot
    run keeps its paths unchecked (``on_error`` hears why); never raises for SSH."""
    checked = []
    with Nodes(targets) as nodes:
        for link in links:
            try:
                checked.append(check_link(link, nodes))
            except (SSHError, CheckFailed, OSError) as error:
                if on_error is not None:
                    on_error(link, str(error))
                checked.append(link)
    return checked
