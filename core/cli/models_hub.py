"""``macmesh models search`` and ``macmesh models download``: Hugging Face from the terminal.

Search lists the Hub's models (mlx-community by default, by downloads) with their size
and whether each fits on the Macs given with ``--node`` (else this machine), from the
safetensors headers alone. Download fills the Hugging Face cache with a progress bar on a
terminal (a line per tenth otherwise); Ctrl-C stops it, keeping the finished files, and
running it again resumes.
"""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path
from typing import Any, TextIO

from core.cli.interrupt import INTERRUPTED, first_interrupt_only
from core.cli.plan import parse_node, this_machine
from core.library.download import DownloadCancelled, DownloadProgress, download_model
from core.library.fit import fit
from core.library.hub import (
    DEFAULT_AUTHOR,
    HubError,
    HubModel,
    header_copy,
    interruptible,
    read_header_copy,
    repo_id_of,
    revision_of,
)
from core.model.info import ModelError, read_model_info
from core.plan.memory import Node, PlanOptions
from core.run.planning import chat_options
from core.units import bytes_per_s, count, duration, size

MAX_LIMIT = 100
STOP_WAIT_S = 5.0  # after a Ctrl-C, how long the download is given to stop cleanly


def _exit_code(stop: SystemExit) -> int:
    return stop.code if isinstance(stop.code, int) else 2


def search_cli(argv: list[str], out: TextIO, err: TextIO) -> int:
    parser = argparse.ArgumentParser(
        prog="macmesh models search",
        description="Search Hugging Face for models (by downloads), with each one's size and "
        "whether it fits, planned from its safetensors headers (nothing is downloaded).",
    )
    parser.add_argument("query", help="words in the model's name")
    parser.add_argument("--limit", type=int, default=10, help=f"results, 1-{MAX_LIMIT} (10)")
    parser.add_argument(
        "--author",
        default=DEFAULT_AUTHOR,
        help=f"the organisation (default {DEFAULT_AUTHOR}; '' for everyone)",
    )
    parser.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NAME:MEM_GB[:WIRED_MB]",
        help="a Mac to plan on (repeat); default this machine",
    )
    parser.add_argument("--json", action="store_true", help="one JSON list")
    try:
        args = parser.parse_args(argv)
        if not 1 <= args.limit <= MAX_LIMIT:
            parser.error(f"--limit must be 1 to {MAX_LIMIT}")
        try:
            nodes = [parse_node(text) for text in args.node] or [this_machine()]
        except ValueError as error:
            parser.error(f"--node {error}")
    except SystemExit as stop:
        return _exit_code(stop)
    try:
        found = _search(args.query, args.author, args.limit)
        copies = interruptible(lambda: _header_copies(found))
    except HubError as error:
        err.write(f"macmesh models search: {error}\n")
        return 2
    except KeyboardInterrupt:
        err.write("macmesh: interrupted; the search stopped\n")
        return INTERRUPTED
    options = chat_options()  # what a Start plans with: the badge says the same
    rows = [
        _with_fit(model, copy, nodes, options) for model, copy in zip(found, copies, strict=True)
    ]
    if args.json:
        out.write(json.dumps(rows, indent=2) + "\n")
        return 0
    if not rows:
        who = f" from {args.author}" if args.author else ""
        out.write(f"No model{who} matches {args.query!r}.\n")
        return 0
    where = ", ".join(f"{n.name} ({size(n.memory_bytes)})" for n in nodes)
    out.write(f"Fit on {where}:\n")
    for row in rows:
        out.write(_row(row) + "\n")
    return 0


def _search(query: str, author: str, limit: int) -> list[HubModel]:
    from core.library.hub import search_models

    return search_models(query, author=author or None, limit=limit)


def _header_copies(found: list[HubModel]) -> list[tuple[str, Path, int] | HubError]:
    """Every model's header copy, four at a time over the network. Daemon threads, not a
    pool: after a Ctrl-C the command ends at once, not when the last request does."""
    results: list[tuple[str, Path, int] | HubError | None] = [None] * len(found)
    queue = list(enumerate(found))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not queue:
                    return
                index, model = queue.pop(0)
            results[index] = _header_copy(model)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(min(4, len(found)))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return [r if r is not None else HubError("not asked") for r in results]


def _header_copy(model: HubModel) -> tuple[str, Path, int] | HubError:
    try:
        return header_copy(model.repo_id)
    except HubError as error:
        return error


def _with_fit(
    model: HubModel,
    copy: tuple[str, Path, int] | HubError,
    nodes: list[Node],
    options: PlanOptions,
) -> dict[str, Any]:
    row = model.to_dict()
    try:
        if isinstance(copy, HubError):
            raise copy
        info = read_header_copy(*copy)
    except ModelError as error:
        row.update(fit=None, reason=str(error), architecture=None, weight_bytes=None)
        return row
    badge, plan = fit(info, nodes, options=options)
    row.update(
        fit=badge,
        reason=plan.reason,
        architecture=info.architecture,
        quantization=info.quantization_label,
        weight_bytes=info.weight_bytes,
        # the Hub counts a quantized model's packed integers; the headers say how many
        # parameters they hold
        parameters=info.parameter_count,
        size_bytes=row["size_bytes"] or info.bytes_on_disk,
    )
    return row


def _row(row: dict[str, Any]) -> str:
    parts = [row["name"]]
    if row.get("architecture"):
        parts.append(row["architecture"])
    if row.get("parameters"):
        parts.append(f"{count(row['parameters'])} params")
    if row.get("quantization"):
        parts.append(row["quantization"])
    if row.get("size_bytes"):
        parts.append(size(row["size_bytes"]))
    parts.append(f"{row['downloads']:,} downloads")
    verdict = row["fit"] or "cannot plan"
    return " · ".join(parts) + f"  [{verdict}] {row['reason']}"


def download_cli(argv: list[str], out: TextIO, err: TextIO) -> int:
    parser = argparse.ArgumentParser(
        prog="macmesh models download",
        description="Download a model into the Hugging Face cache (where mlx_lm and LM Studio "
        "look too). Ctrl-C stops it; running it again resumes.",
    )
    parser.add_argument("model", help="ORG/NAME, hf:ORG/NAME or a huggingface.co link")
    parser.add_argument("--revision", help="a branch, tag or commit (default main)")
    try:
        args = parser.parse_args(argv)
        repo_id = repo_id_of(args.model)
        if repo_id is None:
            parser.error(f"{args.model!r} is not a Hugging Face model name (ORG/NAME)")
        try:
            revision_of(args.revision)
        except HubError as error:
            parser.error(str(error))
    except SystemExit as stop:
        return _exit_code(stop)
    cancel = threading.Event()
    printer = _ProgressPrinter(err)
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["path"] = download_model(repo_id, args.revision, progress=printer, cancel=cancel)
        except (HubError, DownloadCancelled) as error:
            result["error"] = error
        except BaseException as error:  # shown as one line below, never a traceback
            result["error"] = error

    thread = threading.Thread(target=work, name="download", daemon=True)
    err.write(f"Downloading {repo_id} into the Hugging Face cache…\n")
    thread.start()
    try:
        with first_interrupt_only():
            try:
                while thread.is_alive():
                    thread.join(0.2)
            except KeyboardInterrupt:
                cancel.set()
                # the transfers stop at their next chunk; a request waiting on a silent
                # Hub is left to its own deadline (a daemon thread): the line comes now
                thread.join(STOP_WAIT_S)
                raise
    except KeyboardInterrupt:
        printer.end()
        stopped = result.get("error")
        message = str(stopped) if isinstance(stopped, DownloadCancelled) else "stopped"
        err.write(f"macmesh: interrupted; {message}\n")
        return INTERRUPTED
    printer.end()
    failed = result.get("error")
    if failed is not None:
        err.write(f"macmesh models download: {' '.join(str(failed).split())}\n")
        return 2
    path: Path = result["path"]
    try:
        info = read_model_info(path)
    except ModelError as error:
        err.write(f"macmesh models download: downloaded, but it cannot be used: {error}\n")
        return 2
    out.write(f"{repo_id}: {info.summary()}\n{path}\n")
    return 0


class _ProgressPrinter:
    """A bar redrawn in place on a terminal; elsewhere a line at each tenth. Notes (a
    retry, a resume, a rate limit) always get their own line."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.tty = bool(getattr(err, "isatty", lambda: False)())
        self.shown_tenth = -1
        self.drawn = False
        self.last_text = ""
        self.last_shown = ""
        self.lock = threading.Lock()

    def __call__(self, progress: DownloadProgress) -> None:
        with self.lock:
            if progress.note:
                self._clear()
                self.err.write(f"{progress.note}\n")
            text = self._text(progress)
            self.last_text = text
            if self.tty:
                width = 24
                filled = int(progress.fraction * width)
                self.err.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}\x1b[K")
                self.drawn = True
            else:
                tenth = int(progress.fraction * 10)
                if tenth != self.shown_tenth:
                    self.shown_tenth = tenth
                    self.last_shown = text
                    self.err.write(text + "\n")
            self.err.flush()

    @staticmethod
    def _text(progress: DownloadProgress) -> str:
        parts = [
            f"{progress.fraction:.0%}",
            f"{size(progress.bytes_done)} of {size(progress.bytes_total)}",
            f"{progress.files_done}/{progress.files_total} files",
        ]
        if progress.rate:
            parts.append(bytes_per_s(progress.rate))
        if progress.eta_s is not None and progress.bytes_done < progress.bytes_total:
            parts.append(f"about {duration(progress.eta_s)} left")
        return " · ".join(parts)

    def _clear(self) -> None:
        if self.drawn:
            self.err.write("\r\x1b[K")

    def end(self) -> None:
        """Finish the bar's line; elsewhere, show the last state if it was not shown."""
        with self.lock:
            if self.drawn:
                self.err.write("\n")
                self.drawn = False
            elif not self.tty and self.last_text and self.last_text != self.last_shown:
                self.err.write(self.last_text + "\n")
                self.last_shown = self.last_text
            self.err.flush()
