"""The live node service: Bonjour, hand-added hosts and probes, feeding one ``Registry``.

The GUI's cluster pane and ``macmesh nodes`` both hold a ``Scanner``: it browses with a
``Discovery``, follows a ``HostList``, and probes every node as it appears (again when
its address or port changes, or on ``reprobe``), in a bounded thread pool. Where each
probe stands is in the registry (``Node.probe_state`` / ``probe_message``):

- PROBING while it runs; READY with the facts attached;
- UNREACHABLE: Remote Login off (also said without connecting when a Mac announces no
  ``_ssh._tcp``), no route, timeout, connection lost; the message says what to do;
- NEEDS_HOST_KEY: first contact; ``host_key_needed`` carries the ``UnknownHostKey`` for
  the person to judge, then ``accept_host_key`` / ``reject_host_key``;
- NEEDS_ACCESS: our key is refused; ``set_up_access`` installs it with a password;
- HOST_KEY_CHANGED: refused loudly, never connected.

This machine (our own ``_macmesh._tcp`` record, ``is_self``) is probed with the local
shell, never over SSH. Linux hosts are probed like Macs; their facts say so
(``NodeFacts.is_macos`` False) and they join ring jobs only. Demo nodes are not probed.

Which Python a probe asks about on a node: ``python`` when given (one path for every
node, as ``mlx.launch`` expects the same path everywhere), else the same path as this
machine's interpreter when the node has it, else ``python3`` on the node's PATH.

Threads: probes run on the pool's threads, one at a time per node (a node asked again
while it is probed is probed once more afterwards, and only the newest result counts).
``host_key_needed`` and ``probed`` fire on those threads; the registry's signals fire on
whichever thread changed it. A node that leaves while it is probed stays gone: results
for it are dropped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from psygnal import Signal

from core.bundle import worker_python
from core.cluster.discovery import Discovery, Interfaces, default_interfaces
from core.cluster.hosts import HostList, ManualHost
from core.cluster.probe.facts import NodeFacts, local_runner, run_local_probe
from core.cluster.probe.remote import PROBE_TIMEOUT_S, probe_over_ssh
from core.cluster.reach import all_loopback, endpoint, outside_loopback, probeable, reach_key
from core.cluster.registry import Node, Registry, manual_name, names_node
from core.cluster.states import ProbeState, Source
from core.cluster.topology import Topology, build_topology
from core.remote.ssh import (
    DEFAULT_TIMEOUT,
    AuthFailed,
    Connection,
    HostKeyChanged,
    SSHError,
    UnknownHostKey,
    install_public_key,
)
from core.remote.targets import Target

log = logging.getLogger(__name__)

REMOTE_LOGIN_OFF = (
    "Remote Login is off on {name}: it announces itself on the network but not SSH. Turn "
    "it on there: System Settings > General > Sharing > Remote Login, then Retry."
)
OFF_LOOPBACK = (
    "{name} was announced at {address}, outside this machine, but MacMesh browses only "
    "loopback here: it is not probed. Choose the network with --interfaces to reach it."
)
NOT_TRUSTED = (
    "You chose not to trust the host key of {name}, so MacMesh does not connect to it. "
    "Retry to see the key again."
)


class NodeNotReady(ValueError):
    """``target`` was asked for a node that is unknown or not probed successfully."""


class Scanner:
    """Discovery + hand-added hosts + probing, kept in ``registry``. ``start`` / ``close``.

    ``interfaces``: where Bonjour browses (None: ``default_interfaces()``, 127.0.0.1 off a
    Mac). ``known_hosts`` / ``ssh_dir``: the SSH files (default ``~/.ssh``, or
    ``$MACMESH_SSH_DIR``). ``publish``: announce ``_macmesh._tcp`` (and so list and probe
    this machine). ``python``: see the module doc.
    """

    host_key_needed = Signal(str, object)  # node name, core.remote.ssh.UnknownHostKey
    probed = Signal(str)  # node name, after each probe attempt ends, whatever the result

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        interfaces: Interfaces | None = None,
        host_list: HostList | None = None,
        known_hosts: Path | None = None,
        ssh_dir: Path | None = None,
        max_workers: int = 8,
        publish: bool = True,
        python: str | None = None,
        use_agent: bool = True,
        connect_timeout: float = DEFAULT_TIMEOUT,
        probe_timeout: float = PROBE_TIMEOUT_S,
        instance_name: str | None = None,
        discovery: Discovery | None = None,
    ) -> None:
        self.registry = registry if registry is not None else Registry()
        self.hosts = host_list if host_list is not None else HostList()
        self.interfaces = interfaces if interfaces is not None else default_interfaces()
        self.known_hosts, self.ssh_dir = known_hosts, ssh_dir
        self.python, self.use_agent = python, use_agent
        self.connect_timeout, self.probe_timeout = connect_timeout, probe_timeout
        # Browsing loopback only (a dev or CI box, tests): never connect out to an address
        # some other program announced there. Hosts added by hand are reached as asked.
        self._loopback_only = all_loopback(self.interfaces)
        self.discovery = discovery or Discovery(
            self.interfaces, advertise=publish, instance_name=instance_name
        )
        self._pool = ThreadPoolExecutor(max(1, max_workers), thread_name_prefix="macmesh-probe")
        self._lock = threading.Condition()
        self._started = self._closed = False
        self._reach: dict[str, Hashable] = {}  # what each node's last probe was asked to reach
        self._gen: dict[str, int] = {}  # bumped per request: only the newest result counts
        self._running: set[str] = set()
        self._again: set[str] = set()
        self._pending_keys: dict[str, UnknownHostKey] = {}
        self._errors: dict[str, SSHError] = {}  # each node's last probe's SSH failure
        self._connections: set[Connection] = set()
        self._procs: set[subprocess.Popen[bytes]] = set()

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        """Follow the hand-added hosts and Bonjour, probing each node as it appears.
        Blocks ~2 s while zeroconf claims our name when publishing: call it off the GUI
        thread. Raises ValueError for an interface that does not exist."""
        with self._lock:
            if self._started or self._closed:
                return
            self._started = True
        self.registry.added.connect(self._on_node)
        self.registry.updated.connect(self._on_node)
        self.registry.removed.connect(self._on_removed)
        self.registry.follow_hosts(self.hosts)
        for node in self.registry.nodes():
            self._on_node(node)
        self.registry.follow(self.discovery)
        try:
            self.discovery.start()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop discovery, drop queued probes, end running ones (their SSH sessions are
        closed, a local probe's process group is stopped) and wait for them. Idempotent;
        never call it from a signal slot. The registry forgets the nodes it no longer
        watches (Bonjour's and the hand-added ones)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
        for signal_, slot in (
            (self.registry.added, self._on_node),
            (self.registry.updated, self._on_node),
            (self.registry.removed, self._on_removed),
        ):
            with contextlib.suppress(Exception):
                signal_.disconnect(slot)
        self.discovery.close()
        with contextlib.suppress(Exception):
            self.hosts.changed.disconnect(self.registry.set_manual_hosts)
        self.registry.set_manual_hosts([])
        self._stop_running()
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._running.clear()
            self._lock.notify_all()

    def __enter__(self) -> Scanner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no probe runs or waits; False if some still do after ``timeout``."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._running, timeout)

    # -- what the person does -----------------------------------------------------------

    def reprobe(self, name: str) -> None:
        """Probe ``name`` again (after the current probe, if one runs)."""
        node = self.registry.get(name)
        if node is not None and probeable(node):
            self._schedule(name)

    def accept_host_key(self, name: str) -> None:
        """The person trusts the key ``host_key_needed`` showed: record it, probe again."""
        with self._lock:
            error = self._pending_keys.pop(name, None)
        if error is None:
            raise ValueError(f"No host key of {name} is waiting to be trusted: Retry first.")
        error.accept()
        self.reprobe(name)

    def reject_host_key(self, name: str) -> None:
        """The person does not trust it: forget it; the node says why it is not used."""
        with self._lock:
            error = self._pending_keys.pop(name, None)
        if error is not None:
            self.registry.set_probe_result(
                name, ProbeState.UNREACHABLE, NOT_TRUSTED.format(name=name)
            )

    def set_up_access(self, name: str, password: str) -> None:
        """Blocking: generate our key if there is none, install it on ``name`` with its
        ``password`` (used for this login only, never kept), then probe again. Raises
        ``core.remote.ssh.SSHError`` subclasses whose message says what to do."""
        node = self.registry.get(name)
        if node is None:
            raise SSHError(name, f"{name} is no longer on the network.")
        if node.is_self or not node.can_ssh:
            raise SSHError(name, f"{name} needs no access set up: {node.probe_message}")
        install_public_key(self._connection(node, use_agent=False), password)
        self.reprobe(name)

    def add_host(self, text: str) -> ManualHost:
        """Remember a host typed by a person ("studio-b.local", "ml@10.0.0.5:2222");
        ValueError with a readable message when it is not one. It is probed at once."""
        return self.hosts.add(text)

    def remove_host(self, name: str) -> bool:
        """Forget the hand-added host(s) behind node ``name``; False if there were none."""
        node = self.registry.get(name)
        removed = False
        for host in self.hosts.hosts():
            if manual_name(host) == name or (node is not None and names_node(host, node)):
                removed = self.hosts.remove(host) or removed
        return removed

    # -- what a job needs --------------------------------------------------------------

    def target(self, name: str) -> Target:
        """Where a rank on ``name`` runs and how to reach it; NodeNotReady otherwise."""
        node = self.registry.get(name)
        if node is None:
            raise NodeNotReady(f"No node is called {name!r}.")
        if node.probe_state is not ProbeState.READY or node.facts is None:
            why = node.probe_message or node.probe_state.value
            raise NodeNotReady(f"{name} is not ready: {why}")
        host, address = endpoint(node)
        facts: NodeFacts = node.facts
        return Target(
            name=name,
            host=host,
            port=node.ssh_port or 22,
            user=node.user,
            python=worker_python(self.python, facts),
            address=address,
            local=node.is_self,
            known_hosts=self.known_hosts,
            ssh_dir=self.ssh_dir,
            timeout=self.connect_timeout,
        )

    def probe_error(self, name: str) -> SSHError | None:
        """The SSH failure of ``name``'s last probe (None after a success or before one):
        its kind says the fix (``macmesh doctor``), where the registry keeps only words."""
        with self._lock:
            return self._errors.get(name)

    def ready_facts(self, macs_only: bool = False) -> list[NodeFacts]:
        """The facts of every READY node, by name (``macs_only``: without Linux hosts)."""
        nodes = sorted(self.registry.nodes(), key=lambda n: n.name.lower())
        facts = [
            n.facts
            for n in nodes
            if n.probe_state is ProbeState.READY and isinstance(n.facts, NodeFacts)
        ]
        return [f for f in facts if f.is_macos is not False] if macs_only else facts

    def topology(self) -> Topology:
        """The Thunderbolt map of the READY Macs (Linux hosts have no Thunderbolt links:
        they join ring jobs over the network and are left out)."""
        return build_topology(self.ready_facts(macs_only=True))

    # -- probing ---------------------------------------------------------------------------

    def _on_node(self, node: Node) -> None:
        """Registry slot (its lock held): queue a probe when the node is new or moved."""
        if not probeable(node):
            return
        reach = reach_key(node)
        with self._lock:
            if self._closed or self._reach.get(node.name) == reach:
                return
            self._reach[node.name] = reach
        self._schedule(node.name)

    def _on_removed(self, name: str) -> None:
        with self._lock:
            self._reach.pop(name, None)
            self._gen[name] = self._gen.get(name, 0) + 1  # a running probe's result is void
            self._pending_keys.pop(name, None)
            self._again.discard(name)

    def _schedule(self, name: str) -> None:
        with self._lock:
            if self._closed:
                return
            self._gen[name] = gen = self._gen.get(name, 0) + 1
            if name in self._running:
                self._again.add(name)
                return
            self._running.add(name)
        try:
            self._pool.submit(self._job, name, gen)
        except RuntimeError:  # closed meanwhile
            self._finish(name)

    def _job(self, name: str, gen: int) -> None:
        attempted = False
        try:
            node = self.registry.get(name)
            if node is not None and self._current(name, gen):
                attempted = True
                self._probe(node, gen)
        finally:
            again = self._finish(name)
            if attempted:
                self.probed.emit(name)
            if again:
                self._schedule(name)

    def _finish(self, name: str) -> bool:
        """Mark ``name``'s probe ended; True if it was asked for again meanwhile."""
        with self._lock:
            self._running.discard(name)
            again = name in self._again and not self._closed
            self._again.discard(name)
            self._lock.notify_all()
            return again

    def _current(self, name: str, gen: int) -> bool:
        with self._lock:
            return not self._closed and self._gen.get(name) == gen

    def _set(
        self,
        name: str,
        gen: int,
        state: ProbeState,
        message: str = "",
        facts: NodeFacts | None = None,
        error: SSHError | None = None,
    ) -> bool:
        if not self._current(name, gen):
            return False
        if state is not ProbeState.PROBING:
            with self._lock:
                if error is None:
                    self._errors.pop(name, None)
                else:
                    self._errors[name] = error
        self.registry.set_probe_result(name, state, message, facts)
        return True

    def _probe(self, node: Node, gen: int) -> None:
        name = node.name
        if not node.is_self and not node.can_ssh:
            self._set(name, gen, ProbeState.UNREACHABLE, REMOTE_LOGIN_OFF.format(name=name))
            return
        host, address = endpoint(node)
        if self._off_limits(node, address or host):
            message = OFF_LOOPBACK.format(name=name, address=address or host)
            self._set(name, gen, ProbeState.UNREACHABLE, message)
            return
        where = "this machine" if node.is_self else f"{host} over SSH"
        self._set(name, gen, ProbeState.PROBING, f"Asking {where} for its facts…")
        try:
            facts = self._probe_self(name) if node.is_self else self._probe_ssh(node)
        except UnknownHostKey as error:
            with self._lock:
                self._pending_keys[name] = error
            if self._set(name, gen, ProbeState.NEEDS_HOST_KEY, str(error), error=error):
                self.host_key_needed.emit(name, error)
        except HostKeyChanged as error:
            self._set(name, gen, ProbeState.HOST_KEY_CHANGED, str(error), error=error)
        except AuthFailed as error:
            self._set(name, gen, ProbeState.NEEDS_ACCESS, str(error), error=error)
        except SSHError as error:
            self._set(name, gen, ProbeState.UNREACHABLE, str(error), error=error)
        except Exception as error:  # a bug must not leave the node "probing" forever
            log.exception("probing %s failed", name)
            self._set(name, gen, ProbeState.UNREACHABLE, f"The probe of {name} failed: {error}")
        else:
            self._set(name, gen, ProbeState.READY, "", facts)

    def _off_limits(self, node: Node, where: str) -> bool:
        """A Bonjour node announced outside this machine while we browse loopback only."""
        if not self._loopback_only or node.is_self or Source.MANUAL in node.sources:
            return False
        return outside_loopback(where)

    def _probe_self(self, name: str) -> NodeFacts:
        def track(proc: subprocess.Popen[bytes]) -> None:
            with self._lock:
                self._procs.add(proc)

        run = local_runner(timeout=self.probe_timeout, on_start=track)
        try:
            return run_local_probe(name, python=self.python or sys.executable, run=run)
        finally:
            with self._lock:
                self._procs = {p for p in self._procs if p.poll() is None}

    def _probe_ssh(self, node: Node) -> NodeFacts:
        connection = self._connection(node)
        with self._lock:
            if self._closed:
                raise SSHError(node.name, "MacMesh is closing.")
            self._connections.add(connection)
        try:
            return probe_over_ssh(
                connection, node.name, python=self._pythons(), timeout=self.probe_timeout
            )
        finally:
            connection.close()
            with self._lock:
                self._connections.discard(connection)

    def _pythons(self) -> Sequence[str]:
        return [self.python] if self.python else [sys.executable, "python3"]

    def _connection(self, node: Node, use_agent: bool | None = None) -> Connection:
        host, address = endpoint(node)
        return Connection(
            host,
            node.ssh_port or 22,
            node.user,
            known_hosts=self.known_hosts,
            ssh_dir=self.ssh_dir,
            use_agent=self.use_agent if use_agent is None else use_agent,
            timeout=self.connect_timeout,
            address=address,
        )

    def _stop_running(self) -> None:
        with self._lock:
            connections, procs = list(self._connections), list(self._procs)
        for connection in connections:
            connection.close()
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)


__all__ = ["NodeNotReady", "Scanner"]
