"""The fake Hub in a process of its own, for throughput figures.

In the test's process the fake Hub's server threads share one interpreter lock with the
client they serve, so the more Python a client runs per byte, the slower the server
sends: a penalty no real Hub imposes. Here the server runs alone; the caller gets a
``FakeHub`` (not started) holding the same repos, for names, sizes and addresses.

    with hub_process(lambda hub: hub.add_virtual_model(...)) as hub:
        ... hub.url, hub.cdn_url, hub.repos ...
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.helpers.fake_hub import FakeHub

Setup = Callable[[FakeHub], object]


class _Remote(FakeHub):
    """A FakeHub whose servers run in another process: only the addresses differ."""

    hub_url: str = ""
    cdn: str = ""

    @property
    def url(self) -> str:
        return self.hub_url

    @property
    def cdn_url(self) -> str:
        return self.cdn


@contextmanager
def hub_process(setup: Setup) -> Iterator[FakeHub]:
    """A fake Hub serving from a child process, set up by ``setup`` (a picklable
    module-level function) on both sides."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.fake_hub_process"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(pickle.dumps(setup))
        child.stdin.flush()
        urls = child.stdout.readline().decode().split()
        if len(urls) != 2:
            raise RuntimeError("the fake Hub process did not start")
        local = _Remote()
        local.hub_url, local.cdn = urls
        setup(local)
        yield local
    finally:
        if child.stdin is not None:
            child.stdin.close()  # the child stops when its stdin closes
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _serve() -> None:
    setup = pickle.loads(sys.stdin.buffer.read1(1 << 20))
    hub = FakeHub().start()
    setup(hub)
    print(hub.url, hub.cdn_url, flush=True)
    try:
        sys.stdin.buffer.read()
    finally:
        hub.stop()


if __name__ == "__main__":
    _serve()
