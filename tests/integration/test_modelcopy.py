"""core.remote.modelcheck and core.remote.modelcopy through a real sshd on loopback hosts
(each with its own cache root)."""

from __future__ import annotations

import dataclasses
import filecmp
import json
import os
import threading
import time
from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.model.manifest import MARKER, HashCache, Manifest, build_manifest, node_manifest
from core.plan.memory import Node, PlanOptions
from core.plan.planner import make_plan
from core.remote import modelcheck, modelcopy
from core.remote import transport as copytransport
from core.remote.targets import Target
from tests.helpers.copying import StopMidCopy, staged_bytes
from tests.helpers.sshd import SSHServer
from tests.helpers.tiny_models import make_tiny_model

GIB = 1 << 30
ADDRESSES = ("127.0.0.2", "127.0.0.3")


@pytest.fixture(autouse=True)
def _hash_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))


def make_target(server: SSHServer, address: str, root: Path, **kw: object) -> Target:
    known = root / "known_hosts"
    if not known.exists():
        root.mkdir(parents=True, exist_ok=True)
        known.write_text(server.known_hosts_lines())
    options = {
        "port": server.port,
        "known_hosts": known,
        "ssh_dir": server.client_dir,
        "cache_root": str(root / f"node-{address}"),
    }
    return Target(f"node-{address}", address, **{**options, **kw})  # type: ignore[arg-type]


@pytest.fixture
def targets(sshd: SSHServer, tmp_path: Path) -> list[Target]:
    return [make_target(sshd, address, tmp_path) for address in ADDRESSES]


@pytest.fixture(scope="module")
def sharded_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four layers in four weight files: a pipeline stage needs only some of them."""
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny-llama", layers=4, shards=4)


@pytest.fixture
def big_model(tmp_path: Path) -> Path:
    """A config and 24 MB of random weights: big enough to stop a copy mid-file."""
    folder = tmp_path / "big-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    (folder / "model.safetensors").write_bytes(os.urandom(24 << 20))
    return folder


def wait_no_leftovers(server: SSHServer) -> None:
    deadline = time.monotonic() + 10
    while server.leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.leftovers() == []


def test_copies_a_model_to_two_hosts_verified(
    targets: list[Target], sharded_model: Path, sshd: SSHServer
) -> None:
    manifest = build_manifest(sharded_model)
    for target in targets:
        assert modelcheck.check(target, manifest).status == "missing"
        events: list[modelcopy.CopyProgress] = []
        result = modelcopy.copy_model(target, manifest, sharded_model, progress=events.append)
        assert result.sent_bytes == manifest.total_bytes
        assert set(result.files_copied) == set(manifest.names)
        folder = Path(modelcheck.remote_model_dir(target, manifest))
        assert folder.name == f"tiny-llama-{manifest.model_id[:12]}"
        assert folder == Path(target.cache_root or "") / "models" / folder.name
        assert all(
            filecmp.cmp(sharded_model / n, folder / n, shallow=False) for n in manifest.names
        )
        assert Manifest.from_json((folder / MARKER).read_text()) == manifest
        assert not Path(f"{folder}.partial").exists()
        assert modelcheck.check(target, manifest).status == "present"
        done = [e.bytes_done for e in events]
        assert done == sorted(done) and events[-1].phase == "verified"
        assert events[-1].bytes_done == events[-1].bytes_total == manifest.total_bytes
        assert all(e.bytes_total == manifest.total_bytes for e in events)
    again = modelcopy.copy_model(targets[0], manifest, sharded_model)
    assert again.sent_bytes == 0 and again.files_copied == ()
    wait_no_leftovers(sshd)


def test_a_pipeline_stage_gets_only_the_files_it_needs(
    targets: list[Target], sharded_model: Path
) -> None:
    nodes = [Node("node-127.0.0.2", 64 * GIB), Node("node-127.0.0.3", 64 * GIB)]
    plan = make_plan(read_model_info(sharded_model), nodes, options=PlanOptions("pipeline"))
    assert plan.strategy == "pipeline" and plan.split == (2, 2)
    whole = build_manifest(sharded_model)
    # Rank 0 runs the last layers (2, 3): files 3 and 4, plus file 1 for the embeddings.
    stage = node_manifest(sharded_model, plan.layers_of(0), manifest=whole)
    weights = {n for n in stage.names if n.endswith(".safetensors")}
    assert weights == {
        "model-00001-of-00004.safetensors",
        "model-00003-of-00004.safetensors",
        "model-00004-of-00004.safetensors",
    }
    assert {"config.json", "tokenizer.json", "model.safetensors.index.json"} <= set(stage.names)
    assert stage.model_id == whole.model_id != stage.id
    target = targets[0]
    result = modelcopy.copy_model(target, stage, sharded_model)
    assert set(result.files_copied) == set(stage.names)
    folder = Path(modelcheck.remote_model_dir(target, whole))
    assert not (folder / "model-00002-of-00004.safetensors").exists()
    assert modelcheck.check(target, stage).status == "present"
    rank1 = node_manifest(sharded_model, plan.layers_of(1), manifest=whole)
    missing = modelcheck.check(target, rank1)
    assert missing.status == "missing" and missing.missing == ("model-00002-of-00004.safetensors",)
    # The plan changed: the same folder gains the other stage's file, nothing is re-sent.
    more = modelcopy.copy_model(target, rank1, sharded_model)
    assert more.files_copied == ("model-00002-of-00004.safetensors",)
    assert more.sent_bytes == whole.entry("model-00002-of-00004.safetensors").size  # type: ignore[union-attr]
    assert modelcheck.check(target, whole).status == "present"


def test_cancel_mid_file_then_resume_resends_almost_nothing(
    targets: list[Target], big_model: Path, sshd: SSHServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = build_manifest(big_model)
    target = targets[0]
    cancel = threading.Event()
    folder = modelcheck.remote_model_dir(target, manifest)
    stop_early = StopMidCopy(monkeypatch, f"{folder}.partial", cancel.set, fraction=1 / 4)

    with pytest.raises(modelcopy.CopyCancelled, match="continues from there"):
        modelcopy.copy_model(target, manifest, big_model, progress=stop_early, cancel=cancel)
    wait_no_leftovers(sshd)
    staged = {f.name: f.stat().st_size for f in Path(f"{folder}.partial").iterdir()}
    arrived = sum(staged.values())
    assert arrived == stop_early.arrived  # nothing was sent after the cancel
    assert 0 < staged["model.safetensors"] < manifest.total_bytes
    state = modelcheck.check(target, manifest)
    assert state.status == "missing" and "model.safetensors" in state.missing

    events: list[modelcopy.CopyProgress] = []
    result = modelcopy.copy_model(target, manifest, big_model, progress=events.append)
    assert result.resumed_bytes == staged["model.safetensors"]
    resent = result.sent_bytes - (manifest.total_bytes - arrived)
    assert resent < 0.05 * arrived
    assert events[0].bytes_done >= arrived  # progress starts from what is already there
    assert events[-1].bytes_done == events[-1].bytes_total
    assert modelcheck.check(target, manifest, verify=True).status == "present"


def test_a_same_size_corrupted_file_is_caught_by_mtime_or_verify_then_repaired(
    targets: list[Target], sharded_model: Path
) -> None:
    """Issue 12, fault 6: a file MacMesh wrote, rewritten with other bytes of the same size."""
    manifest = build_manifest(sharded_model)
    target = targets[1]
    modelcopy.copy_model(target, manifest, sharded_model)
    folder = Path(modelcheck.remote_model_dir(target, manifest))
    marker = json.loads((folder / MARKER).read_text())
    assert [size for size, _ in marker["stat"]] == [e.size for e in manifest.files]
    config = folder / "config.json"
    original = config.read_bytes()
    changed = original.replace(b"llama", b"llamb", 1)
    assert len(changed) == len(original) and changed != original
    before = config.stat()
    config.write_bytes(changed)
    # Its mtime put back: only hashing can tell. The cheap check says what it checked.
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    cheap = modelcheck.check(target, manifest)
    assert cheap.status == "present" and not cheap.verified
    assert "size checked" in modelcheck.describe(cheap)
    verified = modelcheck.check(target, manifest, verify=True)
    assert verified.status == "missing" and verified.damaged == ("config.json",)
    assert "config.json" in verified.reason and "SHA-256" in verified.reason
    repaired = modelcopy.copy_model(target, manifest, sharded_model, damaged=verified.damaged)
    assert repaired.files_copied == ("config.json",) and config.read_bytes() == original
    again = modelcheck.check(target, manifest, verify=True)
    assert again.status == "present" and again.verified
    assert "verified now" in modelcheck.describe(again)
    # Rewritten with a new mtime: the cheap check hashes it, and the copy repairs it.
    config.write_bytes(changed)
    later = config.stat().st_mtime_ns + 1_000_000_000
    os.utime(config, ns=(later, later))
    caught = modelcheck.check(target, manifest)
    assert caught.status == "missing" and caught.damaged == ("config.json",)
    assert modelcopy.copy_model(target, manifest, sharded_model).files_copied == ("config.json",)
    assert config.read_bytes() == original
    assert modelcheck.check(target, manifest).status == "present"


def test_a_different_file_is_refused_never_overwritten(
    targets: list[Target], sharded_model: Path
) -> None:
    manifest = build_manifest(sharded_model)
    target = targets[1]
    modelcopy.copy_model(target, manifest, sharded_model)
    folder = Path(modelcheck.remote_model_dir(target, manifest))
    config = folder / "config.json"
    original = config.read_bytes()
    changed = original.replace(b"llama", b"llamb", 1)
    config.write_bytes(changed)
    # Without the marker (copied by hand, or edited) the hash is always checked.
    (folder / MARKER).unlink()
    different = modelcheck.check(target, manifest)
    assert different.status == "different"
    assert "config.json" in different.reason and "SHA-256" in different.reason
    with pytest.raises(modelcopy.DifferentModel, match="will not overwrite") as caught:
        modelcopy.copy_model(target, manifest, sharded_model)
    assert "rm -rf" in str(caught.value)
    assert config.read_bytes() == changed
    # A file of another size is seen without hashing.
    config.write_bytes(original + b" ")
    result = modelcheck.check(target, manifest)
    assert result.status == "different" and "bytes instead of" in result.reason


def test_a_half_copied_folder_never_passes(targets: list[Target], sharded_model: Path) -> None:
    manifest = build_manifest(sharded_model)
    target = targets[0]
    folder = Path(modelcheck.remote_model_dir(target, manifest))
    staging = Path(f"{folder}.partial")
    staging.mkdir(parents=True)
    for name in manifest.names:  # everything arrived, the move into place never happened
        (staging / name).write_bytes((sharded_model / name).read_bytes())
    assert modelcheck.check(target, manifest).status == "missing"
    # A folder with one file cut short and no marker is not the model either.
    folder.mkdir()
    weights = "model-00001-of-00004.safetensors"
    (folder / weights).write_bytes((sharded_model / weights).read_bytes()[:100])
    assert modelcheck.check(target, manifest).status == "different"
    (folder / weights).unlink()
    # Resuming finds the staged files complete: hashed on the node, moved, nothing sent.
    result = modelcopy.copy_model(target, manifest, sharded_model)
    assert result.sent_bytes == 0 and result.reused_bytes == manifest.total_bytes
    assert modelcheck.check(target, manifest).status == "present"


def test_a_damaged_resumed_prefix_is_sent_again_from_the_start(
    targets: list[Target], sharded_model: Path
) -> None:
    """A staged file whose bytes went bad (one cut short, one complete): the node's hash
    catches both, they are sent once more from 0, and the copy ends verified."""
    manifest = build_manifest(sharded_model)
    target = targets[0]
    staging = Path(modelcheck.remote_model_dir(target, manifest) + ".partial")
    staging.mkdir(parents=True)
    weights = sorted(n for n in manifest.names if n.endswith(".safetensors"))
    short, whole = ((sharded_model / name).read_bytes() for name in weights[:2])
    (staging / weights[0]).write_bytes(b"\0" * (len(short) // 2))
    (staging / weights[1]).write_bytes(b"\0" * len(whole))
    result = modelcopy.copy_model(target, manifest, sharded_model)
    assert result.sent_bytes >= len(short) + len(whole)  # both again, from the start
    assert modelcheck.check(target, manifest, verify=True).status == "present"
    assert not staging.exists()


def test_a_model_copied_by_hand_is_hashed_once_then_marked(
    targets: list[Target], sharded_model: Path
) -> None:
    manifest = build_manifest(sharded_model)
    target = targets[0]
    folder = Path(modelcheck.remote_model_dir(target, manifest))
    folder.mkdir(parents=True)
    for name in manifest.names:
        (folder / name).write_bytes((sharded_model / name).read_bytes())
    assert modelcheck.check(target, manifest).status == "present"
    result = modelcopy.copy_model(target, manifest, sharded_model)
    assert result.sent_bytes == 0
    assert Manifest.from_json((folder / MARKER).read_text()).model_id == manifest.model_id


def test_the_cache_root_defaults_to_the_node_users_cache(
    sshd: SSHServer, tmp_path: Path, sharded_model: Path
) -> None:
    target = make_target(sshd, "127.0.0.3", tmp_path, cache_root=None)
    manifest = build_manifest(sharded_model)
    folder = modelcheck.remote_model_dir(target, manifest)
    assert folder == f"{Path.home()}/.cache/macmesh/models/{modelcheck.folder_name(manifest)}" or (
        folder.endswith(f"/macmesh/models/{modelcheck.folder_name(manifest)}")
    )


def test_a_changed_local_file_is_caught_before_sending(
    targets: list[Target], big_model: Path
) -> None:
    manifest = build_manifest(big_model, cache=HashCache(big_model.parent / "h.json"))
    (big_model / "config.json").write_text(json.dumps({"model_type": "qwen3", "x": 1}))
    with pytest.raises(modelcopy.ModelCopyError, match="changed since it was read"):
        modelcopy.copy_model(targets[0], manifest, big_model)


@pytest.mark.parametrize("fallback", ["paramiko", "no-python"])
def test_fallback_transports_copy_and_verify_too(
    targets: list[Target],
    big_model: Path,
    sshd: SSHServer,
    fallback: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without OpenSSH's client the bytes go over paramiko; without Python on the node, one
    ``cat`` per file, then ``sha256sum`` (``shasum`` on a Mac) checks them there."""
    target = targets[0]
    if fallback == "paramiko":
        monkeypatch.setattr(copytransport.shutil, "which", lambda name: None)
    else:
        target = dataclasses.replace(target, python="/nonexistent/python3")
    manifest = build_manifest(big_model)
    cancel = threading.Event()
    partial = Path(modelcheck.remote_model_dir(target, manifest) + ".partial")
    stop_early = StopMidCopy(monkeypatch, partial, cancel.set, fraction=1 / 4)

    with pytest.raises(modelcopy.CopyCancelled):
        modelcopy.copy_model(target, manifest, big_model, progress=stop_early, cancel=cancel)
    wait_no_leftovers(sshd)
    arrived = staged_bytes(partial)
    assert 0 < arrived == stop_early.arrived < manifest.total_bytes
    result = modelcopy.copy_model(target, manifest, big_model)
    assert result.sent_bytes - (manifest.total_bytes - arrived) < 0.05 * arrived
    assert modelcheck.check(target, manifest, verify=True).status == "present"
    wait_no_leftovers(sshd)
