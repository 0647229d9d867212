"""Heartbeats (so silence means a hang) and traffic counts, from a thread.

Standard library only, so the worker starts it before importing mlx-lm (seconds):
a rank beats from its first line, and every heartbeat says the loading stage the
rank is in, so the launcher can tell a rank that hangs from one waiting for it.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from core.worker import protocol as p
from core.worker.residency import METER
from core.worker.vocab import LoadingStage

if TYPE_CHECKING:
    from core.worker.traffic import TrafficCounter


class Reporter(threading.Thread):
    """Beats at once, then every ``HEARTBEAT_S``; reports traffic once a counter is set.

    ``stage`` is what the rank is doing while it loads (sent with each heartbeat);
    ``None`` once it has loaded."""

    def __init__(
        self,
        events: p.EventWriter,
        counter: TrafficCounter | None = None,
        stage: LoadingStage | None = LoadingStage.STARTING,
    ) -> None:
        super().__init__(name="macmesh-reporter", daemon=True)
        self._events = events
        self.counter = counter
        self.stage = stage
        self._stop = threading.Event()

    def beat(self) -> None:
        """One heartbeat now (with the stage while loading, and the peak memory of the
        load or of the generation so far where this platform measures it)."""
        events = self._events
        beat = p.Heartbeat(event=p.HEARTBEAT, rank=events.rank, t=time.monotonic())
        if self.stage is not None:
            beat["stage"] = self.stage
        peak = METER.peak()
        if peak is not None:
            beat["peak_bytes"] = peak
        events.write(beat)

    def enter(self, stage: LoadingStage) -> None:
        """The rank moved on to ``stage``: say so now, and in every heartbeat after."""
        METER.sample()  # a milestone of the load
        self.stage = stage
        events = self._events
        events.write(p.Loading(event=p.LOADING, rank=events.rank, t=time.monotonic(), stage=stage))

    def run(self) -> None:
        self.beat()
        last_heartbeat = last_traffic = time.monotonic()
        was_moving = False
        while not self._stop.wait(min(p.HEARTBEAT_S, p.TRAFFIC_S) / 2):
            METER.sample()  # between heartbeats too (VmHWM catches what falls between)
            now = time.monotonic()
            counter = self.counter
            if counter is not None and now - last_traffic >= p.TRAFFIC_S:
                sent, received = counter.take()
                # Report while bytes move, and once more at zero so plots drop to 0.
                if sent or received or was_moving:
                    self._events.write(
                        p.Traffic(
                            event=p.TRAFFIC,
                            rank=self._events.rank,
                            t=time.monotonic(),
                            interval_s=round(now - last_traffic, 6),
                            sent={str(k): v for k, v in sent.items()},
                            received={str(k): v for k, v in received.items()},
                        )
                    )
                was_moving = bool(sent or received)
                last_traffic = now
            if now - last_heartbeat >= p.HEARTBEAT_S:
                self.beat()
                last_heartbeat = now

    def stop(self) -> None:
        self._stop.set()
