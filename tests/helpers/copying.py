"""Stopping a model copy at a known point, whatever the machine's load.

Cancelling from a progress report that comes at most every 0.1 s races the copy: on a
busy (or a fast) machine the last chunk is sent before a report crosses the mark, and
the copy finishes uncancelled ("DID NOT RAISE CopyCancelled"), or the cancel comes
before the node has written anything ("assert 0 > 0"). ``StopMidCopy`` removes both
races: progress is reported after every chunk, on the copying thread and before it reads
the next one; once ``fraction`` of the bytes were sent, the report waits until the node
has written all of them to its staging folder, then cancels. The copy's next chunk sees
the cancel, so it stops mid-file with exactly the bytes sent on the node's disk.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from core.remote import modelcopy
from core.remote.modelcopy import CopyProgress
from tests.helpers.wait import wait_until


def staged_bytes(staging: Path) -> int:
    """Bytes written so far under a node's ``.partial`` folder (the nodes are local)."""
    if not staging.is_dir():
        return 0
    return sum(f.stat().st_size for f in staging.rglob("*") if f.is_file())


class StopMidCopy:
    """A ``progress`` callback that cancels one node's copy once ``fraction`` of its bytes
    were sent and have arrived in ``staging`` (``cancel`` does the cancelling)."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        staging: Path | str,
        cancel: Callable[[], None],
        fraction: float,
        node: str | None = None,
    ) -> None:
        monkeypatch.setattr(modelcopy, "PROGRESS_EVERY_S", 0.0)  # a report after every chunk
        self.staging, self.cancel, self.fraction, self.node = Path(staging), cancel, fraction, node
        self.arrived: int | None = None  # bytes on the node when the copy was cancelled

    def __call__(self, progress: CopyProgress) -> None:
        if self.arrived is not None or progress.phase != "copying":
            return
        if self.node is not None and progress.node != self.node:
            return
        if progress.bytes_done < self.fraction * progress.bytes_total:
            return
        assert progress.bytes_done < progress.bytes_total, "the copy was sent before the mark"
        wait_until(
            lambda: staged_bytes(self.staging) >= progress.bytes_done,
            60,
            f"the {progress.bytes_done} bytes sent to arrive in {self.staging}",
        )
        self.arrived = staged_bytes(self.staging)
        self.cancel()
