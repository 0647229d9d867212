"""core.settings: defaults, round trip, tolerance of bad files, atomic writes."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from core import jsonfile
from core import settings as s
from core.worker.vocab import ModelSource


def test_missing_file_gives_the_defaults(tmp_path: Path) -> None:
    assert s.load_settings(tmp_path / "none.json") == s.Settings()


def test_default_path_is_in_the_config_dir(tmp_path: Path) -> None:
    # tests/conftest.py points MACMESH_CONFIG_DIR at tmp_path / "config"
    assert s.settings_path() == tmp_path / "config" / "settings.json"


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    saved = s.Settings(
        last_model="/models/x",
        last_strategy="tensor",
        demo_nodes=3,
        demo_on=True,
        max_tokens=64,
        interfaces=("en0",),
    )
    s.save_settings(saved, path)
    assert s.load_settings(path) == saved
    data = json.loads(path.read_text())
    assert data["version"] == s.VERSION
    assert data["interfaces"] == ["en0"]


def test_save_and_load_use_the_config_dir_by_default() -> None:
    s.save_settings(s.Settings(last_strategy="auto"))
    assert s.load_settings().last_strategy == "auto"


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "", "\xff\xfe"])
def test_corrupt_file_falls_back_and_says_so(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "settings.json"
    path.write_text(text, encoding="latin-1")
    with caplog.at_level(logging.WARNING, logger="core.settings"):
        assert s.load_settings(path) == s.Settings()
    assert "default settings" in caplog.text


def test_a_bad_value_falls_back_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps(
            {"last_strategy": "sideways", "demo_nodes": 9, "max_tokens": True, "last_model": "/m"}
        )
    )
    with caplog.at_level(logging.WARNING, logger="core.settings"):
        loaded = s.load_settings(path)
    assert loaded.last_model == "/m"
    assert loaded.last_strategy == "pipeline"
    assert loaded.demo_nodes == 2
    assert loaded.max_tokens == 256
    assert "last_strategy" in caplog.text and "demo_nodes" in caplog.text


def test_demo_on_must_be_a_boolean(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"demo_on": "yes", "demo_nodes": 4}))
    with caplog.at_level(logging.WARNING, logger="core.settings"):
        loaded = s.load_settings(path)
    assert loaded.demo_on is False and loaded.demo_nodes == 4
    assert "demo_on must be true or false" in caplog.text
    assert s.Settings().updated(demo_on=True).demo_on is True


def test_unknown_keys_survive_a_save(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 2, "future": {"a": 1}, "max_tokens": 10}))
    loaded = s.load_settings(path)
    s.save_settings(loaded.updated(max_tokens=20), path)
    data = json.loads(path.read_text())
    assert data["future"] == {"a": 1}
    assert data["max_tokens"] == 20


def test_updated_checks_values() -> None:
    with pytest.raises(ValueError, match="last_strategy"):
        s.Settings().updated(last_strategy="diagonal")
    assert s.Settings().updated(interfaces=["en1"]).interfaces == ("en1",)


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "settings.json"
    s.save_settings(s.Settings(max_tokens=5), path)

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(jsonfile.os, "replace", broken_replace)
    with pytest.raises(OSError):
        s.save_settings(s.Settings(max_tokens=6), path)
    assert s.load_settings(path).max_tokens == 5
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]  # no temp file left


def test_library_folders_round_trip_and_refuse_bad_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "settings.json"
    s.save_settings(s.Settings(library_folders=("/models/a", "/models/b")), path)
    assert s.load_settings(path).library_folders == ("/models/a", "/models/b")
    assert s.Settings().updated(library_folders=["/a", "/a", "/b"]).library_folders == ("/a", "/b")
    with pytest.raises(ValueError, match="library_folders"):
        s.Settings().updated(library_folders="/not/a/list")
    path.write_text('{"library_folders": [1, 2], "max_tokens": 99}')
    loaded = s.load_settings(path)
    assert loaded.library_folders == () and loaded.max_tokens == 99
    assert "library_folders" in caplog.text


def test_model_source_round_trips_and_refuses_other_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "settings.json"
    assert s.Settings().model_source == "auto"
    s.save_settings(s.Settings(model_source="this-mac"), path)
    assert s.load_settings(path).model_source == "this-mac"
    assert s.Settings().updated(model_source="hub").model_source == "hub"
    with pytest.raises(ValueError, match="model_source must be one of auto, hub, this-mac"):
        s.Settings().updated(model_source="cloud")
    path.write_text('{"model_source": "cloud"}')
    assert s.load_settings(path).model_source == "auto"
    assert "model_source" in caplog.text


def test_model_source_reads_as_the_enum_and_is_written_as_its_plain_value(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    s.save_settings(s.Settings().updated(model_source="hub"), path)
    assert json.loads(path.read_text())["model_source"] == "hub"  # on disk: the same string
    assert s.load_settings(path).model_source is ModelSource.HUB
    assert s.MODEL_SOURCES == ("auto", "hub", "this-mac")  # the command line's choices


def test_macmesh_run_takes_model_source_and_refuses_other_values() -> None:
    import argparse

    from core.cli.run import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["m", "--hosts", "a", "--model-source", "this-mac"])
    assert args.model_source == "this-mac"
    assert parser.parse_args(["m", "--hosts", "a"]).model_source is None  # the setting
    with pytest.raises(SystemExit):
        parser.parse_args(["m", "--hosts", "a", "--model-source", "cloud"])
