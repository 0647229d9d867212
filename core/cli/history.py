"""``macmesh history``: the runs kept (chats, comparisons, link tests), newest first.

``--json`` writes everything (series included), ``--csv`` the series one sample a row
(with each run's model, nodes and strategy); ``--limit N`` the newest N.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from core.paths import FolderError
from core.run.measure.history import History, RunRecord


def history_cli(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="macmesh history", description=__doc__.split("\n")[0])
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="everything, as one JSON document")
    form.add_argument("--csv", action="store_true", help="the series, one sample a row")
    parser.add_argument("--limit", type=int, help="only the newest N runs")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be 1 or more")
    try:
        history = History()
        runs = history.runs(args.limit)
    except (FolderError, OSError, sqlite3.Error) as error:
        print(f"macmesh: {error}", file=sys.stderr)
        return 2
    if history.notice:  # a damaged file set aside: said, not passed off as "No runs yet"
        print(f"macmesh: {history.notice}", file=sys.stderr)
    ids = [run.id for run in runs if run.id is not None]
    if args.json:
        history.export_json(out, ids)
        out.write("\n")
    elif args.csv:
        history.export_csv(out, ids)
    elif not runs:
        out.write("No runs yet: start one in the window, or `macmesh demo --headless`.\n")
    else:
        for run in runs:
            out.write(describe(run) + "\n")
    return 0


def describe(run: RunRecord) -> str:
    """One line: when, what, where and the headline figure: the record's own
    (``RunRecord.headline``), the line the History window leads with (a demo compare's:
    the estimate for the real Macs, not the simulated speedup)."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.started))
    where = f"{run.strategy} on {', '.join(run.nodes)}"
    headline = run.headline()
    return f"#{run.id}  {when}  {run.kind:<8} {run.model}: {where}; {headline}".rstrip("; ")
