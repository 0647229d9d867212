"""Ring waits that sleep: a small ``LD_PRELOAD`` library for Linux CPU ranks.

MLX's ring backend gives each socket a thread that, while a send or receive is pending,
calls non-blocking ``recv``/``send`` in a loop (``SocketThread::worker`` in
``mlx/distributed/ring/ring.cpp``). A rank waiting for its turn therefore holds a whole
core: on a 2-core machine running a 2-rank pipeline, the waiting rank's spin takes the
core the working rank's BLAS (or anything else on the machine) could use.

``SOURCE`` wraps ``recv`` and ``send``. When one thread is refused (``EAGAIN``) twice in
a row on the same socket, which only a polling loop does, the wrapper sleeps in
``poll(2)`` until that socket can move data in the directions this thread is waiting
for, at most ``WAIT_MS``. Data wakes it at once, as it would wake a blocking call, so a
rank answers as fast; it just stops burning a core. Code that polls before it reads (an
event loop) never meets a second refusal and runs as before.

The link test turns the sleeping off while it measures (``polling()``): a bulk
transfer's gaps are its own, and sleeping through them cost a link a fifth of its
bytes/s on a busy machine here.

``library()`` builds it once per source and machine with the C compiler there (``cc``),
into a cache folder; without a compiler the ranks spin as before and say so
(``active()`` in the rank's ``loaded`` event). Standard library only: the worker ships
this file to nodes, and ``--version`` builds it there.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

WAIT_MS = 2
# Refused for this long in a row, a thread stops polling and sleeps: a transfer's gaps
# are shorter (it polls on through them, as MLX does), a wait for a rank's turn longer.
SPIN_US = 200
MARKER = "macmesh_ringwait_v1"

_TEMPLATE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

/* MacMesh's ring-wait library: see core/worker/ringwait.py. */
int @MARKER@ = 1;
static volatile int sleeping = 1; /* 0: wait as MLX does, polling (set_sleeping) */

void macmesh_ringwait_sleep(int on) { sleeping = on; }

static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_send)(int, const void *, size_t, int);

static __thread int spin_fd = -1;         /* the socket this thread was last refused on */
static __thread int refusals;             /* refusals in a row on it */
static __thread struct timespec first;    /* when the first of them came */
static __thread int want_in;      /* this thread's receive there is pending */
static __thread int want_out;     /* and its send */

static int refused(ssize_t r) {
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

static void moved(int fd) {
    if (fd == spin_fd) refusals = 0;
}

static long since_first_us(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - first.tv_sec) * 1000000L + (now.tv_nsec - first.tv_nsec) / 1000;
}

/* Refused: keep polling as MLX does for SPIN_US (a transfer's short gaps), then sleep
   until the socket can move data (a wait for another rank's turn). */
static void pause_on(int fd) {
    if (!sleeping) return;
    if (fd != spin_fd) {
        spin_fd = fd;
        refusals = 0;
    }
    if (refusals++ == 0) {
        clock_gettime(CLOCK_MONOTONIC, &first);
        return;
    }
    if (since_first_us() < @SPIN_US@) return;
    struct pollfd p = {fd, (short)((want_in ? POLLIN : 0) | (want_out ? POLLOUT : 0)), 0};
    int saved = errno;
    poll(&p, 1, @WAIT_MS@);
    errno = saved;
}

/* After a call on fd: note whether this direction still waits, and pause if refused. */
static ssize_t settle(int fd, ssize_t r, int *waiting) {
    *waiting = refused(r);
    if (*waiting) pause_on(fd);
    else moved(fd);
    return r;
}

ssize_t recv(int fd, void *buf, size_t len, int flags) {
    if (!real_recv) real_recv = (ssize_t (*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
    return settle(fd, real_recv(fd, buf, len, flags), &want_in);
}

ssize_t send(int fd, const void *buf, size_t len, int flags) {
    if (!real_send)
        real_send = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    return settle(fd, real_send(fd, buf, len, flags), &want_out);
}
"""
SOURCE = (
    _TEMPLATE.replace("@MARKER@", MARKER)
    .replace("@WAIT_MS@", str(WAIT_MS))
    .replace("@SPIN_US@", str(SPIN_US))
)


def cache_folder() -> Path:
    """Where built libraries are kept: ``$XDG_CACHE_HOME/macmesh/native`` (or
    ``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "macmesh" / "native"


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def library(folder: Path | None = None) -> dict[str, str]:
    """The built library: ``{"path"}``, or ``{"missing": why}`` (not Linux, no C
    compiler, or the build failed). Built once per source and machine; later calls
    find it."""
    if not sys.platform.startswith("linux"):
        return {"missing": "only Linux CPU ranks need it"}
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    folder = folder or cache_folder()
    target = folder / f"ringwait-{digest}-{platform.machine()}.so"
    if target.is_file():
        return {"path": str(target)}
    compiler = _compiler()
    if compiler is None:
        return {"missing": "no C compiler (cc) to build it: install gcc"}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as work:
            source = Path(work) / "ringwait.c"
            source.write_text(SOURCE, encoding="utf-8")
            built = Path(work) / "ringwait.so"
            command = [compiler, "-O2", "-shared", "-fPIC", "-o", str(built), str(source), "-ldl"]
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
            if done.returncode != 0 or not built.is_file():
                said = (done.stderr or done.stdout).strip().splitlines()
                return {"missing": f"{compiler} could not build it: {said[-1] if said else '?'}"}
            os.replace(built, target)  # atomic: a rank never preloads half a file
    except (OSError, subprocess.SubprocessError) as exc:
        return {"missing": f"could not build it in {folder}: {exc}"}
    return {"path": str(target)}


def active() -> bool:
    """Whether this process runs with the library preloaded."""
    try:
        ctypes.c_int.in_dll(ctypes.CDLL(None), MARKER)
    except (OSError, ValueError):
        return False
    return True


@contextlib.contextmanager
def polling() -> Iterator[None]:
    """Waits as MLX has them (polling) for the block: the link test measures what a
    link carries, and a bulk transfer's gaps are its own; sleeping through them costs
    throughput on a busy machine. Nothing changes where the library is not loaded."""
    try:
        switch = ctypes.CDLL(None).macmesh_ringwait_sleep
    except (OSError, AttributeError):
        yield
        return
    switch(0)
    try:
        yield
    finally:
        switch(1)
