"""Each parser against the fixtures (values checked by hand against PROVENANCE.md) and the
reference page's literals, then against garbage and truncation: never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.cluster.probe import parsers as p
from core.cluster.probe.profiler import (
    Hardware,
    PeerMac,
    Processors,
    Thunderbolt,
    parse_hardware,
    parse_thunderbolt,
)
from core.cluster.probe.sections import Unknown
from tests.fixtures.macos.hosts import ROOT

GB = 1 << 30


def fixture(path: str) -> str:
    return (ROOT / path).read_text()


# --- sw_vers, sysctl, uname ---------------------------------------------------------------


def test_sw_vers_reference_literal() -> None:
    text = "ProductName:\t\tmacOS\nProductVersion:\t\t26.2\nBuildVersion:\t\t25C56\n"
    assert p.parse_sw_vers(text) == p.MacOSVersion("26.2", "25C56", 26, 2, "macOS")


@pytest.mark.parametrize(
    ("path", "version", "build", "major", "minor"),
    [
        ("pair27/studio-e/sw_vers", "27.0", "26A154", 27, 0),
        ("dock/mbp-m/sw_vers", "26.1", "25B78", 26, 1),
    ],
)
def test_sw_vers_fixtures(path: str, version: str, build: str, major: int, minor: int) -> None:
    assert p.parse_sw_vers(fixture(path)) == p.MacOSVersion(version, build, major, minor, "macOS")


def test_sw_vers_with_a_patch_version_and_without_a_build() -> None:
    parsed = p.parse_sw_vers("ProductVersion:\t15.7.1\n")
    assert (parsed.major, parsed.minor, parsed.build) == (15, 7, None)


def test_sysctl_values_one_a_line() -> None:
    assert p.parse_sysctl_hw(fixture("mesh4/studio-a/sysctl")) == p.SysctlHardware(
        549755813888, "Mac15,14", "Apple M3 Ultra"
    )
    assert p.parse_sysctl_hw(fixture("mini-tb4/mini-g/sysctl")) == p.SysctlHardware(
        32 * GB, "Mac16,10", "Apple M4"
    )


def test_sysctl_name_value_form_and_a_missing_key() -> None:
    text = (
        "hw.model: Mac15,14\nhw.memsize: 103079215104\nmachdep.cpu.brand_string: Apple M3 Ultra\n"
    )
    assert p.parse_sysctl_hw(text) == p.SysctlHardware(103079215104, "Mac15,14", "Apple M3 Ultra")
    # an unknown key is left out, not printed empty: values are found by their shape
    assert p.parse_sysctl_hw("103079215104\nApple M3 Ultra\n") == p.SysctlHardware(
        103079215104, None, "Apple M3 Ultra"
    )


def test_uname() -> None:
    kernel = p.parse_uname(fixture("pair27/studio-f/uname"))
    assert kernel == p.Kernel("Darwin", "26.0.0") and kernel.major == 26


# --- networksetup, ifconfig ---------------------------------------------------------------


def test_networksetup_maps_thunderbolt_ports_to_interfaces() -> None:
    ports = p.parse_networksetup(fixture("mesh4/studio-a/networksetup"))
    assert ports.thunderbolt() == {1: "en2", 2: "en3", 3: "en4", 4: "en5", 5: "en6", 6: "en7"}
    assert ports.bridge == "bridge0"
    assert ports.ports[0] == p.HardwarePort("Ethernet", "en0", "02:00:00:a1:a1:00")


def test_networksetup_port_numbers_and_interfaces_need_not_be_in_step() -> None:
    ports = p.parse_networksetup(fixture("dock/mbp-m/networksetup"))
    assert ports.thunderbolt() == {1: "en1", 2: "en6", 3: "en2"}


def test_networksetup_stops_at_the_vlan_footer() -> None:
    text = fixture("pair27/studio-e/networksetup") + "Hardware Port: Thunderbolt 9\nDevice: en99\n"
    assert 9 not in p.parse_networksetup(text).thunderbolt()


def test_ifconfig_bridge_active_with_thunderbolt_members() -> None:
    bridge = p.parse_ifconfig_bridge(fixture("bridge/studio-j/ifconfig_bridge0"))
    assert bridge == p.Bridge(exists=True, members=("en2", "en3"), active=True)


def test_ifconfig_bridge_down() -> None:
    bridge = p.parse_ifconfig_bridge(fixture("mesh4/studio-c/ifconfig_bridge0"))
    assert bridge.active is False and bridge.members == tuple(f"en{n}" for n in range(2, 8))


def test_ifconfig_no_bridge() -> None:
    stderr = fixture("bridge/studio-k/ifconfig_bridge0.stderr")
    assert p.parse_ifconfig_bridge("", stderr) == p.Bridge(exists=False)


# --- RDMA ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "enabled"), [("enabled\n", True), ("disabled\n", False)])
def test_rdma_ctl(text: str, enabled: bool) -> None:
    assert p.parse_rdma_ctl(text) == p.RdmaCtl(enabled)


def test_rdma_ctl_anything_else_is_unknown() -> None:
    assert isinstance(p.parse_rdma_ctl("usage: rdma_ctl [enable|disable|status]"), Unknown)


def test_ibv_devices_reference_literal() -> None:
    text = (
        "    device          \t   node GUID\n"
        "    ------          \t----------------\n"
        "    rdma_en2        \t3a71c0d2e4f5ac05\n"
        "    rdma_en3        \t3b71c0d2e4f5ac05\n"
        "    rdma_en4        \t3c71c0d2e4f5ac05\n"
    )
    devices = p.parse_ibv_devices(text)
    assert devices.stack
    assert devices.devices[0] == p.IbvDevice("rdma_en2", "3a71c0d2e4f5ac05")
    assert devices.rdma_names == ("rdma_en2", "rdma_en3", "rdma_en4")


def test_ibv_devices_fixture_lists_out_of_order_devices_sorted() -> None:
    devices = p.parse_ibv_devices(fixture("mesh4/studio-b/ibv_devices"))
    assert devices.rdma_names == tuple(f"rdma_en{n}" for n in range(2, 8))
    assert fixture("mesh4/studio-b/ibv_devices").splitlines()[2].split()[0] == "rdma_en3"


def test_ibv_devices_header_only_and_no_stack() -> None:
    assert p.parse_ibv_devices(fixture("pair27/studio-f/ibv_devices")) == p.IbvDevices(True, ())
    stderr = fixture("mini-tb4/mini-h/ibv_devices.stderr")
    assert p.parse_ibv_devices("", stderr) == p.IbvDevices(False, ())


def test_ibv_devinfo_port_states() -> None:
    info = p.parse_ibv_devinfo(fixture("mesh4/studio-a/ibv_devinfo"))
    assert info.port_states() == {
        "rdma_en2": "PORT_DOWN",
        "rdma_en3": "PORT_ACTIVE",
        "rdma_en4": "PORT_ACTIVE",
        "rdma_en5": "PORT_ACTIVE",
        "rdma_en6": "PORT_DOWN",
        "rdma_en7": "PORT_DOWN",
    }
    first = info.devices[0]
    assert (first.transport, first.node_guid) == ("Thunderbolt (100)", "02a1:a1a1:a10c:05ac")
    assert first.ports == (p.IbvPort(1, "PORT_DOWN", "Thunderbolt"),)


def test_ibv_devinfo_peer_without_rdma_leaves_the_port_down() -> None:
    info = p.parse_ibv_devinfo(fixture("pair27/studio-e/ibv_devinfo"))
    assert info.port_states()["rdma_en2"] == "PORT_DOWN"


def test_ibv_devinfo_no_devices() -> None:
    stderr = fixture("pair27/studio-f/ibv_devinfo.stderr")
    assert p.parse_ibv_devinfo("", stderr) == p.IbvDevInfo(())


# --- memory, python -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("iogpu.wired_limit_mb: 0\n", None),
        ("iogpu.wired_limit_mb: 458752\n", 458752),
        ("iogpu.wired_limit_mb: 0 -> 458752\n", 458752),
        ("iogpu.wired_limit_mb: 458752 -> 0\n", None),
    ],
)
def test_wired_limit(text: str, limit: int | None) -> None:
    assert p.parse_wired_limit(text) == p.WiredLimit(limit)


def test_wired_limit_unknown_oid() -> None:
    assert isinstance(p.parse_wired_limit("sysctl: unknown oid 'iogpu.wired_limit_mb'"), Unknown)


def test_memory_pressure() -> None:
    assert p.parse_memory_pressure("4\n").label == "critical"
    assert isinstance(p.parse_memory_pressure(""), Unknown)


def test_vm_stat() -> None:
    vm = p.parse_vm_stat(fixture("mesh4/studio-a/vm_stat"))
    pages = 512 * GB // 16384
    assert vm == p.VmStat(16384, int(pages * 0.7), pages // 10, pages // 100)
    assert vm.available_bytes == (int(pages * 0.7) + pages // 10 + pages // 100) * 16384


def test_vm_stat_published_capture() -> None:
    text = (
        "Mach Virtual Memory Statistics: (page size of 16384 bytes)\n"
        "Pages free:                              210701.\n"
        "Pages active:                            145339.\n"
        "Pages inactive:                          138263.\n"
        "Pages speculative:                         5411.\n"
        '"Translation faults":                 553113127.\n'
    )
    assert p.parse_vm_stat(text) == p.VmStat(16384, 210701, 138263, 5411)


def test_python_versions() -> None:
    versions = p.parse_python_versions(fixture("pair27/studio-f/python.json"))
    assert versions == p.PythonVersions("3.9.6", "/usr/bin/python3", None, None)
    chatty = "sitecustomize says hi\n" + fixture("mesh4/studio-a/python.json")
    assert p.parse_python_versions(chatty).mlx == "0.32.4"
    deep = '{"python": ' + "[" * 100_000 + "]" * 100_000 + "}\n"  # RecursionError in json
    assert p.parse_python_versions(deep + chatty).mlx == "0.32.4"
    assert isinstance(p.parse_app_version(deep), Unknown)


# --- system_profiler ----------------------------------------------------------------------


def test_hardware_overview() -> None:
    assert parse_hardware(fixture("mesh4/studio-a/system_profiler.json")) == Hardware(
        chip="Apple M3 Ultra",
        memory_bytes=549755813888,
        model_id="Mac15,14",
        machine_name="Mac Studio",
        processors=Processors(32, 24, 8),
    )


def test_hardware_older_processor_format() -> None:
    text = (
        '{"SPHardwareDataType": [{"number_processors": "proc 8:4:4", "physical_memory": "16 GB"}]}'
    )
    hardware = parse_hardware(text)
    assert hardware.processors == Processors(8, 4, 4)
    assert hardware.memory_bytes == 16 * GB and hardware.chip is None


def test_thunderbolt_buses_of_a_mesh_node() -> None:
    tb = parse_thunderbolt(fixture("mesh4/studio-a/system_profiler.json"))
    assert [bus.receptacle for bus in tb.buses] == [1, 2, 3, 4, 5, 6]  # sorted, listed 2,1,3..
    idle, cabled = tb.buses[0], tb.buses[1]
    assert (idle.connected, idle.link_gbps, idle.max_gbps, idle.peer) == (False, None, 120, None)
    assert idle.domain_uuid == "A1A1A1A1-0000-4000-8000-000000000001"
    assert (cabled.connected, cabled.link_gbps, cabled.speed) == (True, 80, "80 Gb/s")
    assert cabled.peer == PeerMac(
        "B2B2B2B2-0000-4000-8000-000000000001", "Mac15,14", "Mac Studio", rdma_hint=True
    )


def test_thunderbolt_peer_without_rdma_has_no_hint() -> None:
    tb = parse_thunderbolt(fixture("pair27/studio-e/system_profiler.json"))
    assert tb.buses[0].peer.domain_uuid == "F2F2F2F2-0000-4000-8000-000000000001"
    assert tb.buses[0].peer.rdma_hint is False


def test_thunderbolt_4_link_and_idle_ports() -> None:
    tb = parse_thunderbolt(fixture("mini-tb4/mini-g/system_profiler.json"))
    assert [(b.link_gbps, b.max_gbps) for b in tb.buses] == [(40, None), (None, 40), (None, 40)]
    assert tb.buses[0].peer.model_id == "Mac16,10"


def test_thunderbolt_peer_behind_a_dock_and_a_display_bus_skipped() -> None:
    tb = parse_thunderbolt(fixture("dock/mbp-m/system_profiler.json"))
    assert tb.skipped == 1  # the display's bus has no domain UUID
    assert [bus.receptacle for bus in tb.buses] == [1, 2]
    assert tb.buses[1].peer == PeerMac(
        "0F0F0F0F-0000-4000-8000-000000000001",
        "Mac15,14",
        "Mac Studio",
        rdma_hint=True,
        via=("TS5 Plus",),
    )


def test_thunderbolt_tolerates_odd_entries() -> None:
    text = """{"SPThunderboltDataType": [
        "not a bus",
        {"domain_uuid_key": "aa-bb", "receptacle_1_tag": "oops", "_items": [1, {"_items": "x"}]},
        {"_name": "no uuid"}
    ]}"""
    tb = parse_thunderbolt(text)
    assert tb == Thunderbolt(tb.buses, skipped=1)
    assert tb.buses[0].domain_uuid == "AA-BB" and tb.buses[0].receptacle is None


def test_profiler_text_that_is_not_json() -> None:
    assert isinstance(parse_thunderbolt("system_profiler: error"), Unknown)
    assert isinstance(parse_hardware('{"SPHardwareDataType": '), Unknown)
    assert isinstance(parse_thunderbolt('{"SPHardwareDataType": []}'), Unknown)


# --- tolerance ----------------------------------------------------------------------------

TEXT_PARSERS = {
    "sw_vers": p.parse_sw_vers,
    "sysctl": p.parse_sysctl_hw,
    "networksetup": p.parse_networksetup,
    "ifconfig_bridge0": p.parse_ifconfig_bridge,
    "rdma_ctl": p.parse_rdma_ctl,
    "ibv_devices": p.parse_ibv_devices,
    "ibv_devinfo": p.parse_ibv_devinfo,
    "iogpu": p.parse_wired_limit,
    "vm_pressure": p.parse_memory_pressure,
    "vm_stat": p.parse_vm_stat,
    "uname": p.parse_uname,
    "meminfo": p.parse_meminfo,
    "python.json": p.parse_python_versions,
    "system_profiler.json": parse_hardware,
    "system_profiler.json#tb": parse_thunderbolt,
}
FIXTURE_FILES = sorted(
    (name, path)
    for name in TEXT_PARSERS
    for path in ROOT.glob(f"*/*/{name.split('#')[0]}")
    if path.is_file()
)


@pytest.mark.parametrize("name", sorted(TEXT_PARSERS))
def test_every_parser_has_fixtures(name: str) -> None:
    assert any(n == name for n, _ in FIXTURE_FILES)


@pytest.mark.parametrize(("name", "path"), FIXTURE_FILES, ids=lambda v: str(v)[-40:])
def test_every_fixture_parses_to_a_value(name: str, path: Path) -> None:
    assert not isinstance(TEXT_PARSERS[name](path.read_text()), Unknown)


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(TEXT_PARSERS)), text=st.text())
def test_garbage_never_raises(name: str, text: str) -> None:
    TEXT_PARSERS[name](text)


@pytest.mark.parametrize("name", sorted(TEXT_PARSERS))
def test_plain_garbage_is_unknown(name: str) -> None:
    assert isinstance(TEXT_PARSERS[name]("zsh: segmentation fault\n\x00\ufffd"), Unknown)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_truncated_and_mangled_fixtures_never_raise(data: st.DataObject) -> None:
    name, path = data.draw(st.sampled_from(FIXTURE_FILES))
    text = path.read_text()
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    junk = data.draw(st.text(max_size=20))
    for variant in (text[:end], text[start:end], text[:start] + junk + text[end:]):
        result = TEXT_PARSERS[name](variant)
        assert result is not None


def test_meminfo_gives_total_and_available_bytes() -> None:
    info = p.parse_meminfo(
        "MemTotal:       24683584 kB\nMemFree:        23405016 kB\n"
        "MemAvailable:   23847572 kB\nHugePages_Total:       0\n"
    )
    assert info == p.MemInfo(24683584 * 1024, 23847572 * 1024)
    assert p.parse_meminfo("MemTotal:  1024 kB\n") == p.MemInfo(1 << 20, None)
    assert isinstance(p.parse_meminfo("cat: /proc/meminfo: No such file"), Unknown)


def test_df_reads_the_available_column_of_the_posix_row_or_says_why_not() -> None:
    from core.cluster.probe.parsers import DiskFree, parse_df

    text = (
        "Filesystem     1024-blocks       Used  Available Capacity  Mounted on\n"
        "map auto_home    1942700360  664409160 1258291200    35%    /System/Volumes/Data\n"
    )
    assert parse_df(text) == DiskFree(1258291200 * 1024)
    missing = parse_df("df: .: No such file or directory\n")
    assert isinstance(missing, Unknown) and "No such file" in missing.reason
