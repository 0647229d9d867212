"""``macmesh``: the app with no arguments, or a subcommand (``COMMANDS``, the one list of
them: ``macmesh --help`` prints it).

The composition root: the one module that knows both the GUI and the
headless commands. It imports Qt only when a window is wanted, so the
subcommands run on machines without a display.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from core import __version__
from core.paths import FolderError

# The headless subcommands, each once: name → (module, its function of argv, its help).
# ``demo`` (the window, or --headless) is parsed here.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "plan": ("core.cli.plan", "plan_cli", "what fits where, pipeline or tensor, and why"),
    "run": ("core.cli.run", "run_cli", "run a model on Macs over SSH, ask once"),
    "nodes": ("core.cli.nodes", "nodes_cli", "the nodes found, their facts and cables"),
    "doctor": (
        "core.cli.doctor",
        "doctor_cli",
        "check this Mac and the nodes: each problem with its fix",
    ),
    "linktest": (
        "core.cli.linktest",
        "linktest_cli",
        "every link's latency and bandwidth, through MLX",
    ),
    "compare": ("core.cli.compare", "compare_cli", "one Mac against the cluster, side by side"),
    "history": ("core.cli.history", "history_cli", "the runs kept, newest first"),
    "finetune": ("core.cli.finetune", "finetune_cli", "LoRA on the cluster: an adapter"),
    "models": (
        "core.cli.models",
        "models_cli",
        "the models on this Mac; search and download from Hugging Face",
    ),
    "serve": ("core.cli.serve", "serve_cli", "serve the cluster as an OpenAI-compatible API"),
    "keys": ("core.cli.keys", "keys_cli", "make, list and revoke API keys"),
}


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
    for name, (_module, _function, said) in COMMANDS.items():
        commands.add_parser(name, help=said, add_help=False)
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
    if argv[0] in COMMANDS:
        module, function, _said = COMMANDS[argv[0]]
        command: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
        code = command(argv[1:])
        return _exit_now(code) if argv[0] == "serve" else code
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
