"""``macmesh models``: the model library from the terminal.

    macmesh models [--json]                               the models on this Mac
    macmesh models search QUERY [--limit N] [--json]      Hugging Face, with size and fit
    macmesh models download ORG/NAME [--revision R]       into the Hugging Face cache

Arguments and printing only: the work is ``core.library``'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from core.library.entries import Source
from core.library.local import hub_cache_dir
from core.library.resolve import DEMO_NOT_YET, library_with_demo
from core.settings import load_settings


def models_cli(argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(argv)
    if argv and argv[0] == "search":
        from core.cli.models_hub import search_cli

        return search_cli(argv[1:], out, err)
    if argv and argv[0] == "download":
        from core.cli.models_hub import download_cli

        return download_cli(argv[1:], out, err)
    parser = argparse.ArgumentParser(
        prog="macmesh models",
        description="The models on this Mac: the Hugging Face cache, LM Studio's folders "
        "and the folders you added; whether MLX can run each, and why not.",
        epilog="More: `macmesh models search QUERY` and `macmesh models download ORG/NAME`.",
    )
    parser.add_argument("--json", action="store_true", help="one JSON list")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 2
    entries = library_with_demo(load_settings().library_folders)
    demo = next((e for e in entries if e.source is Source.DEMO), None)
    if args.json:
        out.write(json.dumps([entry.to_dict() for entry in entries], indent=2) + "\n")
        return 0
    if demo is None:
        out.write(DEMO_NOT_YET + "\n")
    if not entries:
        out.write(
            f"No models found (Hugging Face cache {hub_cache_dir()}, LM Studio's folders). "
            "Find one with `macmesh models search QUERY`.\n"
        )
        return 0
    for entry in entries:
        out.write(entry.summary() + "\n")
    return 0
