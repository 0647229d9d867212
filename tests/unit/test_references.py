"""Every reference in the repository leads to something in the repository.

The design the code cites is ``docs/design.md`` and the macOS formats the probe reads
are ``docs/macos-outputs.md``; a file that cites a document kept outside the repository
(the first design page, the shared folder beside the checkout, a bare page of its
reference folder) points a reader at something they do not have. The names are built
from parts here, so this guard cites nothing outside the repository itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The outside names, from parts. Case-sensitive: docs/design.md is the design's own page.
OLD_DESIGN = "DESIGN" + ".md"
SHARED = "shared"
OUTSIDE = re.compile(
    rf"{re.escape(OLD_DESIGN)}|\.\./{SHARED}\b|/work/{SHARED}\b"
    r"|(?<![\w./-])reference/[\w.-]+\.md"
)


def _tracked_files() -> list[Path]:
    """The files git tracks (what a clone holds), as paths under ROOT."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return [ROOT / name for name in out.split("\0") if name]


def _citations(text: str) -> list[str]:
    return [
        f"{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]


@pytest.mark.parametrize(
    "line",
    [
        f"core never imports Qt ({OLD_DESIGN} rule 1)",
        f"The starting map is `../{SHARED}/{OLD_DESIGN}`",
        f"see ../{SHARED}/reference for the formats",
        f"Formats: ``/work/{SHARED}/reference/macos-outputs.md``",
        "Formats: " + "reference/" + "macos-outputs.md, sections",
        "MLX's documented formats (" + "reference/" + "mlx-distributed.md).",
        f'"""Collect facts in one round trip ({OLD_DESIGN} section 5)."""',
    ],
)
def test_an_outside_citation_is_caught(line: str) -> None:
    assert _citations(f"first line\n{line}\n") == [f"2: {line}"]


@pytest.mark.parametrize(
    "line",
    [
        "core never imports Qt (docs/design.md, rule 1)",
        "(docs/design.md, Probing)",
        "the shared modules at core/'s root depend on no stage",
        f"../{SHARED}ir is another name",
        "Formats: ``docs/macos-outputs.md``, section",
        "tests/fixtures/reference/answers.md",
    ],
)
def test_an_inside_citation_passes(line: str) -> None:
    assert _citations(line) == []


def test_no_tracked_file_cites_a_file_outside_the_repository() -> None:
    files = _tracked_files()
    assert ROOT / "docs" / "architecture.md" in files  # the listing is the real one
    found = []
    for path in files:
        if not path.is_file():
            continue  # a deleted file is not in a clone
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary: icons, screenshots
        found += [f"{path.relative_to(ROOT)}:{hit}" for hit in _citations(text)]
    assert not found, "cite docs/design.md (by rule or section) instead:\n" + "\n".join(found)


def test_the_design_page_has_the_rules_and_sections_the_code_cites() -> None:
    """Every "docs/design.md, rule N" or ", Section" cited in a tracked file exists."""
    page = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    rules = set(re.findall(r"^(\d+)\. \*\*", page, flags=re.MULTILINE))
    sections = set(re.findall(r"^## (\w+)", page, flags=re.MULTILINE))
    cited = re.compile(r"docs/design\.md(?:'s|,|:)\s+(rule\s+(\d+)|(?:the\s+)?([A-Z]\w+))")
    missing = []
    for path in _tracked_files():
        if not path.is_file() or path.suffix not in {".py", ".md", ".toml"}:
            continue
        text = path.read_text(encoding="utf-8")
        for match in cited.finditer(text.replace("\n", " ")):
            rule, section = match.group(2), match.group(3)
            if (rule and rule not in rules) or (section and section not in sections):
                missing.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
    assert rules >= {str(n) for n in range(1, 10)}
    assert not missing, "cited but not in docs/design.md:\n" + "\n".join(missing)


def test_the_formats_page_has_the_sections_cited() -> None:
    """Every ``section "X"`` cited beside docs/macos-outputs.md is one of its headings."""
    page = (ROOT / "docs" / "macos-outputs.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^## (.+)$", page, flags=re.MULTILINE))
    cited = re.compile(r'\bsections? ((?:"[^"]+"(?:,? and |, )?)+)')
    checked, missing = 0, []
    for path in _tracked_files():
        if not path.is_file() or path.suffix not in {".py", ".md"}:
            continue
        text = path.read_text(encoding="utf-8")
        if "docs/macos-outputs.md" not in text or path == Path(__file__):
            continue
        for match in cited.finditer(re.sub(r"\s+", " ", text)):
            for name in re.findall(r'"([^"]+)"', match.group(1)):
                checked += 1
                if name not in headings:
                    missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert checked >= 10  # the fixtures' PROVENANCE.md files cite it
    assert not missing, "cited but not in docs/macos-outputs.md:\n" + "\n".join(missing)
