"""core.worker.ringwait: the preload that makes a polling loop's waits sleep, built with
the machine's C compiler, and what it changes (and does not) for a process's sockets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.worker import ringwait
from tests.helpers import prereqs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux ranks only")

# A polling loop as MLX's ring thread runs one: non-blocking recv until data comes
# (another thread sends after DELAY_S), then the same for a send into a full socket
# while the peer drains it slowly. Prints the CPU this process spent waiting, how late
# the data was seen, and whether every byte arrived intact.
LOOP = r"""
import json, os, socket, threading, time
from core.worker import ringwait
DELAY_S = 0.6
a, b = socket.socketpair()
a.setblocking(False)
sent_at = []
def later():
    time.sleep(DELAY_S)
    sent_at.append(time.perf_counter())
    b.sendall(b"x" * 100)
threading.Thread(target=later).start()
import contextlib
cpu0 = time.process_time()
got = b""
with ringwait.polling() if os.environ.get("POLLING") else contextlib.nullcontext():
    while not got:
        try:
            got = a.recv(100)
        except BlockingIOError:
            pass
seen = time.perf_counter()
waited_cpu = time.process_time() - cpu0
# A send larger than the socket holds: refused until the peer reads.
payload = os.urandom(8 << 20)
received = bytearray()
def drain():
    b.setblocking(True)
    while len(received) < len(payload):
        received.extend(b.recv(1 << 16))
reader = threading.Thread(target=drain)
reader.start()
view = memoryview(payload)
while view:
    try:
        view = view[a.send(view):]
    except BlockingIOError:
        pass
reader.join()
print(json.dumps({"active": ringwait.active(), "waited_cpu": waited_cpu,
                  "late_s": seen - sent_at[0], "intact": bytes(received) == payload}))
"""


def _build(folder: Path) -> str:
    """The library built with the tests' compiler (``MACMESH_TEST_CC``): skipped without
    one, failed where ``MACMESH_REQUIRE_CC=1`` (CI, which installs gcc)."""
    prereqs.require("cc", "cc")
    compiler = prereqs.cc_command()
    assert compiler is not None
    before = os.environ.get("CC")
    os.environ["CC"] = compiler  # the app's own choice looks at CC first
    try:
        found = ringwait.library(folder)
    finally:
        if before is None:
            del os.environ["CC"]
        else:
            os.environ["CC"] = before
    if "path" not in found:
        failed = prereqs.Missing(found["missing"], f"`sudo {prereqs.CC_INSTALL}`")
        prereqs.skip_or_fail("cc", {"cc": failed})
    return found["path"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _build(tmp_path_factory.mktemp("native"))


def _loop(preload: str | None, polling: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("LD_PRELOAD", None)
    env.pop("POLLING", None)
    if polling:
        env["POLLING"] = "1"
    if preload:
        env["LD_PRELOAD"] = preload
    done = subprocess.run(
        [sys.executable, "-c", LOOP], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_it_is_built_once_and_found_again(tmp_path: Path) -> None:
    path = _build(tmp_path)
    made = Path(path).stat().st_mtime_ns
    assert ringwait.library(tmp_path) == {"path": path}
    assert Path(path).stat().st_mtime_ns == made
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(path).name]


def test_without_a_compiler_it_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    assert ringwait.library(tmp_path / "native") == {
        "missing": "no C compiler (cc) to build it: install gcc"
    }


def test_a_compiler_that_fails_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "bad-cc"
    broken.write_text("#!/bin/sh\necho 'bad-cc: cannot exec' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CC", str(broken))
    found = ringwait.library(tmp_path / "native")
    assert found == {"missing": f"{broken} could not build it: bad-cc: cannot exec"}
    assert list((tmp_path / "native").iterdir()) == []  # nothing half-built left


def test_a_polling_loop_sleeps_while_it_waits_and_wakes_when_data_comes(built: str) -> None:
    spinning, sleeping = _loop(None), _loop(built)
    assert not spinning["active"] and sleeping["active"]
    # The plain loop holds its core for the whole wait; the preloaded one barely uses it.
    assert sleeping["waited_cpu"] < 0.2, sleeping
    assert spinning["waited_cpu"] > 3 * sleeping["waited_cpu"], (spinning, sleeping)
    # Data wakes it at once (bounded by the wait's timeout, not the delay).
    assert sleeping["late_s"] < 0.1, sleeping
    # A send into a full socket, drained slowly, still delivers every byte.
    assert sleeping["intact"] and spinning["intact"]


def test_a_link_test_waits_as_mlx_does(built: str) -> None:
    # ringwait.polling() (the link test): the preloaded loop polls through its wait again.
    polled, slept = _loop(built, polling=True), _loop(built)
    assert polled["active"]
    assert polled["waited_cpu"] > 3 * slept["waited_cpu"], (polled, slept)
    assert polled["intact"]
    # Without the library, polling() changes nothing and raises nothing.
    assert not _loop(None, polling=True)["active"]
