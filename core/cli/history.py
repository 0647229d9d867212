"""``macmesh history``: the runs kept (chats, comparisons, link tests), newest first.

``--json`` writes everything (series included), ``--csv`` the series one sample a row
(with each run's model, nodes and strategy); ``--limit N`` the newest N; ``--output
FILE`` writes the export to a new file (made with the history's mode, 0600, never
through a link; one already there is refused) rather than to stdout. A damaged
history is read around and kept where it is: how many runs could not be read, and from
which file, is one line on stderr, and an export with runs missing exits 1.
"""

from __future__ import annotations

import argparse
import io
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from core.jsonfile import FileProblem, create_exclusive
from core.paths import FolderError
from core.run.measure.history import History, RunRecord, history_mode


def history_cli(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="macmesh history", description=__doc__.split("\n")[0])
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="everything, as one JSON document")
    form.add_argument("--csv", action="store_true", help="the series, one sample a row")
    parser.add_argument("--limit", type=int, help="only the newest N runs")
    parser.add_argument(
        "--output", "-o", metavar="FILE", help="write the export to FILE, a new file (0600)"
    )
    args = parser.parse_args(argv)
    if args.output and not (args.json or args.csv):
        parser.error("--output writes an export: add --json or --csv")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be 1 or more")
    try:
        history = History()
    except (FolderError, OSError) as error:
        print(f"macmesh: {error}", file=sys.stderr)
        return 2
    try:
        runs = history.runs(args.limit)
    except FileProblem as problem:  # a FIFO, a folder: named, never waited on
        print(f"macmesh: the run history {problem}", file=sys.stderr)
        return 2
    except (FolderError, OSError, sqlite3.Error) as error:
        print(
            f"macmesh: the run history {history.path} could not be read: {error}", file=sys.stderr
        )
        return 2
    ids = [run.id for run in runs if run.id is not None]
    if args.output:
        try:
            made = create_exclusive(Path(args.output), history_mode(history.path))
        except FileExistsError:
            print(f"macmesh: {args.output} is already there: remove it, or choose another "
                  "name", file=sys.stderr)  # fmt: skip
            return 2
        except OSError as error:
            print(f"macmesh: {args.output}: {error.strerror or error}", file=sys.stderr)
            return 2
        out = io.TextIOWrapper(made, encoding="utf-8", newline="" if args.csv else None)
    try:
        if args.json:
            history.export_json(out, ids)
            out.write("\n")
        elif args.csv:
            history.export_csv(out, ids)
    except (OSError, sqlite3.Error) as error:
        print(
            f"macmesh: the run history {history.path} could not be read: {error}", file=sys.stderr
        )
        return 2
    finally:
        if args.output:
            out.close()
    if history.damage is not None:  # said, never passed off as "No runs yet" or a whole export
        exported = " The export holds every other run." if args.json or args.csv else ""
        print(f"macmesh: {history.damage}{exported}", file=sys.stderr)
        if args.json or args.csv:
            return 1
    if args.json or args.csv:
        return 0
    if not runs:
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
