"""The fine-tune job, on the ranks: LoRA with mlx-lm's own trainer, data parallel.

Every rank loads the whole model (``sharding.load_whole``: on the CPU dequantized to
float32 when memory has room, as the chat path does), freezes it, turns its last
``lora_layers`` layers' linears into LoRA layers (``linear_to_lora_layers``), reads the
data folder as ``mlx_lm lora`` does (``load_local_dataset`` in a ``CacheDataset``) and
runs ``mlx_lm.tuner.trainer.train``: each rank takes its slice of every batch
(``iterate_batches`` slices by the group's rank) and the gradients are averaged over the
group. No trainer of our own: a ``TrainingCallback`` turns mlx-lm's reports into events.

Stopping: the stdin reader sees a ``stop`` command at a different moment on each rank,
and ranks must leave the loop at the same iteration or their collectives fall out of
step. So at each report (every rank reaches it at the same iteration) the ranks add
their "stop?" flags in a one-number ``all_sum``; a sum above zero ends training on every
rank there, rank 0 saves the adapter as it stands and says ``trained`` with stopped.

Checkpoints are mlx-lm's (rank 0, every ``steps_per_save``, ``NNNNNNN_adapters.safetensors``
beside ``adapters.safetensors``); the trainer writes one right after the report of its
iteration, so rank 0 notices new files at the next report and at the end.
"""

from __future__ import annotations

import argparse
import json
import queue
import threading
import time
import types
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.lora import CONFIG_DEFAULTS
from mlx_lm.tuner.callbacks import TrainingCallback
from mlx_lm.tuner.datasets import CacheDataset, load_local_dataset
from mlx_lm.tuner.trainer import TrainingArgs, train
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.utils import save_config

from core.worker import protocol as p
from core.worker.reporter import Reporter
from core.worker.sharding import ShardError, load_whole
from core.worker.vocab import Strategy

ADAPTER_FILE = "adapters.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
CHECKPOINT_GLOB = "*_adapters.safetensors"
LORA_DROPOUT, LORA_SCALE = 0.0, 20.0  # mlx_lm lora's defaults
# The settings a rank reads (core.tune.settings.TuneSettings.to_dict(); the worker does
# not import core.tune): their defaults, when a key is missing.
DEFAULTS: dict[str, Any] = {
    "iters": 200,
    "batch_size": 4,
    "learning_rate": 1e-4,
    "lora_rank": 8,
    "lora_layers": 16,
    "steps_per_report": 1,
    "steps_per_eval": 50,
    "steps_per_save": 50,
    "val_batches": 25,
    "max_seq_length": 2048,
    "seed": 0,
}


class TrainingError(ShardError):
    """The training cannot run as asked; the message says why, for a person."""


class _Stopped(Exception):
    """Every rank agreed to stop (raised from the callback, out of mlx-lm's loop)."""


def read_settings(value: str) -> dict[str, Any]:
    """``--settings``: a JSON object, or the path of a file holding one."""
    text = value
    if not value.lstrip().startswith("{"):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise TrainingError(f"cannot read the settings file {value}: {exc}") from exc
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise TrainingError(f"the settings are not JSON: {exc}") from exc
    except RecursionError:
        raise TrainingError("the settings are nested too deeply") from None
    if not isinstance(raw, dict):
        raise TrainingError("the settings must be a JSON object")
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        raise TrainingError(f"unknown fine-tune setting(s): {', '.join(unknown)}")
    return {**DEFAULTS, **raw}


def training_args(settings: dict[str, Any], out: Path) -> TrainingArgs:
    return TrainingArgs(
        batch_size=int(settings["batch_size"]),
        iters=int(settings["iters"]),
        val_batches=int(settings["val_batches"]),
        steps_per_report=int(settings["steps_per_report"]),
        steps_per_eval=int(settings["steps_per_eval"]),
        steps_per_save=int(settings["steps_per_save"]),
        max_seq_length=int(settings["max_seq_length"]),
        adapter_file=str(out / ADAPTER_FILE),
    )


def lora_config(
    settings: dict[str, Any], model: str, data: str, out: Path, layers: int
) -> dict[str, Any]:
    """``adapter_config.json`` as ``mlx_lm lora`` writes it (``vars(args)`` of its
    command line): its defaults with this run's values."""
    config: dict[str, Any] = json.loads(json.dumps(CONFIG_DEFAULTS))  # a deep copy
    config.update(
        model=model,
        data=data,
        train=True,
        fine_tune_type="lora",
        seed=int(settings["seed"]),
        num_layers=layers,
        batch_size=int(settings["batch_size"]),
        iters=int(settings["iters"]),
        val_batches=int(settings["val_batches"]),
        learning_rate=float(settings["learning_rate"]),
        steps_per_report=int(settings["steps_per_report"]),
        steps_per_eval=int(settings["steps_per_eval"]),
        adapter_path=str(out),
        save_every=int(settings["steps_per_save"]),
        max_seq_length=int(settings["max_seq_length"]),
        lora_parameters={
            "rank": int(settings["lora_rank"]),
            "dropout": LORA_DROPOUT,
            "scale": LORA_SCALE,
        },
    )
    return config


class StopFlag:
    """The ``stop`` commands the stdin reader queued: set once one arrives."""

    def __init__(self, commands: queue.Queue[p.Command] | None) -> None:
        self.event = threading.Event()
        if commands is not None:
            threading.Thread(
                target=self._watch, args=(commands,), name="macmesh-stop", daemon=True
            ).start()

    def _watch(self, commands: queue.Queue[p.Command]) -> None:
        while True:
            if commands.get()["op"] == p.OP_STOP:
                self.event.set()
                return


class Reports(TrainingCallback):
    """mlx-lm's reports as events; the agreement to stop; checkpoints noticed."""

    def __init__(
        self,
        group: mx.distributed.Group,
        events: p.EventWriter,
        iters: int,
        out: Path,
        stop: threading.Event,
    ) -> None:
        self.group, self.events, self.iters, self.out, self.stop = group, events, iters, out, stop
        self.rank = group.rank()
        self.iteration = 0
        self.train_loss: float | None = None
        self.val_loss: float | None = None
        self._seen: set[str] = set()

    def on_train_loss_report(self, info: dict[str, Any]) -> None:
        self.iteration = int(info["iteration"])
        self.train_loss = float(info["train_loss"])
        self.events.write(
            p.Train(
                event=p.TRAIN,
                rank=self.events.rank,
                t=time.monotonic(),
                iteration=self.iteration,
                iters=self.iters,
                train_loss=self.train_loss,
                learning_rate=float(info["learning_rate"]),
                tokens_per_s=float(info["tokens_per_second"]),
                trained_tokens=int(info["trained_tokens"]),
                peak_memory_bytes=int(mx.get_peak_memory()),
            )
        )
        self.checkpoints()
        if self.agreed_to_stop() and self.iteration < self.iters:
            raise _Stopped

    def on_val_loss_report(self, info: dict[str, Any]) -> None:
        self.val_loss = float(info["val_loss"])
        if self.rank == 0:
            self.events.write(
                p.Validation(
                    event=p.VALIDATION,
                    rank=self.events.rank,
                    t=time.monotonic(),
                    iteration=int(info["iteration"]),
                    val_loss=self.val_loss,
                )
            )

    def agreed_to_stop(self) -> bool:
        """Whether any rank was told to stop (every rank asks at the same iteration)."""
        local = self.stop.is_set()
        if self.group.size() == 1:
            return local
        flag = mx.array([1 if local else 0], dtype=mx.int32)
        total = mx.distributed.all_sum(flag, group=self.group, stream=mx.cpu)
        return int(total.item()) > 0  # type: ignore[arg-type]

    def checkpoints(self) -> None:
        """Rank 0: a ``checkpoint`` event for each checkpoint file written since."""
        if self.rank != 0:
            return
        for path in sorted(self.out.glob(CHECKPOINT_GLOB)):
            if path.name not in self._seen:
                self._seen.add(path.name)
                iteration = int(path.name.split("_", 1)[0])
                self.events.write(
                    p.Checkpoint(
                        event=p.CHECKPOINT,
                        rank=self.events.rank,
                        t=time.monotonic(),
                        iteration=iteration,
                        path=str(path),
                    )
                )


def finetune(
    args: argparse.Namespace,
    group: mx.distributed.Group,
    events: p.EventWriter,
    reporter: Reporter,
    commands: queue.Queue[p.Command] | None,
) -> None:
    """Load, apply LoRA, train until ``iters`` or an agreed stop; rank 0 saves and says
    ``trained``. TrainingError (one line) for what cannot run."""
    settings = read_settings(args.settings)
    if not args.data or not args.out:
        raise TrainingError("a fine-tune needs --data and --out")
    data, out = Path(args.data), Path(args.out)
    rank, size = group.rank(), group.size()
    batch = int(settings["batch_size"])
    if batch % size:
        raise TrainingError(f"the batch size ({batch}) must be a multiple of the {size} ranks")
    stop = StopFlag(commands)
    shard = load_whole(
        Path(args.model),
        progress=reporter.enter,
        float_weights={"auto": None, "float": True, "quantized": False}[args.weights],
    )
    model = shard.model
    train_set, valid_set = _datasets(data, shard.tokenizer, batch)
    mx.random.seed(int(settings["seed"]))
    np.random.seed(int(settings["seed"]))  # iterate_batches shuffles with numpy's
    model.freeze()
    layers = min(int(settings["lora_layers"]), len(model.layers))
    config = lora_config(settings, str(args.model), str(data), out, layers)
    linear_to_lora_layers(model, layers, config["lora_parameters"])
    mx.eval(model.parameters())
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        save_config(config, out / ADAPTER_CONFIG)
    reporter.stage = None  # loaded: heartbeats carry no stage from here on
    events.write(  # no ring_wait: sleeping ring waits are the serving path's
        p.Loaded(
            event=p.LOADED,
            rank=events.rank,
            t=time.monotonic(),
            load_s=0.0,
            memory_bytes=int(mx.get_active_memory()),
            layers=None,
            strategy=Strategy.SINGLE,
            device="cpu" if mx.default_device() == mx.cpu else "gpu",
            blas=None,
            weights=shard.weights,
        )
    )
    mx.eval(mx.distributed.all_sum(mx.array(1.0), group=group, stream=mx.cpu))
    if rank == 0:
        events.write(p.Ready(event=p.READY, rank=events.rank, t=time.monotonic()))
    iters = int(settings["iters"])
    reports = Reports(group, events, iters, out, stop.event)
    stopped = False
    try:
        train(
            model=model,
            optimizer=optim.Adam(learning_rate=float(settings["learning_rate"])),
            train_dataset=train_set,
            val_dataset=valid_set,
            args=training_args(settings, out),
            training_callback=reports,
        )
    except _Stopped:
        stopped = True
    except ValueError as exc:  # what mlx-lm refuses in the data or settings
        raise TrainingError(f"mlx-lm refused the training: {exc}") from exc
    except (MemoryError, RuntimeError) as exc:
        if "memory" in str(exc).lower() or isinstance(exc, MemoryError):
            raise TrainingError(
                f"ran out of memory while training ({exc}); lower the batch size or the "
                "longest example"
            ) from exc
        raise
    if rank == 0:
        if stopped:  # the trainer saves only when it ends by itself
            weights = dict(tree_flatten(model.trainable_parameters()))
            mx.save_safetensors(str(out / ADAPTER_FILE), weights)
        reports.checkpoints()
        events.write(
            p.Trained(
                event=p.TRAINED,
                rank=events.rank,
                t=time.monotonic(),
                adapter=str(out),
                iterations=reports.iteration,
                train_loss=reports.train_loss,
                val_loss=reports.val_loss,
                stopped=stopped,
            )
        )
    # Every rank leaves together: rank 0 has written the adapter before any rank exits.
    mx.eval(mx.distributed.all_sum(mx.array(1.0), group=group, stream=mx.cpu))


def _datasets(data: Path, tokenizer: Any, batch: int) -> tuple[CacheDataset, CacheDataset | None]:
    """The train and validation sets as ``mlx_lm lora`` builds them from a folder."""
    if not (data / "train.jsonl").is_file():
        raise TrainingError(f"the data folder {data} has no train.jsonl")
    config = types.SimpleNamespace(mask_prompt=False)
    try:
        train_set, valid_set, _ = load_local_dataset(data, tokenizer, config)
    except (ValueError, KeyError) as exc:
        raise TrainingError(f"mlx-lm cannot read the data in {data}: {_line(exc)}") from exc
    if len(train_set) < batch:
        raise TrainingError(
            f"train.jsonl has {len(train_set)} example(s), fewer than the batch size ({batch})"
        )
    if len(valid_set) and len(valid_set) < batch:
        raise TrainingError(
            f"valid.jsonl has {len(valid_set)} example(s), fewer than the batch size ({batch})"
        )
    train_cache = _tokenized(CacheDataset(train_set), "train.jsonl")
    valid_cache = _tokenized(CacheDataset(valid_set), "valid.jsonl") if len(valid_set) else None
    return train_cache, valid_cache


def _tokenized(dataset: CacheDataset, name: str) -> CacheDataset:
    """Every example through mlx-lm's own processing now (it caches them), so an example
    it cannot use is named before training rather than failing a step later."""
    for index in range(len(dataset)):
        try:
            dataset[index]
        except Exception as exc:
            raise TrainingError(
                f"{name} line {index + 1}: mlx-lm cannot use it: {_line(exc)}"
            ) from exc
    return dataset


def _line(exc: BaseException) -> str:
    """An exception's first line (mlx-lm's messages may go on with a link)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
