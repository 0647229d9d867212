"""Options several commands share, spelled once."""

from __future__ import annotations

import argparse

from core.plan.split import parse_split


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
