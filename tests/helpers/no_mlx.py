"""Two Macs behind a real sshd, one of which has no mlx: where a first compare or
fine-tune on real Macs stops at its checks. mesh4's studio-a and studio-b answer on
127.0.0.2 and 127.0.0.3 (``tests.helpers.sshd``); on studio-b the nodes' Python
(``PYTHON``, asked for with ``--python``) runs with ``-S`` (no site-packages), so it sees
no mlx, as on a Mac where mlx was never installed. The check that fails is that Python's,
with its fix: install mlx and mlx-lm there.

A test module takes the fixtures by importing them (the module's sshd then serves
these two hosts with these bins): ``from tests.helpers.no_mlx import sshd_addresses,
sshd_host_bins``; then ``no_mlx_macs(sshd, folder)`` gives the Macs, their SSH setup and
the words the failed check says.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.cli.session import make_targets
from core.remote.targets import Target
from tests.fixtures.macos.make_bin import make_host_bins
from tests.helpers.sshd import SSHServer

HOSTS = {"127.0.0.2": "studio-a", "127.0.0.3": "studio-b"}
NO_MLX = "127.0.0.3"  # also the Mac compare's one-Mac run picks (equal memory: the last name)
PYTHON = "mm-py"  # the nodes' Python, on the PATH of each host's bin folder


@pytest.fixture(scope="module")
def sshd_addresses() -> tuple[str, ...]:
    return tuple(HOSTS)


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """mesh4's studio-a and studio-b; ``PYTHON`` on each, without mlx on ``NO_MLX``."""
    bins = make_host_bins("mesh4", HOSTS, tmp_path_factory.mktemp("mesh-bins"))
    for address, folder in bins.items():
        flags = " -S" if address == NO_MLX else ""
        script = folder / PYTHON
        script.write_text(f'#!/bin/sh\nexec {sys.executable}{flags} "$@"\n')
        script.chmod(0o755)
    return bins


@dataclass(frozen=True)
class NoMlxMacs:
    """The two Macs as a person names them (``hosts``), the SSH folder that trusts the
    server, the nodes' cache folder, and what the failed check says (``node``, ``fix``)."""

    server: SSHServer
    ssh_dir: Path
    nodes_root: Path

    @property
    def hosts(self) -> list[str]:
        return [f"{address}:{self.server.port}" for address in HOSTS]

    @property
    def node(self) -> str:
        """The Mac without mlx, as its checks name it."""
        return f"{NO_MLX}:{self.server.port}"

    @property
    def problem(self) -> str:
        return "has no mlx or mlx-lm"

    @property
    def fix(self) -> str:
        """The failed check's fix, as the CLI and the checks view say it."""
        return f"On {self.node} run `{PYTHON} -m pip install mlx mlx-lm`"

    def cli_arguments(self) -> list[str]:
        """``--hosts``, ``--python`` and ``--cache-root`` for a command on these Macs."""
        hosts = ",".join(self.hosts)
        return ["--hosts", hosts, "--python", PYTHON, "--cache-root", str(self.nodes_root)]

    def targets(self) -> list[Target]:
        """The Macs as the window reaches them (the SSH folder from ``env``)."""
        return make_targets(self.hosts, PYTHON, str(self.nodes_root / "{host}"))

    def env(self) -> dict[str, str]:
        """What a process reaching these Macs needs set (the SSH folder, no agent)."""
        return {"MACMESH_SSH_DIR": str(self.ssh_dir), "SSH_AUTH_SOCK": ""}

    def subprocess_env(self, folder: Path) -> dict[str, str]:
        """A ``macmesh`` process's environment: ``env`` and MacMesh's folders in ``folder``."""
        return dict(
            os.environ,
            **self.env(),
            MACMESH_CACHE_DIR=str(folder / "cache"),
            MACMESH_DATA_DIR=str(folder / "home"),
            MACMESH_LOG_DIR=str(folder / "logs"),
            HF_HUB_OFFLINE="1",
        )


def no_mlx_macs(server: SSHServer, folder: Path) -> NoMlxMacs:
    """The Macs of ``server`` (its fixtures from this module), with an SSH folder in
    ``folder`` holding the client key and the server's host keys."""
    ssh_dir = folder / "ssh"
    if not ssh_dir.exists():
        ssh_dir.mkdir(mode=0o700, parents=True)
        shutil.copy(server.client_key, ssh_dir / "id_ed25519")
        (ssh_dir / "known_hosts").write_text(server.known_hosts_lines())
    return NoMlxMacs(server, ssh_dir, folder / "nodes")
