"""Two simulated Macs on two networks, in network namespaces the test makes (issue 18).

Three namespaces, named after this process so parallel runs never meet:

- ``ctl``: the controller (``macmesh run`` runs here, ``ip netns exec``), on the LAN
  through a bridge ``lanbr`` (10.77.0.254/24);
- ``m1``, ``m2``: the Macs. Each has ``en0`` on the LAN (10.77.0.1, 10.77.0.2/24),
  throttled by ``tc`` on its way out (``LAN_RATE``, and ``LAN_DELAY`` each way where
  the kernel has netem; this machine's has only tbf: rate, no delay), and ``en2``, one
  end of a veth "Thunderbolt cable" to the other Mac, in a Linux bridge ``bridge0``
  holding the Mac's self-assigned address (169.254.1.1, 169.254.2.2/16): the
  Thunderbolt Bridge. Not throttled.

Each Mac runs its own sshd (port ``SSH_PORT`` on its LAN address), whose sessions see
fake macOS commands (``tests/fixtures/macos/generate.py``'s Mac with exactly these
interfaces and addresses: a Mac Studio pair, RDMA off, one cable, the bridge on), so
MacMesh probes them as Macs and its ranks run there for real. Nothing touches the
machine's own network: every interface lives in a namespace made here, and on exit
every process in them is killed and the namespaces deleted, whatever happened.

``require_netns()`` skips a test where namespaces cannot be made (not root, no
iproute2, a container without CAP_NET_ADMIN) or sshd is missing, naming each, or fails
it where a missing one's ``MACMESH_REQUIRE_NETNS=1`` / ``MACMESH_REQUIRE_SSHD=1`` is set
(CI never skips them): tests/helpers/prereqs.py.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.macos import generate
from tests.fixtures.macos.make_bin import make_bin
from tests.helpers import prereqs
from tests.helpers.sshd import SSHD, _keygen, sshd_config

REQUIRE_ENV = "MACMESH_REQUIRE_NETNS"
INSTALL = prereqs.IP_INSTALL
LAN_RATE, LAN_DELAY = "200mbit", "2ms"
SSH_PORT = 2222
LAN = "10.77.0.{}"
THUNDERBOLT = "169.254.{0}.{0}"
IP = prereqs.ip_command()  # MACMESH_TEST_IP moves it (the skip tests point it nowhere)


def netns_missing() -> str | None:
    """Why namespaces cannot be made here, or None."""
    lacking = prereqs.missing("netns")
    return lacking["netns"].why if lacking else None


def require_netns() -> None:
    """Skip the calling test where sshd or namespaces are missing, naming each; fail it
    where a missing one's ``MACMESH_REQUIRE_*`` is 1 (tests/helpers/prereqs.py)."""
    prereqs.require("netns", "sshd", "netns")


@dataclass(frozen=True)
class Mac:
    name: str  # the namespace
    lan: str
    thunderbolt: str


@dataclass
class TwoNetworks:
    ctl: str
    macs: tuple[Mac, Mac]
    root: Path
    ssh_dir: Path  # an ~/.ssh for the controller: the key and known_hosts

    def exec_argv(self, namespace: str, argv: Sequence[str]) -> list[str]:
        return [IP, "netns", "exec", namespace, *argv]

    def run(self, namespace: str, argv: Sequence[str], **kw: object) -> subprocess.CompletedProcess:
        return subprocess.run(self.exec_argv(namespace, argv), **kw)  # type: ignore[call-overload]

    def hosts(self) -> str:
        return ",".join(f"{mac.lan}:{SSH_PORT}" for mac in self.macs)

    def set_thunderbolt(self, up: bool) -> None:
        """Plug or pull the cable (``ip link set en2 up|down`` on the second Mac)."""
        _ip(self.macs[1].name, "link", "set", "en2", "up" if up else "down")

    def leftovers(self) -> list[int]:
        """Processes still running in the Macs' namespaces, other than their sshd."""
        sshd = set(self._sshd_pids)
        return [pid for mac in self.macs for pid in _pids(mac.name) if pid not in sshd]

    _sshd_pids: tuple[int, ...] = ()


def _ip(namespace: str | None, *args: str) -> None:
    argv = [IP, *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")


def _pids(namespace: str) -> list[int]:
    done = subprocess.run([IP, "netns", "pids", namespace], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()]


def _mac_files(index: int, lan: str, out: Path) -> Path:
    """The fake macOS commands of simulated Mac ``index`` (1 or 2): generate.py's Mac
    Studio whose interfaces and addresses are those of its namespace."""
    macs = [
        generate.studio(
            f"m{i}", f"{i:02d}" * 4, memory_gb=64, rdma="disabled", devices=False,
            bridge="active", lan={"en0": f"{LAN.format(i)}/24"},
        )
        for i in (1, 2)
    ]  # fmt: skip
    for mac in macs:
        mac.ports = {1: "en2"}
    cables = [generate.Cable((macs[0], 1), (macs[1], 1))]
    folder = out / f"m{index}-files"
    folder.mkdir(parents=True)
    for name, text in generate.files(macs[index - 1], cables).items():
        (folder / name).write_text(text)
    (folder / "admin-password").write_text(ADMIN_PASSWORD + "\n")
    bins = make_bin(folder, out / f"m{index}-bin")
    (bins / "ifconfig").rename(bins / "ifconfig-fixture")
    for name, text in (("ifconfig", _IFCONFIG), ("sudo", _SUDO)):
        (bins / name).write_text(
            text.replace("@FOLDER@", shlex.quote(str(folder)))
            .replace("@BIN@", shlex.quote(str(bins)))
            .replace("@PY@", shlex.quote(sys.executable))
        )
        (bins / name).chmod(0o755)
    return bins


ADMIN_PASSWORD = "correct horse"  # the simulated Macs' admin password (fake sudo)

# macOS's ifconfig adding or removing an alias address, done for real in the namespace
# (`ip addr`); anything else is the fixture's (the probe's ifconfig -a, bridge0).
_IFCONFIG = """#!/bin/sh
if [ "$2" = inet ] && [ "$4" = netmask ] && [ "$6" = alias ]; then
  prefix=$(@PY@ -c 'import ipaddress as i, sys
print(i.ip_network("0.0.0.0/" + sys.argv[1]).prefixlen)' "$5")
  exec ip addr add "$3/$prefix" dev "$1"
fi
if [ "$2" = inet ] && [ "$4" = -alias ]; then
  prefix=$(ip -o -4 addr show dev "$1" | sed -n "s|.* inet $3/\\([0-9]*\\) .*|\\1|p")
  exec ip addr del "$3/${prefix:-32}" dev "$1"
fi
exec @BIN@/ifconfig-fixture "$@"
"""

# sudo -S: the password is the first line of stdin, checked against the Mac's; each
# call's arguments are logged (so a test can tell the password never was one).
_SUDO = """#!/bin/sh
printf '%s\\n' "$*" >> @FOLDER@/sudo.log
IFS= read -r pw || pw=
if [ "$pw" != "$(cat @FOLDER@/admin-password)" ]; then
  echo "Sorry, try again." >&2
  echo "sudo: 1 incorrect password attempt" >&2
  exit 1
fi
while [ $# -gt 0 ]; do
  case $1 in -S) shift ;; -p) shift 2 ;; *) break ;; esac
done
exec "$@"
"""


def _tc(namespace: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tc", "-n", namespace, *args], capture_output=True, text=True)


def lan_shaping() -> dict[str, str | None]:
    """How the LAN is throttled here: netem (rate and delay) where the kernel has it,
    else tbf (rate only: this project's machine has no sch_netem)."""
    return dict(_SHAPING)


_SHAPING: dict[str, str | None] = {"rate": LAN_RATE, "delay": LAN_DELAY, "qdisc": "netem"}


def _throttle(namespace: str, device: str) -> None:
    """``LAN_RATE`` out of ``device``, and ``LAN_DELAY`` where netem exists."""
    root = ("qdisc", "add", "dev", device, "root")
    done = _tc(namespace, *root, "netem", "delay", LAN_DELAY, "rate", LAN_RATE)
    if done.returncode == 0:
        _SHAPING.update(qdisc="netem", delay=LAN_DELAY)
        return
    # tbf: a bucket of 128 KB (more than one timer tick's worth at 200 Mbit/s).
    tbf = _tc(namespace, *root, "tbf", "rate", LAN_RATE, "burst", "128kb", "latency", "20ms")
    if tbf.returncode != 0:
        raise RuntimeError(f"tc could not throttle {device}: {done.stderr} / {tbf.stderr}")
    _SHAPING.update(qdisc="tbf", delay=None)


def _network(tag: str) -> tuple[str, tuple[Mac, Mac]]:
    ctl = f"{tag}-ctl"
    macs = (
        Mac(f"{tag}-m1", LAN.format(1), THUNDERBOLT.format(1)),
        Mac(f"{tag}-m2", LAN.format(2), THUNDERBOLT.format(2)),
    )
    for namespace in (ctl, *(m.name for m in macs)):
        _ip(None, "netns", "add", namespace)
        _ip(namespace, "link", "set", "lo", "up")
    _ip(ctl, "link", "add", "lanbr", "type", "bridge")
    _ip(ctl, "addr", "add", f"{LAN.format(254)}/24", "dev", "lanbr")
    _ip(ctl, "link", "set", "lanbr", "up")
    for i, mac in enumerate(macs, start=1):
        _ip(ctl, "link", "add", f"lan{i}", "type", "veth", "peer", "name", "en0", "netns", mac.name)
        _ip(ctl, "link", "set", f"lan{i}", "master", "lanbr", "up")
        _ip(mac.name, "addr", "add", f"{mac.lan}/24", "dev", "en0")
        _ip(mac.name, "link", "set", "en0", "up")
        _throttle(mac.name, "en0")
    a, b = macs
    _ip(a.name, "link", "add", "en2", "type", "veth", "peer", "name", "en2", "netns", b.name)
    for mac in macs:
        _ip(mac.name, "link", "add", "bridge0", "type", "bridge")
        _ip(mac.name, "link", "set", "en2", "master", "bridge0")
        _ip(mac.name, "addr", "add", f"{mac.thunderbolt}/16", "dev", "bridge0")
        _ip(mac.name, "link", "set", "en2", "up")
        _ip(mac.name, "link", "set", "bridge0", "up")
    return ctl, macs


def _teardown(namespaces: Sequence[str], started: Sequence[subprocess.Popen]) -> None:
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
    for namespace in namespaces:
        for _ in range(50):  # ranks and sessions the test left: killed, then gone
            pids = _pids(namespace)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        subprocess.run([IP, "netns", "del", namespace], capture_output=True)


def _wait_listening(log: Path, address: str, proc: subprocess.Popen, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if f"Server listening on {address} port {SSH_PORT}" in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"sshd on {address} did not start:\n{log.read_text(errors='replace')}")


@contextlib.contextmanager
def two_networks(root: Path) -> Iterator[TwoNetworks]:
    """The namespaces, links and sshds described above; all removed on exit. Skipped
    (or failed, as CI asks) where sshd or namespaces are missing."""
    require_netns()  # both looked at before any namespace: each Mac runs an sshd
    tag = f"mm{os.getpid()}"
    namespaces = [f"{tag}-ctl", f"{tag}-m1", f"{tag}-m2"]
    started: list[subprocess.Popen] = []
    try:
        ctl, macs = _network(tag)
        ssh_dir = root / "ssh"
        ssh_dir.mkdir(parents=True, mode=0o700)
        _keygen(ssh_dir / "id_ed25519")
        known = []
        for i, mac in enumerate(macs, start=1):
            folder = root / mac.name
            folder.mkdir()
            _keygen(folder / "ssh_host_ed25519_key")
            shutil.copy(ssh_dir / "id_ed25519.pub", folder / "authorized_keys")
            bins = _mac_files(i, mac.lan, folder)
            config = folder / "sshd_config"
            config.write_text(
                sshd_config(folder, SSH_PORT, [mac.lan], {mac.lan: bins}, {"HOME": str(folder)})
            )
            log = folder / "sshd.log"
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    [IP, "netns", "exec", mac.name, str(SSHD), "-D", "-e", "-f", str(config)],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                )  # fmt: skip
            started.append(proc)
            _wait_listening(log, mac.lan, proc)
            key = (folder / "ssh_host_ed25519_key.pub").read_text().split()
            known.append(f"[{mac.lan}]:{SSH_PORT} {key[0]} {key[1]}")
        (ssh_dir / "known_hosts").write_text("\n".join(known) + "\n")
        network = TwoNetworks(ctl, macs, root, ssh_dir)
        network._sshd_pids = tuple(p for mac in macs for p in _pids(mac.name))
        yield network
    finally:
        _teardown(namespaces, started)


def namespaces_left(tag: str | None = None) -> list[str]:
    """This process's namespaces still present (none, after ``two_networks``)."""
    done = subprocess.run([IP, "netns", "list"], capture_output=True, text=True)
    prefix = tag or f"mm{os.getpid()}-"
    return [line.split()[0] for line in done.stdout.splitlines() if line.startswith(prefix)]
