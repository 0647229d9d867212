"""Which models a node may fetch from the Hub itself: a cache snapshot's repo and commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.remote.hubfetch import HubOrigin, hub_endpoint, hub_host, hub_origin

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_a_cache_snapshot_names_its_repo_and_commit(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--mlx-community--Qwen3-4B-4bit" / "snapshots" / SHA
    assert hub_origin(snapshot) == HubOrigin("mlx-community/Qwen3-4B-4bit", SHA)
    assert hub_origin(str(snapshot) + "/") == HubOrigin("mlx-community/Qwen3-4B-4bit", SHA)


@pytest.mark.parametrize(
    "path",
    [
        "/Users/me/models/Qwen3-4B-4bit",  # a dropped folder
        f"/hub/models--noorg/snapshots/{SHA}",  # no organisation
        f"/hub/datasets--org--name/snapshots/{SHA}",  # not a model
        "/hub/models--org--name/snapshots/main",  # not a commit
        f"/hub/models--org--name/blobs/{SHA}",
        f"/hub/models--org--a--b/snapshots/{SHA}",
    ],
)
def test_anything_else_is_not_from_the_hub(path: str) -> None:
    assert hub_origin(path) is None


def test_the_endpoint_is_this_macs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert hub_endpoint() == "https://huggingface.co" and hub_host() == "huggingface.co"
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:8123/")
    assert hub_endpoint() == "http://127.0.0.1:8123" and hub_host() == "127.0.0.1:8123"
