"""One fine-tune, from the data to an adapter in the user data folder: the one object
behind ``macmesh finetune`` and the window's Fine-tune view.

Built on ``core.run.session.Session`` (the same steps as a Start: probe, plan, checks,
copy, launch) with a ``TrainingPayload`` (``core.run.tasks.training_payload``): the
plan's ranks each hold the whole model (data parallel) and run ``core.worker.finetune``
(mlx-lm's trainer). Before the steps the data is read and checked (``core.tune.data``)
and written in mlx-lm's layout into a folder the ranks read; the settings are checked
for the rank count (``TuneSettings.check``).

Rank 0 writes the adapter (mlx-lm's ``adapters.safetensors`` + ``adapter_config.json``,
checkpoints beside them) straight into the adapter's folder in the user data folder (on
the demo cluster rank 0 runs here). When the job ends this controller writes its
``macmesh.json``; when training did not reach its end (a rank failed, or ``cancel``) the
last checkpoint becomes the adapter, marked stopped; with no checkpoint nothing is kept.

Threads: ``start`` blocks (run it on a worker thread, as Session's steps); the signals
fire on the job's threads (``report``, ``validated``, ``checkpoint``, ``event``) and on
the finishing thread (``finished``, the last ``state_changed``).
"""

from __future__ import annotations

import re
import shutil
import tarfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psygnal import Signal

from core import paths
from core.model.info import ModelInfo
from core.remote.folders import fetch_folder
from core.remote.ssh import SSHError
from core.run.errors import ClusterError
from core.run.measure.history import RunKind, RunRecord, keep
from core.run.placement import in_rank_order
from core.run.session import Host, Session
from core.run.states import RunState, Step
from core.run.tasks.records import job_record
from core.run.tasks.training_payload import TrainingPayload
from core.run.tasks.watch import Phase, Watch, watched
from core.tune.adapters import Adapter, new_adapter_folder, read_adapter, write_metadata
from core.tune.data import DEMO_DATA, DEMO_SETTINGS, DataError, read_data
from core.tune.fit import training_fit, tune_strategy
from core.tune.settings import SettingsError, TuneSettings
from core.worker import protocol as p
from core.worker.vocab import JobState

STOP_WITHIN_S = 600.0  # after stop(): the ranks' agreed stop, save and exit
CHECKPOINT = re.compile(r"^(\d+)_adapters\.safetensors$")
ADAPTER_FILE = "adapters.safetensors"
METADATA = "macmesh.json"


@dataclass(frozen=True)
class TrainReport:
    """One point of the run: rank 0's ``train`` event, with every node's peak memory so
    far and the time left at the rate so far."""

    iteration: int
    iters: int
    train_loss: float
    learning_rate: float
    tokens_per_s: float
    trained_tokens: int
    peak_memory_bytes: dict[str, int] = field(default_factory=dict)
    eta_s: float | None = None


class FineTune:
    """One fine-tune of ``info`` on ``hosts`` with the ``data`` (a folder or a .jsonl
    file) and ``settings``; the adapter is called ``name`` (default: the model's name and
    the date). ``watch`` hears of its session as it starts (``Phase.TRAIN``)."""

    state_changed = Signal(str, str)  # RunState, detail
    report = Signal(object)  # TrainReport
    validated = Signal(int, float)  # iteration, val_loss
    checkpoint = Signal(int, str)  # iteration, path
    finished = Signal(object)  # the Adapter kept, or None
    event = Signal(dict)  # every worker event (a protocol.Event)

    def __init__(
        self,
        info: ModelInfo,
        hosts: Sequence[Host],
        data: Path,
        settings: TuneSettings,
        name: str | None = None,
        watch: Watch | None = None,
    ) -> None:
        self.info, self.hosts, self.data, self.settings = info, list(hosts), Path(data), settings
        self.name = name or f"{info.name} {time.strftime('%Y-%m-%d %H:%M')}"
        self.reports: list[TrainReport] = []
        self.validations: list[tuple[int, float]] = []
        self.checkpoints: list[tuple[int, str]] = []
        self.adapter: Adapter | None = None
        self.out: Path | None = None  # the adapter's folder
        self.data_folder: Path | None = None  # what the ranks read (mlx-lm's layout)
        self.data_sha256 = ""
        self.data_examples = 0
        self.trained: p.Trained | None = None  # rank 0's ``trained`` event
        self.error = ""
        self.payload = TrainingPayload()  # what the session ships: filled by start()
        self.session = Session(
            info, hosts, strategy=tune_strategy(len(hosts)), payloads=[self.payload]
        )
        self._watch = watch  # hears of the session as it starts (its checks, its copies)
        self.session.state_changed.connect(self._on_state)
        self.session.event.connect(self._on_event)
        self._peaks: dict[int, int] = {}
        self._first: tuple[float, int] | None = None  # rank 0's (t, iteration) at its first report
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._finishing = False
        # The run as the history keeps it: seconds from the start, and the figure.
        self.started = time.time()
        self._origin = time.monotonic()
        self.series: dict[str, list[tuple[float, float]]] = {
            "train_loss": [],
            "tokens_per_s": [],
            "val_loss": [],
        }
        self.not_kept: str | None = None  # why the history could not keep the run
        self.report.connect(self._note_report)
        self.validated.connect(self._note_validation)

    # -- what runs --------------------------------------------------------------------

    @property
    def state(self) -> RunState:
        return self.session.state

    @property
    def nodes(self) -> list[str]:
        """The node of each rank, rank order (once planned)."""
        return self.session.rank_nodes() if self.session.plan else [h.name for h in self.hosts]

    def start(self, watch: Watch | None = None) -> bool:
        """Check the settings and data, then the session's steps with the fit checked once
        planned (the data goes to the nodes with the model); True once the ranks are
        starting (False: a check failed or it was cancelled, as ``Session.start``).
        ``watch``: who hears of the session (else the one given at construction)."""
        self.settings.check(len(self.hosts))
        folder = _new_folder(paths.cache_dir() / "finetune-data")
        self.data_sha256, self.data_examples = prepare_data(
            self.data, folder, self.settings.batch_size, self.settings.seed
        )
        self.data_folder = folder
        self.out = new_adapter_folder(self.name)
        self.started = time.time()
        self._origin = time.monotonic()
        self.payload.ready(folder, self.settings.to_dict(), self.out)
        watched(watch or self._watch, self.session, Phase.TRAIN)
        try:
            started = self.session.start(Step.PLAN)
            if started:
                self.check_fit()
                started = self.session.start()
        except BaseException:
            self._discard_unused()
            raise
        job = self.session.job
        if not started or job is None:
            self._discard_unused()
            return False
        job.state_changed.connect(self._on_job_state)
        if job.state in (JobState.STOPPED, JobState.FAILED):
            self._on_job_state(job.state.value, job.message)
        return True

    def check_fit(self) -> None:
        """ClusterError (one line: the node that is the limit) when the model, its LoRA and
        optimizer state and the activations do not fit on every node (``core.tune.fit``)."""
        facts = [self.session.facts[h.name] for h in self.hosts if h.name in self.session.facts]
        verdict = training_fit(self.info, self.settings, facts)
        if not verdict.ok:
            raise ClusterError(str(verdict.message))

    def wait(self, timeout: float | None = None) -> Adapter | None:
        """Block until the job has ended and the adapter is kept; the Adapter (None if
        nothing was trained). TimeoutError when ``timeout`` passes first."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the fine-tune did not end within {timeout} s")
        return self.adapter

    def stop(self) -> None:
        """The ranks agree to stop at their next report; rank 0 saves the adapter as it
        stands (it is kept, marked stopped). Ranks that cannot be told are ended."""
        job = self.session.job
        if job is None or not job.send_stop():
            self.cancel()

    def cancel(self) -> None:
        """End every rank now (and any step left); the last checkpoint is kept."""
        self.session.stop()
        if self.session.job is None:
            self._discard_unused()
            self._done.set()
        else:
            self._finish()

    # -- events -----------------------------------------------------------------------

    def _on_state(self, state: str, detail: str) -> None:
        self.state_changed.emit(state, detail)

    def _on_event(self, event: p.Event) -> None:
        rank = event["rank"]
        if event["event"] == p.TRAIN:
            with self._lock:
                self._peaks[rank] = max(self._peaks.get(rank, 0), event["peak_memory_bytes"])
            if rank == 0:
                report = self._report(event)
                self.reports.append(report)
                self.report.emit(report)
        elif event["event"] == p.VALIDATION:
            self.validations.append((event["iteration"], float(event["val_loss"])))
            self.validated.emit(event["iteration"], float(event["val_loss"]))
        elif event["event"] == p.CHECKPOINT:
            self.checkpoints.append((event["iteration"], event["path"]))
            self.checkpoint.emit(event["iteration"], event["path"])
        elif event["event"] == p.TRAINED:
            self.trained = event
        self.event.emit(event)

    def _report(self, event: p.Train) -> TrainReport:
        iteration, iters = event["iteration"], event["iters"]
        t = float(event["t"])
        eta = None
        with self._lock:
            if self._first is None:
                self._first = (t, iteration)
            first_t, first_it = self._first
            nodes = self.nodes
            peaks = {
                nodes[r] if r < len(nodes) else str(r): v for r, v in sorted(self._peaks.items())
            }
        if iteration > first_it and t > first_t:
            eta = (iters - iteration) * (t - first_t) / (iteration - first_it)
        return TrainReport(
            iteration=iteration,
            iters=iters,
            train_loss=float(event["train_loss"]),
            learning_rate=float(event["learning_rate"]),
            tokens_per_s=float(event["tokens_per_s"]),
            trained_tokens=event["trained_tokens"],
            peak_memory_bytes=peaks,
            eta_s=eta,
        )

    def _on_job_state(self, state: str, message: str) -> None:
        """On a job thread: once the ranks ended, keep the adapter (on a thread of its
        own: the job's lock is held here)."""
        if JobState(state).finished:
            if JobState(state) is JobState.FAILED:
                self.error = name_node(message, self.nodes)
            threading.Thread(target=self._finish, name="macmesh-finetune-end", daemon=True).start()

    def _finish(self) -> None:
        with self._lock:
            if self._finishing:
                return
            self._finishing = True
        try:
            self.adapter = self._keep()
            self.not_kept = keep(self.record())
        finally:
            if self.data_folder is not None:  # the ranks read it at their start
                shutil.rmtree(self.data_folder, ignore_errors=True)
            failed = self.session.state == RunState.FAILED
            if not failed:
                self.session.stop()  # STOPPED once every rank ended (they have)
            try:  # before wait() returns: who waited (a window closing) hears no more
                self.finished.emit(self.adapter)  # from this thread afterwards
            finally:
                self._done.set()

    def _note_report(self, report: TrainReport) -> None:
        at = time.monotonic() - self._origin
        self.series["train_loss"].append((at, report.train_loss))
        self.series["tokens_per_s"].append((at, report.tokens_per_s))

    def _note_validation(self, iteration: int, loss: float) -> None:
        self.series["val_loss"].append((time.monotonic() - self._origin, loss))

    def record(self) -> RunRecord:
        """The run as the history keeps it: the adapter's figures and the loss curves."""
        adapter, reports = self.adapter, self.reports
        figures = {
            "adapter": str(adapter.path) if adapter else None,
            "iterations": adapter.iterations if adapter else 0,
            "train_loss": adapter.train_loss if adapter else None,
            "val_loss": adapter.val_loss if adapter else None,
            "stopped": adapter.stopped if adapter else None,
            "tokens_per_s": (
                sum(r.tokens_per_s for r in reports) / len(reports) if reports else None
            ),
            "trained_tokens": reports[-1].trained_tokens if reports else 0,
            "error": self.error or None,
        }
        series = {k: list(v) for k, v in self.series.items() if v}
        return job_record(
            self.session,
            RunKind.FINETUNE,
            figures,
            series=series,
            strategy="data parallel",
            started=self.started,
        )

    # -- the adapter -------------------------------------------------------------------

    def _keep(self) -> Adapter | None:
        """The adapter in its folder with its ``macmesh.json``: the trained one, else the
        last checkpoint (stopped); None (the folder removed) when nothing was trained."""
        out = self.out
        if out is None:
            return None
        remote_out = self.payload.remote_out
        if remote_out is not None:
            try:
                plan = self.session.plan
                assert plan is not None  # a job ran
                fetch_folder(in_rank_order(plan, self.session.targets)[0], remote_out, out)
            except (SSHError, OSError, tarfile.TarError) as exc:
                self.error = self.error or f"the adapter could not be fetched from rank 0: {exc}"
        trained = self.trained
        if trained is not None and (out / ADAPTER_FILE).is_file():
            iterations = trained["iterations"]
            train_loss, val_loss = trained["train_loss"], trained["val_loss"]
            stopped = trained["stopped"]
        else:
            last = last_checkpoint(out)
            if last is None:
                shutil.rmtree(out, ignore_errors=True)
                return None
            iterations, path = last
            shutil.copyfile(path, out / ADAPTER_FILE)
            train_loss = next(
                (r.train_loss for r in reversed(self.reports) if r.iteration <= iterations), None
            )
            val_loss = next((v for it, v in reversed(self.validations) if it <= iterations), None)
            stopped = True
        return write_adapter_metadata(
            out,
            name=self.name,
            base_model=self.info.path.name,
            data_sha256=self.data_sha256,
            data_examples=self.data_examples,
            iterations=iterations,
            train_loss=train_loss,
            val_loss=val_loss,
            stopped=stopped,
            settings=self.settings.to_dict(),
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )

    def _discard_unused(self) -> None:
        """Nothing ran: no adapter folder left behind."""
        if self.data_folder is not None:
            shutil.rmtree(self.data_folder, ignore_errors=True)
        if self.out is not None and not any(self.out.glob("*.safetensors")):
            shutil.rmtree(self.out, ignore_errors=True)


def name_node(message: str, nodes: Sequence[str]) -> str:
    """The launcher's "Rank 1 was killed ..." with the rank's node, when it has none (the
    demo's ranks run here, on no target: their node is a simulated Mac)."""
    match = re.match(r"Rank (\d+) (?!on )", message)
    if match is None or int(match.group(1)) >= len(nodes):
        return message
    rank = int(match.group(1))
    return f"Rank {rank} on {nodes[rank]} {message[match.end() :]}"


def last_checkpoint(folder: Path) -> tuple[int, Path] | None:
    """The latest ``NNNNNNN_adapters.safetensors`` in ``folder``: (iteration, path)."""
    found = [
        (int(m.group(1)), path)
        for path in folder.glob("*_adapters.safetensors")
        if (m := CHECKPOINT.match(path.name))
    ]
    return max(found) if found else None


# -- the data and the adapter's folder (core.tune) ---------------------------------------


def default_settings(data: Path) -> TuneSettings:
    """The settings a run starts from: the demo set's own (``DEMO_SETTINGS``, which teach
    it on the 2-Mac demo cluster) for the shipped demo data, else the defaults."""
    try:
        if Path(data).resolve() == DEMO_DATA.resolve():
            return DEMO_SETTINGS
    except OSError:
        pass
    return TuneSettings()


def refusals() -> tuple[type[Exception], ...]:
    """What ``FineTune.start`` raises for input a person can fix (one line each)."""
    return (DataError, SettingsError, ClusterError)


def prepare_data(source: Path, folder: Path, batch_size: int = 1, seed: int = 0) -> tuple[str, int]:
    """Check the data (``DataError``: one line, bad lines named) and write it in
    mlx-lm's layout into ``folder``: its sha256 and its example count."""
    training = read_data(source)
    training.write_to(folder, batch_size=batch_size, seed=seed)
    return training.sha256, training.train + training.valid


def write_adapter_metadata(folder: Path, **fields: Any) -> Adapter:
    """``macmesh.json`` in the adapter folder; the Adapter read back."""
    write_metadata(folder, **fields)
    return read_adapter(folder)


def _new_folder(root: Path, stem: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    base = stem or time.strftime("%Y%m%d-%H%M%S")
    for n in range(10_000):
        folder = root / (base if n == 0 else f"{base}-{n + 1}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise OSError(f"no free folder name under {root}")
