"""``macmesh serve MODEL --hosts ...``: the same probe, plan, checks, copy and launch as
``macmesh run``, then the API, against simulated Macs behind a real sshd; SIGTERM ends
every rank on every host."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import openai
import pytest

from tests.fixtures.macos.make_bin import make_host_bins
from tests.helpers.remote import wait_nothing_left
from tests.helpers.serving import serve_command
from tests.helpers.sshd import SSHServer

pytestmark = pytest.mark.slow

HOSTS = {"127.0.0.2": "studio-a", "127.0.0.3": "studio-b"}


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_host_bins("mesh4", HOSTS, tmp_path_factory.mktemp("serve-mesh-bins"))


@pytest.mark.timeout(600)
def test_serve_on_two_hosts_answers_the_openai_client_then_stops_everything(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    ssh_dir = tmp_path / "ssh"
    ssh_dir.mkdir(mode=0o700)
    shutil.copy(sshd.client_key, ssh_dir / "id_ed25519")
    (ssh_dir / "known_hosts").write_text(sshd.known_hosts_lines())
    env = dict(
        os.environ,
        MACMESH_SSH_DIR=str(ssh_dir),
        MACMESH_REMOTE_CACHE=str(tmp_path / "nodes" / "{host}"),
        MACMESH_CACHE_DIR=str(tmp_path / "cache"),
        MACMESH_DATA_DIR=str(tmp_path / "data"),
        SSH_AUTH_SOCK="",
    )
    hosts = ",".join(f"{address}:{sshd.port}" for address in HOSTS)
    model = tiny_models["llama"]
    args = [str(model), "--hosts", hosts, "--strategy", "pipeline", "--backend", "ring"]
    served = serve_command(args, tmp_path, env)
    try:
        assert any("Checking the nodes" in line for line in served.err)
        client = openai.OpenAI(base_url=served.base_url, api_key=served.key, max_retries=0)
        [listed] = client.models.list().data
        answer = client.chat.completions.create(
            model=listed.id, messages=[{"role": "user", "content": "Hello"}], max_tokens=6
        )
        assert answer.usage.completion_tokens >= 1 and answer.choices[0].finish_reason
    finally:
        code = served.stop()
    assert code == 0, "\n".join(served.err)
    assert wait_nothing_left(sshd) == []
