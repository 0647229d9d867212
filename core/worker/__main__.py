import os
import sys

from core.worker.lifeline import tie_to_controller

# First, before anything slow: a local rank ends with its controller (see lifeline.py).
tie_to_controller()

if sys.argv[1:] == ["--version"]:
    # Answer before importing the worker proper: mlx-lm takes seconds to import.
    from core.worker.version import print_version

    code = print_version()
else:
    from core.worker.main import main

    code = main()
sys.stderr.flush()
if sys.__stdout__ is not None:
    sys.__stdout__.flush()
# Skip interpreter teardown: a collective backend whose peers are gone can
# block in its destructors, and there is nothing left to clean up.
os._exit(code)
