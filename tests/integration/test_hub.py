"""Hugging Face through the real huggingface_hub against the fake Hub on 127.0.0.1:
search, planning from headers with no weight bytes served, downloads that resume after a
cut connection, survive a 429, stop on cancel and resume, and one clear line for a gated
repo, offline mode, a full disk or no network."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.library.download import DownloadCancelled, DownloadProgress, check_disk, download_model
from core.library.entries import Source, State
from core.library.hub import (
    OFFLINE_MESSAGE,
    HubError,
    hub_model_info,
    repo_id_of,
    search_models,
)
from core.library.local import list_library
from core.model.info import read_model_info
from tests.helpers.fake_hub import FakeFile, FakeHub
from tests.helpers.header_models import llama_config, llama_tensors
from tests.helpers.hub_env import ROOT, hub, hub_subprocess_env

__all__ = ["hub"]  # the fixture

BIG = "mlx-community/Big-70B-6bit"
MEDIUM = "mlx-community/Medium-2L-bf16"
MACMESH = [sys.executable, "-m", "gui.cli"]


def _big(hub: FakeHub, repo_id: str = BIG, files: int = 16) -> None:
    """A 70B-shaped 6-bit llama: ~53 GB of virtual weights, headers real."""
    config = llama_config(
        layers=80, hidden=8192, heads=64, kv_heads=8, intermediate=28672, vocab=128256, bits=6
    )
    hub.add_virtual_model(repo_id, config, llama_tensors(config), files=files, downloads=900)


def _medium(hub: FakeHub, files: int = 2, **options: object) -> None:
    """~55 MB in two files: big enough that a cut lands mid-file after whole chunks."""
    config = llama_config(layers=2, hidden=1024, heads=8, kv_heads=4, intermediate=2816, vocab=4096)
    hub.add_virtual_model(MEDIUM, config, llama_tensors(config), files=files, **options)


@pytest.fixture
def tiny_hub(hub: FakeHub, tiny_models: dict[str, Path]) -> FakeHub:
    hub.add_folder("mlx-community/tiny-llama-4bit", tiny_models["llama"], downloads=50)
    hub.add_folder("mlx-community/tiny-qwen3", tiny_models["qwen3"], downloads=500)
    hub.add_folder("someone/tiny-llama-copy", tiny_models["llama"], downloads=9000)
    hub.add_folder("meta/tiny-gated", tiny_models["llama"], gated=True, downloads=10)
    hub.add_files(
        "someone/tiny-GGUF", {"tiny-Q4_K_M.gguf": FakeFile.of("x.gguf", b"GGUF" + bytes(4096))}
    )
    return hub


def test_repo_names_links_and_hf_prefix() -> None:
    assert repo_id_of("hf:org/name") == "org/name"
    assert repo_id_of("https://huggingface.co/mlx-community/Qwen3-4B-4bit") == (
        "mlx-community/Qwen3-4B-4bit"
    )
    assert repo_id_of("huggingface.co/org/name/tree/main") == "org/name"
    assert repo_id_of("org/name") == "org/name"
    assert repo_id_of("/Users/me/models") is None
    assert repo_id_of("not a name") is None


def test_search_defaults_to_mlx_community_by_downloads(tiny_hub: FakeHub) -> None:
    found = search_models("tiny", endpoint=tiny_hub.url)
    assert [m.repo_id for m in found] == [
        "mlx-community/tiny-qwen3",
        "mlx-community/tiny-llama-4bit",
    ]
    assert found[0].downloads == 500 and found[0].mlx and found[0].parameters
    assert found[0].size_bytes == tiny_hub.repos["mlx-community/tiny-qwen3"].used_storage()
    everyone = search_models("tiny", author=None, limit=2, endpoint=tiny_hub.url)
    assert [m.repo_id for m in everyone] == ["someone/tiny-llama-copy", "mlx-community/tiny-qwen3"]
    listing = tiny_hub.served("/api/models")[0]
    assert listing.path == "/api/models"


def test_facts_from_headers_match_the_downloaded_folder(
    tiny_hub: FakeHub, tiny_models: dict[str, Path]
) -> None:
    remote = hub_model_info("mlx-community/tiny-llama-4bit", endpoint=tiny_hub.url)
    local = read_model_info(tiny_models["llama"])
    assert remote.name == "mlx-community/tiny-llama-4bit"
    for field in ("architecture", "layers", "heads", "kv_heads", "parameter_count", "dtype"):
        assert getattr(remote, field) == getattr(local, field), field
    assert remote.layer_bytes == local.layer_bytes and remote.shared_bytes == local.shared_bytes
    assert tiny_hub.weight_bytes_served() == 0
    assert tiny_hub.served("safetensors-metadata")  # every header in one request


def test_without_the_all_headers_route_each_header_is_read_by_range(tiny_hub: FakeHub) -> None:
    _big(tiny_hub, "other/Big-70B-6bit", files=4)
    tiny_hub.repos["other/Big-70B-6bit"].sharded_route = False
    info = hub_model_info("other/Big-70B-6bit", endpoint=tiny_hub.url)
    assert info.layers == 80 and info.weight_bytes > 50 * 2**30
    weight_gets = [s for s in tiny_hub.served() if s.server == "cdn" and s.method == "GET"]
    assert len(weight_gets) == 4
    assert all(s.range == "bytes=0-100000" and s.body_bytes <= 100_001 for s in weight_gets)


def test_plan_hf_from_headers_only_with_no_weight_download(hub: FakeHub, tmp_path: Path) -> None:
    """A 70B 6-bit llama on 64 + 32 GB, planned from its headers alone: it fits as a
    pipeline one request at a time; a batch of 8 (the default) does not, and the plan
    says which batch does."""

    def plan(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*MACMESH, "plan", f"hf:{BIG}", "--node", "a:64", "--node", "b:32", "--json", *extra],
            cwd=ROOT,
            env=hub_subprocess_env(hub, tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )

    _big(hub)
    result = plan("--batch", "1")
    assert result.returncode == 0, result.stderr
    plan_1 = json.loads(result.stdout)
    assert plan_1["model"] == BIG and plan_1["strategy"] == "pipeline"
    assert plan_1["verdict"] == "fits"
    assert plan_1["nodes_used"] == ["a", "b"] and sum(plan_1["split"]) == 80
    batched = plan("--batch", "8")
    assert batched.returncode == 1, batched.stderr
    reason = json.loads(batched.stdout)["reason"]
    assert "The batch is what does not fit (8 requests at once)" in reason
    assert "--batch" in reason
    assert hub.weight_bytes_served() == 0
    assert not [s for s in hub.served() if s.server == "cdn"]
    assert sum(s.body_bytes for s in hub.served()) < 5 * 2**20


def test_search_cli_shows_size_and_fit(tiny_hub: FakeHub, tmp_path: Path) -> None:
    _big(tiny_hub)
    result = subprocess.run(
        [sys.executable, "-m", "gui.cli", "models", "search", "", "--node", "a:64", "--json"],
        cwd=ROOT,
        env=hub_subprocess_env(tiny_hub, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert list(rows) == [BIG, "mlx-community/tiny-qwen3", "mlx-community/tiny-llama-4bit"]
    assert rows[BIG]["fit"] == "doesn't fit" and rows[BIG]["size_bytes"] > 50 * 2**30
    assert rows["mlx-community/tiny-qwen3"]["fit"] == "fits"
    assert rows["mlx-community/tiny-qwen3"]["architecture"] == "qwen3"
    assert tiny_hub.weight_bytes_served() == 0


def test_download_fills_the_cache_the_library_reads(tiny_hub: FakeHub, tmp_path: Path) -> None:
    seen: list[DownloadProgress] = []
    path = download_model("mlx-community/tiny-qwen3", endpoint=tiny_hub.url, progress=seen.append)
    assert path.parent.parent.name == "models--mlx-community--tiny-qwen3"
    assert read_model_info(path).architecture == "qwen3"
    assert seen[-1].bytes_done == seen[-1].bytes_total > 0
    assert seen[-1].files_done == seen[-1].files_total == 6
    assert (path.parent.parent / "refs" / "main").read_text() == path.name
    entries = list_library(hub_cache=tmp_path / "hf-home" / "hub", lm_studio=[])
    assert [(e.name, e.source, e.state) for e in entries] == [
        ("mlx-community/tiny-qwen3", Source.HUGGING_FACE, State.OK)
    ]
    tiny_hub.clear_log()
    again = download_model("mlx-community/tiny-qwen3", endpoint=tiny_hub.url)
    assert again == path and tiny_hub.weight_bytes_served() == 0  # nothing fetched twice


def test_a_cut_connection_resumes_mid_file(hub: FakeHub) -> None:
    _medium(hub)
    first = "model-00001-of-00002.safetensors"
    size = hub.repos[MEDIUM].files[first].size
    hub.cut_once[first] = 0.5
    notes: list[str] = []
    path = download_model(
        MEDIUM, endpoint=hub.url, progress=lambda p: notes.append(p.note or ""), workers=1
    )
    assert read_model_info(path).layers == 2
    sha = hub.repos[MEDIUM].files[first].sha256
    gets = [s for s in hub.served(sha) if s.method == "GET"]
    assert [s.range is not None for s in gets] == [False, True]
    refetched = sum(s.body_bytes for s in gets) - size
    assert 0 <= refetched < 0.05 * size
    assert "The connection dropped: resuming where it stopped." in notes


def test_a_rate_limit_is_named_and_retried(hub: FakeHub) -> None:
    _medium(hub)
    hub.rate_limit_once.append("/cdn/")
    notes: list[str] = []
    download_model(MEDIUM, endpoint=hub.url, progress=lambda p: notes.append(p.note or ""))
    assert any("HTTP 429" in note and "retrying" in note for note in notes)
    assert [s.status for s in hub.served("/cdn/")].count(429) == 1


def test_cancel_stops_and_a_rerun_fetches_only_the_rest(hub: FakeHub, tmp_path: Path) -> None:
    _medium(hub)
    total = hub.repos[MEDIUM].used_storage()
    hub.bandwidth = 50e6  # progress every ~5 MB: the stop lands inside the second file
    cancel = threading.Event()

    def stop_halfway(progress: DownloadProgress) -> None:
        if progress.bytes_done > 0.75 * progress.bytes_total:
            cancel.set()

    with pytest.raises(DownloadCancelled, match="run the download again"):
        download_model(MEDIUM, endpoint=hub.url, progress=stop_halfway, cancel=cancel, workers=1)
    blobs = tmp_path / "hf-home" / "hub" / "models--mlx-community--Medium-2L-bf16" / "blobs"
    assert len(list(blobs.glob("*.incomplete"))) == 1  # the file in flight, kept to resume
    hub.wait_idle()  # the stopped transfer logged
    first_round = hub.weight_bytes_served()
    hub.clear_log()
    path = download_model(MEDIUM, endpoint=hub.url)
    assert read_model_info(path).layers == 2
    assert not list(blobs.glob("*.incomplete"))
    second_round = hub.weight_bytes_served()
    weights = sum(f.size for f in hub.repos[MEDIUM].files.values() if f.lfs)
    assert second_round < 0.5 * total and first_round + second_round < 1.05 * weights


def test_a_download_stopped_mid_file_resumes_with_a_range_request(
    hub: FakeHub, tmp_path: Path
) -> None:
    _medium(hub, files=1)
    name = "model-00001-of-00001.safetensors"
    file = hub.repos[MEDIUM].files[name]
    hub.bandwidth = 50e6  # progress every ~5 MB
    cancel = threading.Event()

    def stop_mid_file(progress: DownloadProgress) -> None:
        if progress.bytes_done > progress.bytes_total // 2:
            cancel.set()

    with pytest.raises(DownloadCancelled):
        download_model(MEDIUM, endpoint=hub.url, progress=stop_mid_file, cancel=cancel)
    hub.bandwidth = None
    blobs = tmp_path / "hf-home" / "hub" / "models--mlx-community--Medium-2L-bf16" / "blobs"
    [partial] = blobs.glob("*.incomplete")
    kept = partial.stat().st_size
    assert 0.4 * file.size < kept < file.size
    hub.wait_idle()  # the stopped transfer logged
    hub.clear_log()
    seen: list[DownloadProgress] = []
    path = download_model(MEDIUM, endpoint=hub.url, progress=seen.append)
    gets = [s for s in hub.served(file.sha256) if s.method == "GET"]
    assert [(s.range, s.status) for s in gets] == [(f"bytes={kept}-", 206)]
    assert gets[0].body_bytes == file.size - kept  # the second time: only what was missing
    assert (path / name).stat().st_size == file.size and not partial.exists()
    assert seen[-1].bytes_done == seen[-1].bytes_total


def test_a_gated_repo_says_accept_the_licence_or_sign_in(
    tiny_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(HubError) as error:
        download_model("meta/tiny-gated", endpoint=tiny_hub.url)
    message = str(error.value)
    assert "accept its licence on " + tiny_hub.url + "/meta/tiny-gated" in message
    assert "not signed in" in message and "\n" not in message
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(HubError, match="token has no access"):
        download_model("meta/tiny-gated", endpoint=tiny_hub.url)
    monkeypatch.setenv("HF_TOKEN", tiny_hub.token)
    path = download_model("meta/tiny-gated", endpoint=tiny_hub.url)
    assert read_model_info(path).architecture == "llama"
    sent = {s.authorization for s in tiny_hub.served("/meta/tiny-gated/resolve/")}
    assert f"Bearer {tiny_hub.token}" in sent


def test_refusals_before_any_file_moves(tiny_hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(HubError, match=r"GGUF weights only.*not an MLX model"):
        download_model("someone/tiny-GGUF", endpoint=tiny_hub.url)
    with pytest.raises(HubError, match="not on Hugging Face"):
        download_model("nobody/nothing", endpoint=tiny_hub.url)
    assert not tiny_hub.served("/resolve/")
    with pytest.raises(HubError, match="Not enough disk space: the download needs 1024 TB"):
        check_disk(1 << 50, tmp_path / "no" / "such" / "folder")


def test_offline_mode_and_no_network_are_said_plainly(
    tiny_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for call in (
        lambda: search_models("tiny", endpoint=tiny_hub.url),
        lambda: hub_model_info("mlx-community/tiny-qwen3", endpoint=tiny_hub.url),
        lambda: download_model("mlx-community/tiny-qwen3", endpoint=tiny_hub.url),
    ):
        with pytest.raises(HubError) as error:
            call()
        assert str(error.value) == OFFLINE_MESSAGE
    assert tiny_hub.served() == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    closed = tiny_hub.url.rsplit(":", 1)[0] + ":9"  # discard port: nothing listens
    with pytest.raises(HubError, match=r"Cannot reach Hugging Face at http://127\.0\.0\.1:9 "):
        search_models("tiny", endpoint=closed)


def test_download_cli_then_plan_run_and_models_by_name(tiny_hub: FakeHub, tmp_path: Path) -> None:
    env = hub_subprocess_env(tiny_hub, tmp_path)

    def macmesh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gui.cli", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    refused = macmesh("run", "hf:mlx-community/tiny-qwen3", "--hosts", "a,b")
    assert refused.returncode == 2
    assert "not downloaded yet: run `macmesh models download mlx-community/tiny-qwen3`" in (
        refused.stderr
    )
    demo = macmesh("demo", "--headless", "--model", "hf:mlx-community/tiny-qwen3")
    assert demo.returncode == 2 and "not downloaded yet" in demo.stderr
    unknown = macmesh("plan", "nobody/nothing", "--node", "a:16")
    assert unknown.returncode == 2
    assert "neither a folder nor a model on this Mac" in unknown.stderr
    assert "use hf:nobody/nothing" in unknown.stderr
    done = macmesh("models", "download", "https://huggingface.co/mlx-community/tiny-qwen3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("mlx-community/tiny-qwen3: qwen3 · 4 layers")
    assert "100%" in done.stderr and "6/6 files" in done.stderr
    listed = json.loads(macmesh("models", "--json").stdout)
    assert [e["name"] for e in listed] == ["mlx-community/tiny-qwen3"]
    tiny_hub.clear_log()
    for name in ("mlx-community/tiny-qwen3", "hf:mlx-community/tiny-qwen3"):
        plan = macmesh("plan", name, "--node", "a:16", "--json")
        assert plan.returncode == 0, plan.stderr
        assert json.loads(plan.stdout)["model"] == "mlx-community/tiny-qwen3"
    assert tiny_hub.served() == []  # the cached copy: the Hub is not asked
    gated = macmesh("models", "download", "meta/tiny-gated")
    assert gated.returncode == 2 and "Traceback" not in gated.stderr
    last = gated.stderr.splitlines()[-1]
    assert last.startswith("macmesh models download: meta/tiny-gated is gated or private")
    assert "accept its licence" in last
    offline = macmesh("models", "search", "tiny")
    assert offline.returncode == 0
    env["HF_HUB_OFFLINE"] = "1"
    offline = macmesh("models", "search", "tiny")
    assert offline.returncode == 2 and OFFLINE_MESSAGE in offline.stderr
