"""core.cluster.hosts: what a person may type, the remembered file, tolerance of bad files."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.cluster import hosts as h


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("studio-b.local", h.ManualHost("studio-b.local")),
        ("  Studio-B.Local. ", h.ManualHost("studio-b.local")),
        ("ml@192.168.1.40:2222", h.ManualHost("192.168.1.40", 2222, "ml")),
        ("fe80::1", h.ManualHost("fe80::1")),
        ("[fe80::1%en0]:2200", h.ManualHost("fe80::1%en0", 2200)),
        ("me@[::1]", h.ManualHost("::1", 22, "me")),
        ("build_box", h.ManualHost("build_box")),
        ("@host", h.ManualHost("host")),  # an empty user is no user
    ],
)
def test_parse_host(text: str, expected: h.ManualHost) -> None:
    assert h.parse_host(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "   ", "bad host", "host:port", "host:0", "host:70000", "a..b", "-lead.local",
     "1.2.3.999", "[fe80::1", "[::1]x", "us er@host", "x" * 254],
)  # fmt: skip
def test_parse_host_refuses_what_is_not_a_host(text: str) -> None:
    with pytest.raises(ValueError):
        h.parse_host(text)


def test_str_is_what_parse_reads_back() -> None:
    for host in (
        h.ManualHost("studio.local"),
        h.ManualHost("10.0.0.5", 2222, "ml"),
        h.ManualHost("fe80::1", 2222),
        h.ManualHost("::1", 22, "me"),
    ):
        assert h.parse_host(str(host)) == host


@given(
    st.sampled_from(["studio.local", "10.1.2.3", "fe80::7", "mac-mini"]),
    st.integers(1, 65535),
    st.one_of(st.none(), st.from_regex(r"[a-z_][a-z0-9_.-]{0,15}", fullmatch=True)),
)
def test_round_trip_through_text(host: str, port: int, user: str | None) -> None:
    manual = h.ManualHost(host, port, user)
    assert h.parse_host(str(manual)) == manual


def test_missing_file_is_an_empty_list(tmp_path: Path) -> None:
    assert h.load_hosts(tmp_path / "none.json") == []


def test_default_path_is_in_the_config_dir(tmp_path: Path) -> None:
    assert h.hosts_path() == tmp_path / "config" / "hosts.json"


def test_save_load_round_trip_and_format(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    saved = [h.ManualHost("studio-b.local"), h.ManualHost("192.168.1.40", 2222, "ml")]
    h.save_hosts(saved, path)
    assert h.load_hosts(path) == saved
    assert json.loads(path.read_text()) == {
        "version": 1,
        "hosts": [
            {"host": "studio-b.local", "port": 22, "user": None},
            {"host": "192.168.1.40", "port": 2222, "user": "ml"},
        ],
    }
    assert [p.name for p in tmp_path.iterdir()] == ["hosts.json"]  # no temporary file left


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"hosts": 3}', "", "\xff\xfe"])
def test_corrupt_file_gives_no_hosts_and_says_so(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "hosts.json"
    path.write_text(text, encoding="latin-1")
    with caplog.at_level(logging.WARNING, logger="core.cluster.hosts"):
        assert h.load_hosts(path) == []
    assert str(path) in caplog.text


def test_bad_entries_are_skipped_the_rest_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "hosts.json"
    entries = [
        {"host": "good.local"},
        {"host": "bad host"},
        "not an object",
        {"host": "x.local", "port": "22"},
        {"host": "good.local", "port": 22, "user": "dup"},
        {"host": "10.0.0.9", "port": 2200, "user": None, "note": "newer field"},
    ]
    path.write_text(json.dumps({"version": 2, "hosts": entries}))
    with caplog.at_level(logging.WARNING, logger="core.cluster.hosts"):
        assert h.load_hosts(path) == [h.ManualHost("good.local"), h.ManualHost("10.0.0.9", 2200)]
    assert caplog.text.count("skipping") == 3


def test_host_list_add_replace_remove_and_signal(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    hosts = h.HostList(path)
    seen: list[list[h.ManualHost]] = []
    hosts.changed.connect(seen.append)

    first = hosts.add("studio-b.local")
    hosts.add("ml@10.0.0.5:2222")
    hosts.add(h.ManualHost("studio-b.local", 22, "ada"))  # same host and port: replaced
    assert hosts.hosts() == [
        h.ManualHost("10.0.0.5", 2222, "ml"),
        h.ManualHost("studio-b.local", 22, "ada"),
    ]
    assert h.HostList(path).hosts() == hosts.hosts()  # remembered
    assert hosts.remove(first) is True
    assert hosts.remove(first) is False
    assert h.load_hosts(path) == [h.ManualHost("10.0.0.5", 2222, "ml")]
    assert [len(s) for s in seen] == [1, 2, 2, 1]


def test_a_corrupt_file_is_kept_aside_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    path.write_text("{half a file")
    hosts = h.HostList(path)
    assert hosts.hosts() == []
    hosts.add("studio.local")
    assert (tmp_path / "hosts.json.corrupt").read_text() == "{half a file"
    assert h.load_hosts(path) == [h.ManualHost("studio.local")]


def test_add_refuses_nonsense_and_keeps_the_file(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    hosts = h.HostList(path)
    hosts.add("studio.local")
    before = path.read_text()
    with pytest.raises(ValueError, match="neither a host name nor an IP address"):
        hosts.add("not a host")
    assert path.read_text() == before
