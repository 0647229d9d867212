"""How much memory this rank holds, and the most it held: during load and during generation.

Standard library only, so the reporter thread (``core.worker.reporter``) samples it from a
rank's first line, before mlx-lm is imported.

On Linux the measure is the anonymous resident memory (``RssAnon`` of
``/proc/self/status``): the model's weights, caches and buffers, not the mapped code of
the libraries. Linux keeps no peak of it, only of the whole resident set (``VmHWM``), so a
peak is the larger of every ``RssAnon`` sampled and ``VmHWM`` minus the file and shared
pages resident at the same read: exact while those pages stay put (MLX reads weight files
into its own buffers, it does not map them), and never blind to a transient between two
samples. Writing "5" to ``/proc/self/clear_refs`` resets ``VmHWM``, which starts the
generation's peak afresh once the rank has loaded.

On a Mac the measure is the process's physical footprint (``proc_pid_rusage``): it holds
MLX's Metal buffers too. Its lifetime maximum cannot be reset, so the generation's peak
is the largest footprint sampled after load (and MLX's own ``mx.get_peak_memory``, sent
in ``done``, beside it).

``base`` is what the rank held just before it read any weight (the interpreter, MLX,
mlx-lm and the tokenizer): the planner plans the model's bytes, so a rank's peak is
compared with its plan above that base.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
from dataclasses import dataclass

MEASURE_ANON = "anonymous resident"  # Linux: RssAnon
MEASURE_FOOTPRINT = "physical footprint"  # macOS: ri_phys_footprint

_STATUS_KEYS = ("RssAnon", "RssFile", "RssShmem", "VmHWM")


@dataclass(frozen=True)
class Reading:
    """One read of this process's memory: what it holds now, and the most it can have
    held since the last reset (bytes)."""

    now: int
    peak: int


def _linux_status() -> dict[str, int] | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            found = {}
            for line in status:
                key, _, value = line.partition(":")
                if key in _STATUS_KEYS:
                    found[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return found if len(found) == len(_STATUS_KEYS) else None


def _linux_read() -> Reading | None:
    status = _linux_status()
    if status is None:
        return None
    anon = status["RssAnon"]
    other = status["RssFile"] + status["RssShmem"]
    return Reading(anon, max(anon, status["VmHWM"] - other))


def _linux_reset() -> None:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
            clear.write("5")  # resets VmHWM to the resident set now
    except OSError:
        pass  # an old kernel: the peak then holds the load's, an overestimate


class _RusageInfoV4(ctypes.Structure):
    """``struct rusage_info_v4`` of <sys/resource.h> (macOS 10.14 and later)."""

    _fields_ = [
        ("ri_uuid", ctypes.c_uint8 * 16),
        *[
            (name, ctypes.c_uint64)
            for name in [
                "ri_user_time",
                "ri_system_time",
                "ri_pkg_idle_wkups",
                "ri_interrupt_wkups",
                "ri_pageins",
                "ri_wired_size",
                "ri_resident_size",
                "ri_phys_footprint",
                "ri_proc_start_abstime",
                "ri_proc_exit_abstime",
                "ri_child_user_time",
                "ri_child_system_time",
                "ri_child_pkg_idle_wkups",
                "ri_child_interrupt_wkups",
                "ri_child_pageins",
                "ri_child_elapsed_abstime",
                "ri_diskio_bytesread",
                "ri_diskio_byteswritten",
                "ri_cpu_time_qos_default",
                "ri_cpu_time_qos_maintenance",
                "ri_cpu_time_qos_background",
                "ri_cpu_time_qos_utility",
                "ri_cpu_time_qos_legacy",
                "ri_cpu_time_qos_user_initiated",
                "ri_cpu_time_qos_user_interactive",
                "ri_billed_system_time",
                "ri_serviced_system_time",
                "ri_logical_writes",
                "ri_lifetime_max_phys_footprint",
                "ri_instructions",
                "ri_cycles",
                "ri_billed_energy",
                "ri_serviced_energy",
                "ri_interval_max_phys_footprint",
                "ri_runnable_time",
            ]
        ],
    ]


_RUSAGE_INFO_V4 = 4
_libc: ctypes.CDLL | None = None


def _mac_read() -> Reading | None:
    global _libc
    import os

    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        info = _RusageInfoV4()
        if _libc.proc_pid_rusage(os.getpid(), _RUSAGE_INFO_V4, ctypes.byref(info)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return Reading(int(info.ri_phys_footprint), int(info.ri_lifetime_max_phys_footprint))


def measure_name() -> str | None:
    """What this platform's figures measure; None where nothing can be read."""
    if sys.platform == "darwin":
        return MEASURE_FOOTPRINT if _mac_read() else None
    return MEASURE_ANON if _linux_read() else None


class Meter:
    """The most memory this process held in the current phase (load, then generation),
    from reads at milestones and in the reporter's thread; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mac = sys.platform == "darwin"
        self._peak = 0
        self._base: int | None = None
        self._lifetime_floor = 0  # mac: the lifetime maximum when the phase began
        self.loaded = False  # the load's phase ended: the peak is the generation's

    def _read(self) -> Reading | None:
        return _mac_read() if self._mac else _linux_read()

    def sample(self) -> int | None:
        """Read now: the memory held now (bytes), the phase's peak updated; None where
        this platform gives nothing."""
        reading = self._read()
        if reading is None:
            return None
        with self._lock:
            peak = reading.peak
            if self._mac and peak <= self._lifetime_floor:
                peak = reading.now  # the lifetime maximum is the load's: not this phase's
            self._peak = max(self._peak, reading.now, peak)
        return reading.now

    def mark_base(self) -> int | None:
        """What the rank holds before it reads any weight: the base its plan sits on."""
        now = self.sample()
        with self._lock:
            self._base = now
        return now

    @property
    def base(self) -> int | None:
        with self._lock:
            return self._base

    def peak(self) -> int | None:
        """The phase's peak so far (a fresh read included); None when unmeasured."""
        if self.sample() is None:
            return None
        with self._lock:
            return self._peak

    def next_phase(self) -> int | None:
        """End the phase (the load): its peak, and the next phase starts from now."""
        peak = self.peak()
        if self._mac:
            reading = self._read()
            floor = reading.peak if reading else 0
        else:
            _linux_reset()
            floor = 0
        with self._lock:
            self._lifetime_floor = floor
            self._peak = 0
            self.loaded = True
        self.sample()
        return peak


# The rank's one meter: the reporter samples it, the loader marks its base, the loop that
# answers reads the generation's peak (one process, one meter).
METER = Meter()
