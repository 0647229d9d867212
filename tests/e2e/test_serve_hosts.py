"""``macmesh serve MODEL --hosts ...``: the same probe, plan, checks, copy and launch as
``macmesh run``, then the API, against simulated Macs behind a real sshd; SIGTERM ends
every rank on every host. ``--model A --model B`` with ``--hosts``: each model its own
job (its own probe, plan, checks, copy and ranks) on those Macs (issue 37)."""

from __future__ import annotations

import os
import shutil
import threading
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


def _env(sshd: SSHServer, tmp_path: Path) -> dict[str, str]:
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
    return env


def _hosts(sshd: SSHServer) -> str:
    return ",".join(f"{address}:{sshd.port}" for address in HOSTS)


@pytest.mark.timeout(600)
def test_serve_on_two_hosts_answers_the_openai_client_then_stops_everything(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    env = _env(sshd, tmp_path)
    model = tiny_models["llama"]
    args = [str(model), "--hosts", _hosts(sshd), "--strategy", "pipeline", "--backend", "ring"]
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


@pytest.mark.timeout(600)
def test_two_models_on_two_hosts_answer_openai_clients_at_once_then_stop_everything(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    """``serve --hosts a,b --model A --model B``: both load at start, each on both hosts
    (a 2-rank pipeline each), both answer ``openai`` clients at the same time, and SIGTERM
    leaves no rank of either on any host."""
    env = _env(sshd, tmp_path)
    models = [str(tiny_models["llama"]), str(tiny_models["qwen3"])]
    args = ["--hosts", _hosts(sshd), "--model", models[0], "--model", models[1]]
    args += ["--strategy", "pipeline", "--backend", "ring", "--keep-alive", "-1"]
    served = serve_command(args, tmp_path, env)
    try:
        assert any("Serving llama, qwen3 at" in line for line in served.out), served.out
        client = openai.OpenAI(base_url=served.base_url, api_key=served.key, max_retries=0)
        listed = {m.id: m.model_extra or {} for m in client.models.list().data}
        assert set(listed) == {"llama", "qwen3"}
        for about in listed.values():
            assert about["status"]["value"] == "loaded"
            assert sorted(about["macmesh"]["nodes"]) == sorted(_hosts(sshd).split(","))
        answers: dict[str, str | None] = {}

        def ask(name: str) -> None:
            answer = client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "Hello"}], max_tokens=6
            )
            assert answer.model == name and answer.usage and answer.usage.completion_tokens >= 1
            answers[name] = answer.choices[0].finish_reason

        threads = [threading.Thread(target=ask, args=(name,)) for name in listed]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert set(answers) == {"llama", "qwen3"} and all(answers.values()), answers
    finally:
        code = served.stop()
    assert code == 0, "\n".join(served.err)
    assert wait_nothing_left(sshd) == []
