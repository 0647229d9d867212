"""Splitting the probe's output back into sections, including cut-off and noisy output."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.cluster.probe.script import SECTIONS
from core.cluster.probe.sections import (
    CUT_OFF,
    Section,
    Unknown,
    probe_failure,
    section_problem,
    split_sections,
)
from tests.fixtures.macos.hosts import ROOT, probe_output

STUDIO_A = ROOT / "mesh4" / "studio-a"
OUTPUT = probe_output(STUDIO_A)


def test_every_section_comes_back_with_its_exact_output() -> None:
    sections = split_sections(OUTPUT)
    assert list(sections) == list(SECTIONS)
    assert sections["sw_vers"] == Section(
        "sw_vers", 0, "ProductName:\t\tmacOS\nProductVersion:\t\t26.2\nBuildVersion:\t\t25C56\n", ""
    )
    assert sections["rdma_ctl"].stdout == "enabled\n"
    assert sections["system_profiler"].stdout == (STUDIO_A / "system_profiler.json").read_text()


def test_a_login_banner_and_trailing_noise_are_ignored() -> None:
    noisy = "Last login: Tue Dec  1 10:00:00 2026\n@@not a marker@@\n" + OUTPUT + "logout\n"
    assert split_sections(noisy) == split_sections(OUTPUT)


def test_output_cut_inside_a_section_keeps_the_earlier_ones_and_marks_the_cut_one() -> None:
    cut = OUTPUT.index("enabled\n")  # inside rdma_ctl's stdout
    sections = split_sections(OUTPUT[: cut + 3])
    assert all(sections[name].complete for name in SECTIONS[: SECTIONS.index("rdma_ctl")])
    assert sections["rdma_ctl"] == Section("rdma_ctl", None, "ena", "")
    assert "ibv_devices" not in sections
    assert section_problem(sections["rdma_ctl"]) == f"rdma_ctl: {CUT_OFF}"
    assert section_problem(sections.get("ibv_devices"), "ibv_devices") == (
        "ibv_devices: not in the probe output"
    )


def test_output_cut_inside_stderr_keeps_stdout() -> None:
    text = "@@macmesh-begin ibv_devices@@\n\n@@macmesh-stderr ibv_devices@@\nNo IB dev"
    assert split_sections(text)["ibv_devices"] == Section("ibv_devices", None, "", "No IB dev")


def test_a_new_begin_marker_closes_an_unfinished_section_as_cut_off() -> None:
    text = (
        "@@macmesh-begin a@@\nhalf\n"
        "@@macmesh-begin b@@\nx\n@@macmesh-stderr b@@\n\n@@macmesh-end b rc=0@@\n"
    )
    sections = split_sections(text)
    assert sections["a"] == Section("a", None, "half\n", "")
    assert sections["b"] == Section("b", 0, "x", "")


def test_problems_name_the_command_and_why() -> None:
    assert section_problem(
        Section("rdma_ctl", 127, "", "macmesh-probe: rdma_ctl: command not found\n")
    ) == ("rdma_ctl: command not found")
    stub = "macmesh-probe: /usr/bin/python3 is Apple's installer stub (no Command Line Tools)\n"
    assert section_problem(Section("python", 127, "", stub)) == (
        "python: /usr/bin/python3 is Apple's installer stub (no Command Line Tools)"
    )
    assert section_problem(Section("system_profiler", 124, "", "")) == "system_profiler: timed out"
    assert section_problem(Section("ifconfig_bridge0", 1, "", "no bridge")) is None


def test_a_fatal_line_is_the_whole_probes_failure() -> None:
    text = "@@macmesh-fatal cannot create a temporary folder in /tmp@@\n"
    assert probe_failure(text) == "cannot create a temporary folder in /tmp"
    assert split_sections(text) == {}
    assert probe_failure(OUTPUT) is None


def test_unknown_is_falsy_so_it_is_never_mistaken_for_a_fact() -> None:
    assert not Unknown("why")
    assert Unknown("why").reason == "why"


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(OUTPUT)))
def test_any_truncation_keeps_complete_sections_intact(cut: int) -> None:
    whole = split_sections(OUTPUT)
    cut_sections = split_sections(OUTPUT[:cut])
    assert sum(not s.complete for s in cut_sections.values()) <= 1
    for name, section in cut_sections.items():
        assert section == whole[name] or section.rc is None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_garbage_never_raises(text: str) -> None:
    sections = split_sections(text)
    assert all(isinstance(s, Section) for s in sections.values())
    probe_failure(text)
