"""``macmesh``: the app with no arguments, or a subcommand.

The composition root: the one module that knows both the GUI and the
headless commands. It imports Qt only when a window is wanted, so the
subcommands run on machines without a display.

    macmesh                      the window (or, with no display, the headless demo)
    macmesh demo [--headless]    the demo cluster (--replay FILE.zip: a capture's Macs)
    macmesh plan MODEL ...       what fits where, and why
    macmesh run MODEL --hosts .. the model on real Macs over SSH: one answer, then stop
    macmesh nodes [--json]       the Macs (and Linux hosts) found, probed, and their cables
    macmesh doctor [--json] [--capture FILE.zip]  every setup problem, each with its fix
    macmesh serve --demo | MODEL --hosts ..  the cluster as an OpenAI-compatible API
    macmesh linktest --demo|--hosts ..  every link's latency and bandwidth, through MLX
    macmesh compare [MODEL] --demo|--hosts ..  one Mac against the cluster, side by side
    macmesh finetune [MODEL] --data PATH --demo|--hosts ..  LoRA on the cluster: an adapter
    macmesh history [--json|--csv]  the runs kept, newest first
    macmesh keys new LABEL | list | revoke ID  the API keys (the window's and serve's)
    macmesh models [...]         the models on this Mac; Hugging Face search and download
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from core import __version__
from core.paths import FolderError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="macmesh",
        description="Turn the Macs on a desk into one MLX cluster.",
        epilog="With no command, MacMesh opens its window "
        "(options: --demo, --theme light|dark, --interfaces IF,...).",
    )
    parser.add_argument("--version", action="version", version=f"macmesh {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    from core.cli.demo import add_arguments

    demo = commands.add_parser("demo", help="run the demo cluster on this machine")
    add_arguments(demo)
    demo.add_argument(
        "--replay",
        metavar="FILE.zip",
        help="show a capture's Macs (macmesh doctor --capture) as the simulated Macs",
    )
    commands.add_parser("plan", help="what fits where, pipeline or tensor, and why", add_help=False)
    commands.add_parser("run", help="run a model on Macs over SSH, ask once", add_help=False)
    commands.add_parser("nodes", help="the nodes found, their facts and cables", add_help=False)
    commands.add_parser(
        "doctor", help="check this Mac and the nodes: each problem with its fix", add_help=False
    )
    commands.add_parser(
        "linktest", help="every link's latency and bandwidth, through MLX", add_help=False
    )
    commands.add_parser("compare", help="one Mac against the cluster, side by side", add_help=False)
    commands.add_parser("history", help="the runs kept, newest first", add_help=False)
    commands.add_parser("finetune", help="LoRA on the cluster: an adapter", add_help=False)
    commands.add_parser(
        "models",
        help="the models on this Mac; search and download from Hugging Face",
        add_help=False,
    )
    commands.add_parser(
        "serve", help="serve the cluster as an OpenAI-compatible API", add_help=False
    )
    commands.add_parser("keys", help="make, list and revoke API keys", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv)
    except FolderError as error:  # a MACMESH_*_DIR (or the default) that cannot be used
        print(f"macmesh: {error}", file=sys.stderr)
        return 2


def _main(argv: list[str]) -> int:
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        # The window, with its own options (--demo, --theme, --interfaces): skip building
        # the subcommands' parsers (they import numpy).
        return _app(argv)
    if argv and argv[0] == "plan":
        from core.cli.plan import plan_cli

        return plan_cli(argv[1:])
    if argv[0] == "nodes":
        from core.cli.nodes import nodes_cli

        return nodes_cli(argv[1:])
    if argv[0] == "doctor":
        from core.cli.doctor import doctor_cli

        return doctor_cli(argv[1:])
    if argv[0] == "models":
        from core.cli.models import models_cli

        return models_cli(argv[1:])
    if argv[0] == "run":
        from core.cli.run import run_cli

        return run_cli(argv[1:])
    if argv[0] == "serve":
        from core.cli.serve import serve_cli

        return _exit_now(serve_cli(argv[1:]))
    if argv[0] == "linktest":
        from core.cli.linktest import linktest_cli

        return linktest_cli(argv[1:])
    if argv[0] == "compare":
        from core.cli.compare import compare_cli

        return compare_cli(argv[1:])
    if argv[0] == "finetune":
        from core.cli.finetune import finetune_cli

        return finetune_cli(argv[1:])
    if argv[0] == "history":
        from core.cli.history import history_cli

        return history_cli(argv[1:])
    if argv[0] == "keys":
        from core.cli.keys import keys_cli

        return keys_cli(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    return _app(argv)


def _demo(args: argparse.Namespace) -> int:
    from core.cli.demo import run_headless

    replay = ["--replay", args.replay] if args.replay else []
    if replay and args.headless:
        return _bad("macmesh demo: --replay shows a capture in the window; drop --headless")
    if not args.headless:
        gui = _gui_main()
        if gui is not None:
            return gui(["--demo", *replay])
    if replay:
        return _bad("macmesh demo: --replay needs the window, which cannot open here")
    return run_headless(args)


def _bad(message: str) -> int:
    print(message, file=sys.stderr)
    return 2


def _app(argv: list[str]) -> int:
    gui = _gui_main()
    if gui is None:
        # No window yet (or no Qt on this machine): the headless demo stands in.
        from core.cli.demo import demo_cli

        return demo_cli([])
    return gui(argv)


def _gui_main() -> Callable[[list[str]], int] | None:
    """The GUI's entry point, or None when the GUI cannot start here."""
    try:
        from gui.app import main as gui_main
    except ImportError:
        return None
    return gui_main


def _exit_now(code: int) -> NoReturn:
    """``macmesh serve`` has stopped every rank and kept or journaled every answer: exit
    without the interpreter's teardown of mlx-lm's imports (a second or more on a loaded
    machine, which a service manager's stop waits for: issue 33, serve stops in 5 s)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
