"""Bad files, one line (issue 33, "Why" 9 and item 6): crafted zips for ``demo --replay``
and the test bench's replay, a manifest 100,000 levels deep or listing 300,000 nodes,
``"nodes": 5``, a FIFO as settings, history or capture, a 5,000-digit number from a
probed host's sysctl or in settings.json: each a one-line refusal naming the file (exit 2
where a command reads it), never a traceback or a hang; settings fall back to defaults."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from core.cli.history import history_cli
from core.cluster.capture import CaptureError, read_capture
from core.cluster.probe.facts import parse_probe
from core.cluster.probe.sections import section_problem, split_sections
from core.jsonfile import FileProblem, read_json
from core.settings import Settings, load_settings
from tests.fixtures.macos.hosts import hosts
from tests.fixtures.macos.hosts import probe_output as fixture_output
from tests.helpers.replay import capture_fixture_set

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = {"format": "macmesh-capture", "version": 1, "nodes": [{"alias": "mac-1"}]}


def _zip(path: Path, members: dict[str, str], method: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", method) as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return path


def _patched(path: Path, at: str, field: int, value: bytes) -> Path:
    """``path`` with ``value`` written into field offset ``field`` of the local header
    (``at="local"``) or the central directory entry (``at="central"``) of its last member,
    or over its first data bytes (``at="data"``)."""
    data = bytearray(path.read_bytes())
    info = zipfile.ZipFile(path).infolist()[-1]
    local = info.header_offset
    if at == "data":
        name_len, extra_len = struct.unpack("<HH", data[local + 26 : local + 30])
        start = local + 30 + name_len + extra_len + field
    elif at == "local":
        start = local + field
    else:
        start = data.rindex(b"PK\x01\x02") + field
    data[start : start + len(value)] = value
    path.write_bytes(bytes(data))
    return path


def _both(path: Path, local: int, central: int, value: bytes) -> Path:
    return _patched(_patched(path, "local", local, value), "central", central, value)


def _bad_crc(path: Path) -> Path:
    _zip(path, {"manifest.json": json.dumps(MANIFEST), "nodes/mac-1/a.stdout": "x" * 100})
    return _patched(path, "data", 10, b"y")


def _corrupt_deflate(path: Path) -> Path:
    text = "".join(f"line {n} of the probe\n" for n in range(500))
    members = {"manifest.json": json.dumps(MANIFEST), "nodes/mac-1/a.stdout": text}
    _zip(path, members, zipfile.ZIP_DEFLATED)
    return _patched(path, "data", 5, b"\xff\xff\xff\xff\xff\xff")


def _encrypted(path: Path) -> Path:
    _zip(path, {"manifest.json": json.dumps(MANIFEST), "nodes/mac-1/a.stdout": "x"})
    flags = struct.pack("<H", 0x1)
    return _both(path, 6, 8, flags)


def _unknown_method(path: Path) -> Path:
    _zip(path, {"manifest.json": json.dumps(MANIFEST), "nodes/mac-1/a.stdout": "x"})
    return _both(path, 8, 10, struct.pack("<H", 99))


def _deep(path: Path) -> Path:
    return _zip(path, {"manifest.json": "[" * 100_000 + "]" * 100_000})


def _nodes_five(path: Path) -> Path:
    return _zip(path, {"manifest.json": json.dumps({**MANIFEST, "nodes": 5})})


def _many_nodes(path: Path) -> Path:
    nodes = [{"alias": f"mac-{n}"} for n in range(300_000)]
    return _zip(path, {"manifest.json": json.dumps({**MANIFEST, "nodes": nodes})}, 8)


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


CRAFTED = {
    "bad CRC": (_bad_crc, "a.stdout is damaged (Bad CRC-32"),
    "corrupt deflate": (_corrupt_deflate, "a.stdout is damaged ("),
    "encrypted": (_encrypted, "a.stdout is encrypted; a capture never is"),
    "unknown method": (_unknown_method, "a.stdout is packed with method 99"),
    "100,000 levels": (_deep, "manifest.json is nested more deeply than the 16 levels"),
    '"nodes": 5': (_nodes_five, "manifest.json \"nodes\" is int '5', not a list of nodes"),
    "300,000 nodes": (_many_nodes, "manifest.json lists 300,000 nodes; a capture has at most"),
    "a FIFO": (_fifo, "not a regular file (a FIFO)"),
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_crafted_capture_is_one_line_naming_the_file(tmp_path: Path, case: str) -> None:
    make, said = CRAFTED[case]
    path = make(tmp_path / "capture.zip")
    with pytest.raises(CaptureError) as caught:
        read_capture(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and said in message, message
    assert "\n" not in message
    with pytest.raises(CaptureError):  # the test bench's replay reads it the same way
        capture_fixture_set(path, tmp_path / "set")


@pytest.mark.parametrize("case", ["bad CRC", "100,000 levels", "a FIFO"])
def test_demo_replay_of_a_crafted_capture_exits_2_in_one_line(tmp_path: Path, case: str) -> None:
    make, said = CRAFTED[case]
    path = make(tmp_path / "capture.zip")
    run = subprocess.run(
        [sys.executable, "-m", "gui.cli", "demo", "--replay", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(f"macmesh: --replay: {path}") and said in run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr


def _settings_file(tmp_path: Path, text: str | None) -> Path:
    path = tmp_path / "settings.json"
    if text is None:
        os.mkfifo(path)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested more deeply than the 64 levels allowed"),
        ('{"max_tokens": ' + "9" * 5000 + "}", "more than 40 digits"),
        ('{"demo_nodes": ' + '{"a": ' * 70 + "1" + "}" * 70 + "}", "nested more deeply"),
        (None, "not a regular file (a FIFO)"),
    ],
    ids=["nested", "5000 digits", "nested value", "FIFO"],
)
def test_bad_settings_fall_back_to_the_defaults_with_one_line(
    tmp_path: Path, text: str | None, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = _settings_file(tmp_path, text)
    with caplog.at_level(logging.WARNING):
        assert load_settings(path) == Settings()
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"{path}: ") and said in line and line.endswith("default settings")


def test_a_command_runs_with_bad_settings(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "settings.json").write_text('{"max_tokens": ' + "9" * 5000 + "}")
    run = subprocess.run(
        [sys.executable, "-m", "gui.cli", "history"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MACMESH_CONFIG_DIR": str(config)},
    )
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr


def test_a_fifo_as_the_history_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = Path(os.environ["MACMESH_DATA_DIR"])
    data.mkdir(parents=True)
    os.mkfifo(data / "history.sqlite3")
    assert history_cli([], io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err == (
        f"macmesh: the run history {data / 'history.sqlite3'}: not a regular file, so not a "
        "run history\n"
    )


def test_a_json_file_is_read_only_when_small(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text("[" + "1," * 1000 + "1]")
    with pytest.raises(FileProblem) as caught:
        read_json(path, cap=100)
    assert str(caught.value) == f"{path}: 2,003 bytes, more than the 100 it may have"


def test_a_5000_digit_sysctl_value_is_set_aside_before_conversion() -> None:
    text = fixture_output(hosts("pair27")[0]).replace("137438953472", "7" * 5000, 1)
    assert section_problem(split_sections(text)["sysctl_hw"]) == (
        "sysctl_hw: printed a number of 5,000 digits (at most 40 are read)"
    )
    facts = parse_probe("studio", text)  # no traceback: system_profiler says the memory
    assert facts.memory_bytes == 137438953472 and facts.model_id == "Mac16,9"


def test_a_5000_digit_number_where_nothing_else_says_it_is_an_unknown_with_the_reason() -> None:
    text = fixture_output(hosts("pair27")[0])
    text = re.sub(r"(Pages free:\s+)\d+", lambda m: m[1] + "9" * 5000, text, count=1)
    facts = parse_probe("studio", text)
    assert facts.free_memory_bytes is None
    assert facts.unknowns["free_memory_bytes"] == (
        "vm_stat: printed a number of 5,000 digits (at most 40 are read)"
    )


def test_a_fifo_as_training_data_or_an_adapters_weights_is_one_line(tmp_path: Path) -> None:
    from core.model.safetensors_headers import HeaderError, read_header
    from core.tune.data import DataError, read_data

    data = _fifo(tmp_path / "train.jsonl")
    with pytest.raises(DataError) as caught:
        read_data(data)
    assert str(caught.value) == f"cannot read {data}: not a regular file (a FIFO)"
    weights = _fifo(tmp_path / "adapters.safetensors")
    with pytest.raises(HeaderError) as header:
        read_header(weights)
    assert str(header.value) == "cannot read adapters.safetensors: not a regular file (a FIFO)"
