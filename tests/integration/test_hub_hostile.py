"""Issue 26: a hostile or broken Hub (the fake Hub's hostile modes, on 127.0.0.1) never
makes MacMesh write outside the cache, never hangs it, and is always one line.

Each case runs with short bounds (``MACMESH_HUB_*``: a 2 s deadline) so each test ends in
seconds; the real bounds only differ in size."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from core.library.download import download_model
from core.library.hub import HubError, hub_model_info, search_models
from core.remote.hubfetch import _fetch_program
from tests.helpers.fake_hub import FakeHub
from tests.helpers.header_models import llama_config, llama_tensors
from tests.helpers.hub_env import ROOT, hub, hub_subprocess_env
from tests.helpers.wait import wait_until

__all__ = ["hub"]  # the fixture

REPO = "mlx-community/Hostile-2L"
WEIGHT = "model-00001-of-00001.safetensors"
MACMESH = [sys.executable, "-m", "gui.cli"]
SHORT = {
    "MACMESH_HUB_DEADLINE_S": "2",
    "MACMESH_HUB_READ_TIMEOUT_S": "2",
    "MACMESH_HUB_CONNECT_TIMEOUT_S": "2",
    "MACMESH_HUB_MIN_RATE": "10000000",
}


@pytest.fixture
def hostile(hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    """The fake Hub with one ~3 MB model, short bounds, and a victim file outside the cache
    that every path-like answer aims at."""
    for name, value in SHORT.items():
        monkeypatch.setenv(name, value)
    config = llama_config(layers=2, hidden=256, heads=4, kv_heads=2, intermediate=512, vocab=1024)
    hub.add_virtual_model(REPO, config, llama_tensors(config), files=1)
    outside = tmp_path / "x"
    outside.mkdir()
    (outside / "victim.txt").write_text("precious")
    hub.hostile_value = "../" * 40 + str(outside / "victim.txt").lstrip("/")
    return hub


def _outside_untouched(tmp_path: Path) -> None:
    outside = tmp_path / "x"
    assert (outside / "victim.txt").read_text() == "precious"
    assert [p.name for p in outside.rglob("*")] == ["victim.txt"]


def _no_partial_files(tmp_path: Path) -> None:
    assert not list((tmp_path / "hf-home").rglob("*.incomplete"))


def _refused(call: Callable[[], object], match: str, within_s: float = 20) -> str:
    started = time.monotonic()
    with pytest.raises(HubError, match=match) as error:
        call()
    assert time.monotonic() - started < within_s
    message = str(error.value)
    assert "\n" not in message
    return message


def _macmesh(
    hub: FakeHub, tmp_path: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MACMESH, *args],
        cwd=ROOT,
        env=hub_subprocess_env(hub, tmp_path, **SHORT, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line(result: subprocess.CompletedProcess[str], prefix: str, match: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(prefix) and match in last, result.stderr


# -- 1, 2: nothing from the Hub becomes a path unchecked --------------------------------------


def test_a_path_like_sha_is_refused_and_nothing_is_written_outside(
    hostile: FakeHub, tmp_path: Path
) -> None:
    hostile.hostile[REPO] = "path_sha"
    _refused(lambda: hub_model_info(REPO), "not a commit id")
    _refused(lambda: download_model(REPO), "not a commit id")
    _outside_untouched(tmp_path)
    plan = _macmesh(hostile, tmp_path, "plan", f"hf:{REPO}", "--node", "a:64")
    _one_line(plan, "macmesh plan: ", "not a commit id")
    _outside_untouched(tmp_path)


def test_a_path_like_commit_header_is_refused_before_huggingface_hub_uses_it(
    hostile: FakeHub, tmp_path: Path
) -> None:
    hostile.hostile[f"{REPO}/resolve/"] = "path_commit"
    _refused(lambda: hub_model_info(REPO), r"X-Repo-Commit.*not a commit id")
    _refused(lambda: download_model(REPO), r"X-Repo-Commit.*not a commit id")
    _outside_untouched(tmp_path)


def test_a_path_like_etag_is_refused_here_and_on_a_node(hostile: FakeHub, tmp_path: Path) -> None:
    hostile.hostile[REPO] = "path_etag"
    _refused(lambda: hub_model_info(REPO), "ETag.*not an object id")
    _refused(lambda: download_model(REPO), "ETag.*not an object id")
    _outside_untouched(tmp_path)
    # the node's own download: the program hubfetch sends, run here by this Python
    repo = hostile.repos[REPO]
    node = tmp_path / "node"
    spec = {
        "repo": REPO,
        "revision": repo.sha,
        "cache": str(node / "hub"),
        "folder": str(node / "model"),
        "staging": str(node / "model.partial"),
        "files": [
            [WEIGHT, repo.files[WEIGHT].size],
            ["config.json", repo.files["config.json"].size],
        ],
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("MACMESH_HUB_")}
    ran = subprocess.run(
        [sys.executable, "-c", _fetch_program(), json.dumps(spec)],
        env={**env, "HF_ENDPOINT": hostile.url, "HF_HUB_OFFLINE": "0", "HF_HOME": str(node)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode != 0 and "@@done" not in ran.stdout
    assert "not an object id" in ran.stderr.strip().splitlines()[-1], ran.stderr
    _outside_untouched(tmp_path)


def test_a_typed_revision_that_leaves_refs_is_refused(hostile: FakeHub, tmp_path: Path) -> None:
    _refused(lambda: download_model(REPO, "../../x"), "not a branch, tag or commit")
    _refused(lambda: hub_model_info(REPO, revision="main/../../x"), "not a branch")
    assert not hostile.served()
    refused = _macmesh(hostile, tmp_path, "models", "download", REPO, "--revision", "../x")
    assert refused.returncode == 2 and "not a branch, tag or commit" in refused.stderr


# -- 3: a body stops at the promised size ------------------------------------------------------


@pytest.mark.parametrize("name", [WEIGHT, "config.json"])
def test_a_body_that_never_ends_is_cut_at_its_size_and_removed(
    hostile: FakeHub, tmp_path: Path, name: str
) -> None:
    hostile.hostile[f"file={name}" if name == WEIGHT else f"/resolve/main/{name}"] = "endless"
    size = hostile.repos[REPO].files[name].size
    _refused(lambda: download_model(REPO), f"more than the {size:,} bytes it promised")
    _no_partial_files(tmp_path)
    blobs = tmp_path / "hf-home" / "hub" / f"models--{REPO.replace('/', '--')}" / "blobs"
    assert all(p.stat().st_size <= 4 << 20 for p in blobs.iterdir())


def test_a_claimed_petabyte_is_refused_before_a_byte_moves(
    hostile: FakeHub, tmp_path: Path
) -> None:
    hostile.hostile[REPO] = "huge"
    _refused(lambda: download_model(REPO), "Not enough disk space")
    assert not hostile.served("/cdn/")
    # planning reads headers with range requests: an answer ignoring the range is cut
    hostile.repos[REPO].sharded_route = False
    _refused(lambda: hub_model_info(REPO), "more than the 100,001 bytes asked")


# -- 7: every call ends by its deadline; Ctrl-C is one line -----------------------------------


def test_a_silent_hub_ends_every_call_by_its_deadline(hostile: FakeHub, tmp_path: Path) -> None:
    hostile.hostile["/api/"] = "silent"
    for call in (
        lambda: search_models("Hostile"),
        lambda: hub_model_info(REPO),
        lambda: download_model(REPO),
    ):
        _refused(call, "did not answer in time|Cannot reach", within_s=12)


def _deadline_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read timeout well above the byte a second, as the real settings have it (30 s
    against a 120 s deadline): the deadline ends the answer, never a read timeout. With
    both at 2 s a busy machine lets the read timeout win the race, and a timeout that is
    not the deadline's is retried with backoff (rightly: a stalled Hub, not a slow one)."""
    monkeypatch.setenv("MACMESH_HUB_READ_TIMEOUT_S", "10")


def test_a_body_at_one_byte_a_second_ends_by_its_deadline(
    hostile: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _deadline_first(monkeypatch)
    hostile.hostile[f"/api/models/{REPO}"] = "slow"
    _refused(lambda: hub_model_info(REPO), "too slowly|did not answer in time", within_s=12)
    hostile.hostile.clear()
    hostile.hostile[f"file={WEIGHT}"] = "slow"
    _refused(lambda: download_model(REPO), "too slowly|did not answer in time", within_s=15)


def test_headers_at_one_byte_a_second_end_by_the_deadline(
    hostile: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read timeout alone waits per byte: every read is held to the deadline."""
    _deadline_first(monkeypatch)
    hostile.hostile["/api/models"] = "slow_headers"
    _refused(lambda: search_models("Hostile"), "did not answer in time", within_s=12)
    hostile.hostile.clear()
    hostile.hostile[f"file={WEIGHT}"] = "slow_headers"
    _refused(lambda: download_model(REPO), "did not answer in time", within_s=15)
    _no_partial_files(tmp_path)


@pytest.mark.parametrize(
    ("args", "route"),
    [
        (["plan", f"hf:{REPO}", "--node", "a:64"], f"/api/models/{REPO}"),
        (["models", "search", "Hostile"], "/api/models"),
        (["models", "download", REPO], f"/api/models/{REPO}"),
    ],
)
def test_ctrl_c_while_the_hub_is_silent_is_one_line(
    hostile: FakeHub, tmp_path: Path, args: list[str], route: str
) -> None:
    hostile.hostile[route] = "silent"
    env = hub_subprocess_env(hostile, tmp_path, MACMESH_HUB_DEADLINE_S="120")
    child = subprocess.Popen(
        [*MACMESH, *args], cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        wait_until(lambda: hostile._active > 0, 60, "the command to ask the Hub")
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=15)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    text = stderr.decode()
    assert child.returncode == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert text.strip().splitlines()[-1].startswith("macmesh: interrupted"), text


# -- 9, 17: malformed answers and errors are one line, with no secret ---------------------------


@pytest.mark.parametrize(
    ("mode", "match"),
    [
        ("garbage", "malformed answer"),
        ("wrong_types", "malformed answer|not a model name|not a commit id"),
        ("redirect_loop", "redirect loop"),
    ],
)
def test_a_malformed_answer_is_one_line_naming_what(
    hostile: FakeHub, tmp_path: Path, mode: str, match: str
) -> None:
    hostile.hostile["/api/models"] = mode
    _refused(lambda: search_models("Hostile"), match)
    _refused(lambda: hub_model_info(REPO), match)
    _refused(lambda: download_model(REPO), match)


def test_a_bad_safetensors_header_length_is_one_line(hostile: FakeHub) -> None:
    hostile.repos[REPO].sharded_route = False
    hostile.hostile[f"file={WEIGHT}"] = "bad_header_length"
    _refused(lambda: hub_model_info(REPO), "malformed answer.*SafetensorsParsingError")


def test_malformed_answers_on_the_command_line(hostile: FakeHub, tmp_path: Path) -> None:
    hostile.hostile["/api/models"] = "garbage"
    search = _macmesh(hostile, tmp_path, "models", "search", "Hostile")
    _one_line(search, "macmesh models search: ", "malformed answer")
    hostile.hostile["/api/models"] = "wrong_types"
    plan = _macmesh(hostile, tmp_path, "plan", f"hf:{REPO}", "--node", "a:64")
    _one_line(plan, "macmesh plan: ", "Hugging Face")
    hostile.hostile.clear()
    hostile.hostile[f"file={WEIGHT}"] = "endless"
    download = _macmesh(hostile, tmp_path, "models", "download", REPO)
    _one_line(download, "macmesh models download: ", "more than the")
    _no_partial_files(tmp_path)


def test_an_http_error_names_the_address_and_never_a_password(
    hostile: FakeHub, tmp_path: Path
) -> None:
    hostile.hostile["/api/models"] = "error500"
    secret = hostile.url.replace("http://", "http://someone:hunter2@")
    message = _refused(lambda: search_models("Hostile", endpoint=secret), "HTTP 500")
    assert "None" not in message and "/api/models" in message
    assert "hunter2" not in message and "someone" not in message
    hostile.error_status = 501  # not retried: the error itself, named by its address
    message = _refused(lambda: search_models("Hostile", endpoint=secret), "answered HTTP 501 for")
    assert f"{hostile.url}/api/models" in message and "hunter2" not in message
    hostile.error_status = 500
    closed = secret.rsplit(":", 1)[0] + ":9"  # nothing listens: the address is printed
    message = _refused(lambda: hub_model_info(REPO, endpoint=closed), "Cannot reach")
    assert "127.0.0.1:9" in message and "hunter2" not in message
    env_secret = _macmesh(hostile, tmp_path, "models", "search", "Hostile", HF_ENDPOINT=secret)
    _one_line(env_secret, "macmesh models search: ", "HTTP 500")
    assert "hunter2" not in env_secret.stderr
