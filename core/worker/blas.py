"""The BLAS under a CPU rank: find a fast one, and check at start which one really runs.

The ``mlx[cpu]`` wheel for Linux links netlib's reference BLAS (``mlx_cpu.libs/libblas``):
a float32 matmul runs at ~5 GFLOP/s there, ~30x slower than an OpenBLAS. An OpenBLAS
that exports the standard ``cblas_sgemm`` (the ``cmeel-openblas`` wheel, or Debian's
``libopenblas0``), put in ``LD_PRELOAD`` by the launcher, replaces it. ``find_openblas``
says where one is on this node (the launcher for local ranks, ``--version`` for a
remote node's); ``blas_report`` is the rank's own check that the fast path is active,
put in its ``loaded`` event, so a silently slow rank shows. Standard library only
(mlx is imported where a matmul is timed), so it travels with the worker.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import sys
import time
from pathlib import Path
from typing import Any

# The pip wheel with a standard-symbol OpenBLAS (scipy-openblas32 prefixes its symbols
# with ``scipy_``, so a preload of it would not replace MLX's cblas_sgemm).
PIP_OPENBLAS = "cmeel-openblas"
PIP_LIBRARY = "libopenblas.so.0"
# Debian/Ubuntu (pthread, openmp and serial variants behind one alternative), Fedora.
SYSTEM_OPENBLAS = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)
# A BLAS counts as fast when it is one of these (names in the loaded library's path).
FAST_NAMES = ("openblas", "mkl", "blis")
# Reference BLAS measures ~5 GFLOP/s on a 256x256 float32 matmul; an optimised one,
# even on one shared core, well above this.
REFERENCE_GFLOPS = 5.0


def find_openblas() -> dict[str, str] | None:
    """A fast BLAS this Python's node can preload: ``{"path", "source"}``, the pip
    wheel's first, else the system's; None off Linux or when there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        files = importlib.metadata.distribution(PIP_OPENBLAS).files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name == PIP_LIBRARY:
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return {"path": str(path), "source": f"pip {PIP_OPENBLAS}"}
    for candidate in SYSTEM_OPENBLAS:
        if os.path.exists(candidate):
            return {"path": os.path.realpath(candidate), "source": "system"}
    return None


class _DlInfo(ctypes.Structure):
    _fields_ = (
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    )


def resolved_sgemm() -> str | None:
    """The library whose ``cblas_sgemm`` the process's global scope resolves (a preload
    comes first there), or None when none does: MLX then uses the one it links itself.
    Other libraries in the process (numpy's ``scipy_openblas``) use prefixed names and
    do not count."""
    try:
        process = ctypes.CDLL(None)
        address = ctypes.cast(process.cblas_sgemm, ctypes.c_void_p).value
        info = _DlInfo()
        if not address or not process.dladdr(ctypes.c_void_p(address), ctypes.byref(info)):
            return None
    except (OSError, AttributeError):
        return None
    return os.path.realpath(info.dli_fname.decode()) if info.dli_fname else None


def loaded_blas(maps: str | None = None) -> str | None:
    """The BLAS MLX's matmuls call: the globally resolved ``cblas_sgemm`` (a preload),
    else the ``libblas`` MLX links (seen in ``/proc/self/maps``)."""
    resolved = resolved_sgemm()
    if resolved:
        return resolved
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            return None
    paths = {line.split()[-1] for line in maps.splitlines() if "/" in line}
    return next(iter(sorted(p for p in paths if Path(p).name.startswith("libblas"))), None)


def _openblas_says(path: str) -> tuple[str | None, int | None]:
    """OpenBLAS's own config line and thread count (None for another library)."""
    try:
        lib = ctypes.CDLL(path)
        lib.openblas_get_config.restype = ctypes.c_char_p
        config = lib.openblas_get_config().decode(errors="replace").strip()
        return config, int(lib.openblas_get_num_threads())
    except (OSError, AttributeError):
        return None, None


def measure_gflops(n: int = 256, repeats: int = 5) -> float:
    """float32 matmul speed, best of ``repeats`` (the machine may be shared)."""
    # lazy: the controller and the probe import this module to find a BLAS without MLX
    import mlx.core as mx

    a = mx.random.normal((n, n))
    b = mx.random.normal((n, n))
    mx.eval(a, b, a @ b)  # warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        mx.eval(a @ b)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / max(best, 1e-9) / 1e9


def blas_report(maps: str | None = None) -> dict[str, Any]:
    """What a CPU rank's matmuls run on: library, path, threads, measured GFLOP/s, and
    ``fast`` (an optimised library is what resolves; the GFLOP/s show it works)."""
    gflops = measure_gflops()  # first: MLX (and the BLAS it links) is loaded by then
    path = loaded_blas(maps)
    config, threads = _openblas_says(path) if path else (None, None)
    optimised = path is not None and any(n in Path(path).name.lower() for n in FAST_NAMES)
    name = config or (Path(path).name if path else "unknown")
    if path and not optimised:
        name = f"reference BLAS ({Path(path).name})"
    return {
        "name": name,
        "path": path,
        "threads": threads,
        "gflops": round(gflops, 1),
        "fast": optimised,
    }
