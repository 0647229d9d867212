"""The frozen app's entry point (PyInstaller runs this as ``__main__``).

In a frozen app ``sys.executable`` is the app binary itself, and the launcher
starts every rank as ``<sys.executable> -m core.worker ...``. So this binary
must also behave like ``python -m core.worker``: that is what makes the demo
cluster run inside the bundle, and what lets MacMesh.app installed on a peer
Mac serve as that node's Python (peers then need nothing else). For the same
reason it runs ``-c CODE`` like ``python -c``: the probe asks a node's Python
for its versions that way, and the model copy's receiver and hash check run
so on the node. Anything else goes to the ``macmesh`` command (the window, or
a subcommand).

The worker branch imports neither Qt nor the GUI, so a rank starts as fast as
``python -m core.worker`` would.
"""

from __future__ import annotations

import runpy
import sys

#: The one module this binary runs like ``python -m``: the worker (other modules are
#: refused: a typo should not silently start something else).
WORKER_MODULE = "core.worker"


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "-m":
        if argv[1] != WORKER_MODULE:
            sys.stderr.write(f"MacMesh: only '-m {WORKER_MODULE}' can be run, not '-m {argv[1]}'\n")
            return 2
        sys.argv = [sys.executable, *argv[2:]]
        # core/worker/__main__.py exits the process itself (os._exit) with the worker's code.
        runpy.run_module(WORKER_MODULE, run_name="__main__", alter_sys=True)
        return 0
    if len(argv) >= 2 and argv[0] == "-c":
        # As ``python -c``: the code runs as __main__, sys.argv[0] is "-c".
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        return 0
    from gui.cli import main as cli_main

    # Finder on old macOS adds a process serial number argument; it is not ours.
    return cli_main([arg for arg in argv if not arg.startswith("-psn_")])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
