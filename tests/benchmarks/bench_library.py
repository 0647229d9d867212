"""The model library's figures (issue 13), against the fake Hub on 127.0.0.1:

- listing a Hugging Face cache of 200 models (< 300 ms);
- planning a 100-file repo from the Hub's headers (< 2 s, < 5 MB read);
- downloading a model through huggingface_hub vs a plain HTTP download of the same bytes
  from the same server over a 100 MB/s and a 1 GB/s link (>= 0.9), alternating rounds,
  and unthrottled on loopback (both clients CPU-bound: their CPU per GB);
- a download cut mid-file and resumed: bytes fetched again (< 5 %), and a download
  stopped halfway then run again.

``bench_library()`` returns JSON-able figures; run this file to print them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from core.library.download import DownloadCancelled, DownloadProgress, download_model
from core.library.hub import hub_model_info
from core.library.local import complete_library, list_library
from core.model.safetensors_headers import read_header
from tests.helpers.fake_hub import FakeHub
from tests.helpers.fake_hub_process import hub_process
from tests.helpers.header_models import llama_config, llama_tensors, write_header_only_model
from tests.helpers.hf_cache import put_in_hf_cache

MIB = 1 << 20


def _environment(home: Path, hub: FakeHub) -> None:
    from huggingface_hub import constants

    os.environ.update(
        HF_HOME=str(home / "hf"),
        HF_ENDPOINT=hub.url,
        HF_HUB_OFFLINE="0",
        MACMESH_CACHE_DIR=str(home / "macmesh-cache"),
        MACMESH_CONFIG_DIR=str(home / "config"),
    )
    os.environ.pop("HF_HUB_CACHE", None)
    constants.HF_HUB_OFFLINE = False
    constants.HF_HUB_CACHE = str(home / "hf" / "hub")


def bench_listing(home: Path, entries: int = 200, runs: int = 7) -> dict:
    """``list_library`` over a cache of ``entries`` models (sparse files: headers only
    on disk), three architectures."""
    cache = home / "listing-cache"
    kinds = ("llama", "qwen2", "mistral")
    for i in range(entries):
        config = llama_config(
            layers=8, hidden=2048, heads=16, kv_heads=8, intermediate=5632, vocab=32000,
            bits=4, model_type=kinds[i % 3],
        )  # fmt: skip
        folder = write_header_only_model(home / "staging" / str(i), config, llama_tensors(config))
        for weights in folder.glob("*.safetensors"):
            with weights.open("r+b") as handle:
                handle.truncate(read_header(weights, check_data=False).declared_size)
        put_in_hf_cache(cache, f"org/model-{i:03d}", folder, move=True)
    from huggingface_hub import scan_cache_dir  # noqa: F401  (imported once per process)

    memo = Path(os.environ["MACMESH_CACHE_DIR"]) / "library-index.json"
    memo.unlink(missing_ok=True)
    start = time.perf_counter()
    found = list_library(hub_cache=cache, lm_studio=[], checked=False)
    first_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    complete_library(found)
    checking_ms = (time.perf_counter() - start) * 1000
    memo.unlink(missing_ok=True)
    start = time.perf_counter()
    list_library(hub_cache=cache, lm_studio=[])
    first_checked_ms = (time.perf_counter() - start) * 1000
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        list_library(hub_cache=cache, lm_studio=[])
        times.append((time.perf_counter() - start) * 1000)
    return {
        "entries": len(found),
        "usable": sum(e.usable for e in found),
        "first_ms": round(first_ms, 1),
        "first_note": "the window's first listing: config and file names, no header; "
        "it then checks the headers in the background",
        "then_checking_ms": round(checking_ms, 1),
        "first_fully_checked_ms": round(first_checked_ms, 1),
        "median_ms": round(statistics.median(times), 1),
        "max_ms": round(max(times), 1),
        "target_ms": 300,
    }


def bench_plan_from_headers(home: Path, hub: FakeHub, runs: int = 5) -> dict:
    """A 100-file repo: headers only, fresh header cache each run; both of the Hub's
    routes (all headers in one request, and a range request per file)."""
    config = llama_config(
        layers=100, hidden=8192, heads=64, kv_heads=8, intermediate=28672, vocab=128256, bits=4
    )
    figures: dict[str, object] = {"files": 100, "target_s": 2.0, "target_mb": 5.0}
    for route, all_at_once in (("all_headers_request", True), ("range_per_file", False)):
        repo_id = f"bench/model-100-files-{route}"
        repo = hub.add_virtual_model(repo_id, config, llama_tensors(config), files=100)
        repo.sharded_route = all_at_once
        times, read = [], []
        for run in range(runs):
            hub.clear_log()
            start = time.perf_counter()
            info = hub_model_info(repo_id, cache=home / "headers" / route / str(run))
            times.append(time.perf_counter() - start)
            read.append(sum(s.body_bytes for s in hub.served()) / MIB)
        figures[route] = {
            "median_s": round(statistics.median(times), 3),
            "max_s": round(max(times), 3),
            "mb_read": round(statistics.median(read), 2),
            "weight_gb_planned": round(info.weight_bytes / 2**30, 1),
            "weight_bytes_served": hub.weight_bytes_served(),
        }
    return figures


def _plain_http(hub: FakeHub, repo_id: str, target: Path) -> int:
    """Every file of the repo over plain HTTP (urllib), written to ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    total = 0
    for name, file in hub.repos[repo_id].files.items():
        url = (
            f"{hub.cdn_url}/cdn/{file.sha256}"
            if file.lfs
            else f"{hub.url}/{repo_id}/resolve/main/{name}"
        )
        with urllib.request.urlopen(url) as response, (target / name).open("wb") as out:
            while chunk := response.read(MIB):
                out.write(chunk)
                total += len(chunk)
    return total


def _download_repo(hub: FakeHub, bandwidth: float | None = None, mb_per_file: int = 96) -> None:
    """Two weight files of ~``mb_per_file`` MB each, as ``bench/download``."""
    hidden = 2048
    ffn = mb_per_file * MIB // (2 * 3 * hidden) - (2 * hidden) // 3  # ~mb_per_file per layer
    config = llama_config(
        layers=2, hidden=hidden, heads=16, kv_heads=8, intermediate=ffn, vocab=8192
    )
    hub.add_virtual_model("bench/download", config, llama_tensors(config), files=2)
    hub.bandwidth = bandwidth


def bench_download(home: Path, rounds: int = 5) -> dict:
    """huggingface_hub through MacMesh vs plain HTTP, same bytes, same server, alternating,
    over links shared by every transfer: 100 MB/s (800 Mb/s, a fast connection to the
    Hub) and 1 GB/s (10 GbE, the fastest port a Mac has). The ratio the issue sets is the
    lowest of those. Unthrottled on loopback both clients are CPU-bound on this machine's
    cores, which the fake Hub shares: that row measures the clients' CPU per GB
    (huggingface_hub's httpx stack against urllib), not the download. The fake Hub serves
    from a process of its own, as a real one would: in the client's process its threads
    would share the client's interpreter lock, slowing it by the client's work."""
    figures: dict[str, object] = {"rounds": rounds, "target_ratio": 0.9}
    scratch = _memory_folder(home)
    figures["written_to"] = "tmpfs" if scratch != home else "disk"
    links = (("link_100_mb_s", 100 * 1e6), ("link_1_gb_s", 1e9))
    for name, bandwidth in (*links, ("loopback_unthrottled", None)):
        with hub_process(functools.partial(_download_repo, bandwidth=bandwidth)) as hub:
            size = hub.repos["bench/download"].used_storage()
            figures["bytes"] = size
            figures[name] = _download_rounds(scratch, hub, "bench/download", size, rounds)
    if scratch != home:
        shutil.rmtree(scratch, ignore_errors=True)
    ratios = [figures[name]["ratio"] for name, _ in links]  # type: ignore[index]
    figures["ratio_over_links"] = min(ratios)
    figures["met"] = min(ratios) >= 0.9
    return figures


def _memory_folder(home: Path, needed: int = 2 << 30) -> Path:
    """Where both arms write: a tmpfs when there is one with room, else ``home``. On a
    disk, the page cache's write-back lands on whichever arm writes when it starts, and
    made either arm's CPU per GB swing between 0.4 and 2.4 s on this machine."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > needed:
        return Path(tempfile.mkdtemp(prefix="macmesh-bench-dl-", dir=shm))
    return home


def _download_rounds(home: Path, hub: FakeHub, repo_id: str, size: int, rounds: int) -> dict:
    """Wall time, and the client's CPU time (every thread of this process; the server is
    another), which a busy machine disturbs less than the wall time."""
    ours, plain, ours_cpu, plain_cpu = [], [], [], []
    for run in range(rounds):
        cache = home / "dl" / f"cache-{run}"
        start, cpu = time.perf_counter(), time.process_time()
        download_model(repo_id, endpoint=hub.url, cache=cache)
        ours.append(time.perf_counter() - start)
        ours_cpu.append(time.process_time() - cpu)
        shutil.rmtree(cache)
        target = home / "dl" / f"plain-{run}"
        start, cpu = time.perf_counter(), time.process_time()
        _plain_http(hub, repo_id, target)
        plain.append(time.perf_counter() - start)
        plain_cpu.append(time.process_time() - cpu)
        shutil.rmtree(target)
    ours_mbs = size / MIB / statistics.median(ours)
    plain_mbs = size / MIB / statistics.median(plain)
    gb = size / 2**30
    return {
        "macmesh_mb_s": round(ours_mbs, 1),
        "plain_http_mb_s": round(plain_mbs, 1),
        "ratio": round(ours_mbs / plain_mbs, 3),
        "macmesh_cpu_s_per_gb": round(statistics.median(ours_cpu) / gb, 3),
        "plain_http_cpu_s_per_gb": round(statistics.median(plain_cpu) / gb, 3),
    }


def bench_resume(home: Path, hub: FakeHub) -> dict:
    """A cut mid-file (resumed by range request) and a stop halfway then a rerun."""
    repo_id = "bench/download"
    if repo_id not in hub.repos:
        _download_repo(hub)
    repo = hub.repos[repo_id]
    first = "model-00001-of-00002.safetensors"
    size = repo.files[first].size
    hub.cut_once[first] = 0.5
    hub.clear_log()
    download_model(repo_id, endpoint=hub.url, cache=home / "resume" / "cut", workers=1)
    gets = [s for s in hub.served(repo.files[first].sha256) if s.method == "GET"]
    refetched = sum(s.body_bytes for s in gets) - size
    weights = sum(f.size for f in repo.files.values() if f.lfs)
    cancel = threading.Event()

    def stop_halfway(progress: DownloadProgress) -> None:
        if progress.bytes_done > progress.bytes_total // 2:
            cancel.set()

    cache = home / "resume" / "stop"
    hub.bandwidth = 200e6  # progress every ~20 MB: the stop lands mid-file
    with contextlib.suppress(DownloadCancelled):
        download_model(repo_id, endpoint=hub.url, cache=cache, progress=stop_halfway, cancel=cancel)
    hub.bandwidth = None
    kept = sum(p.stat().st_size for p in cache.rglob("blobs/*") if len(p.stem) == 64)
    hub.wait_idle()
    hub.clear_log()
    download_model(repo_id, endpoint=hub.url, cache=cache)
    served_after = hub.weight_bytes_served()
    return {
        "cut_file_bytes": size,
        "cut_refetched_bytes": refetched,
        "cut_refetched_percent": round(100 * refetched / size, 2),
        "cut_target_percent": 5,
        "stopped_weight_bytes_kept": kept,
        "stopped_then_rerun_refetched_percent": round(
            100 * max(0, kept + served_after - weights) / weights, 2
        ),
        "stopped_then_rerun_note": "a stop mid-file keeps blobs/<etag>.incomplete; the "
        "rerun asks for the rest with a range request",
    }


def bench_library() -> dict:
    home = Path(tempfile.mkdtemp(prefix="macmesh-bench-library-"))
    saved = dict(os.environ)
    hub = FakeHub().start()
    try:
        _environment(home, hub)
        return {
            "listing_200": bench_listing(home),
            "plan_100_files": bench_plan_from_headers(home, hub),
            "download_vs_plain_http": bench_download(home),
            "resume": bench_resume(home, hub),
        }
    finally:
        hub.stop()
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(bench_library(), indent=2))
