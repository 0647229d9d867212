"""Options several commands share, spelled once."""

from __future__ import annotations

import argparse

from core.plan.split import parse_split
from core.tune.adapters import AdapterError, find_adapter


def add_split_argument(parser: argparse.ArgumentParser) -> None:
    """``--split N,N,...``: a pipeline split set by hand (``plan``, ``run``, ``demo``,
    ``compare``)."""
    parser.add_argument(
        "--split",
        metavar="N,N,...",
        help="pipeline layers per Mac by hand, in the plan's rank order (e.g. 18,12)",
    )


def split_of(args: argparse.Namespace) -> tuple[int, ...] | None:
    """The split the arguments give, or None; ValueError with the reason for a typo."""
    return parse_split(args.split) if args.split else None


def add_adapter_argument(parser: argparse.ArgumentParser, help_text: str | None = None) -> None:
    """``--adapter FOLDER|NAME``: an adapter folder, or a trained adapter's name (``demo``,
    ``run``, ``compare``); a name that is neither stops the command in one line."""
    parser.add_argument(
        "--adapter",
        type=_adapter,
        metavar="FOLDER|NAME",
        help=help_text
        or "an adapter: its folder, or the name `macmesh finetune` gave it (base + adapter)",
    )


def _adapter(text: str) -> str:
    try:
        return str(find_adapter(text))
    except AdapterError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
