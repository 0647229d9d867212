"""One node as ``macmesh doctor`` sees it (``core.run.checks.doctor``), and the nodes a
scanner or the demo cluster holds, seen that way (the command and the window's "Check my
Macs" gather them alike)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from core.cluster.probe.facts import NodeFacts
from core.cluster.registry import Node, ProbeState
from core.remote.ssh import SSHError
from core.remote.targets import Target

# What a simulated Mac takes from this machine, where its rank really runs.
HERE_FIELDS = (
    "python_version",
    "python_executable",
    "mlx_version",
    "mlx_lm_version",
    "cpu_count",
    "blas_path",
    "blas_source",
    "disk_free_bytes",
)


CAPTURED_PYTHON = "the Python it was probed with"  # a capture says not which, when none ran


@dataclass(frozen=True)
class Seen:
    """One node as the scanner left it: the registry's node, the SSH failure of its last
    probe (its kind says the fix) and, once ready, where a job would reach it."""

    node: Node
    error: SSHError | None = None
    target: Target | None = None

    @property
    def facts(self) -> NodeFacts | None:
        ready = self.node.probe_state is ProbeState.READY
        return self.node.facts if ready and isinstance(self.node.facts, NodeFacts) else None


class Probing(Protocol):
    """What ``seen_by`` needs of a ``core.cluster.scanner.Scanner``."""

    def target(self, name: str) -> Target: ...

    def probe_error(self, name: str) -> SSHError | None: ...


def seen_by(scanner: Probing, nodes: Sequence[Node]) -> list[Seen]:
    """``nodes`` as ``scanner`` left them: each one's last SSH failure and, when ready,
    its target (a node that stopped being ready meanwhile has none)."""
    seen = []
    for node in nodes:
        target = None
        if node.probe_state is ProbeState.READY:
            try:
                target = scanner.target(node.name)
            except ValueError:  # NodeNotReady: it changed since the registry was read
                target = None
        seen.append(Seen(node, scanner.probe_error(node.name), target))
    return seen


def simulated_seen(nodes: Sequence[Node], here: NodeFacts) -> list[Seen]:
    """The demo's simulated Macs as the doctor sees them, each reached locally. A Mac
    read back from a capture (its facts have a probe's output) keeps what the studio's
    Mac said, but for the BLAS its rank uses on this machine's CPU (a Mac reports none);
    the demo's own say nothing of Python, mlx, BLAS or disk, so theirs are this
    machine's (``here``: its probe), where their ranks run."""
    seen = []
    for node in nodes:
        facts = node.facts if isinstance(node.facts, NodeFacts) else None
        python = here.python_executable
        if facts is not None and not facts.probe_output:
            facts = replace(facts, **{name: getattr(here, name) for name in HERE_FIELDS})
            node = replace(node, facts=facts)
        elif facts is not None:  # captured: its checks name the Python it ran, not ours
            python = facts.python_executable or CAPTURED_PYTHON
            if facts.is_macos and facts.runs_on_cpu:  # a Mac's rank on this CPU: our BLAS
                facts = replace(facts, blas_path=here.blas_path, blas_source=here.blas_source)
                node = replace(node, facts=facts)
        target = Target(name=node.name, host="127.0.0.1", python=python, local=True)
        seen.append(Seen(node, None, target if facts is not None else None))
    return seen
