import os
import sys

from core.worker.main import main

code = main()
sys.stderr.flush()
sys.__stdout__.flush()
# Skip interpreter teardown: a collective backend whose peers are gone can
# block in its destructors, and there is nothing left to clean up.
os._exit(code)
