"""``macmesh finetune``: LoRA on the cluster, data parallel, with mlx-lm's own trainer.

``macmesh finetune [MODEL] --data PATH --demo [--nodes N]`` on the demo cluster (the demo
model by default), or ``macmesh finetune MODEL --data PATH --hosts a,b,...`` on real Macs.
One line per report (step, loss, tokens/s, every node's memory, time left), or one JSON
line each with ``--json``; then a summary with the adapter's folder. Ctrl-C stops the
ranks at their next report and keeps the adapter as it stands.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from core.cli.demo import demo_model_said
from core.cli.interrupt import INTERRUPTED, Stage, first_interrupt_only, interrupted
from core.cli.steps import follow
from core.cli.where import add_where_arguments, where_hosts
from core.library.resolve import resolve_model
from core.model.info import ModelError, ModelInfo, read_model_info
from core.run.states import RunState
from core.run.tasks.finetune import STOP_WITHIN_S, FineTune, TrainReport, default_settings, refusals
from core.tune.adapters import Adapter
from core.tune.settings import TuneSettings
from core.units import rate, seconds, size

# What a person can fix, said in one line.
REFUSED: tuple[type[Exception], ...] = (ModelError, ValueError, *refusals())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model", nargs="?", help="the base model (default with --demo: the demo model)"
    )
    parser.add_argument("--data", required=True, type=Path, help="a folder or a .jsonl file")
    add_where_arguments(parser)
    # Unset: the data's own defaults (the shipped demo set has its settings), else TuneSettings'.
    defaults = TuneSettings()
    parser.add_argument("--iters", type=int, help=f"training steps (default {defaults.iters})")
    parser.add_argument(
        "--batch-size", type=int, help=f"examples per step, in all (default {defaults.batch_size})"
    )
    parser.add_argument("--learning-rate", type=float, help=f"(default {defaults.learning_rate:g})")
    parser.add_argument("--lora-rank", type=int, help=f"(default {defaults.lora_rank})")
    parser.add_argument("--name", help="the adapter's name (default: the model's and the date)")
    parser.add_argument("--json", action="store_true", help="one JSON line per report")


def finetune_cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="macmesh finetune", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    stage = Stage("reading the model")
    with first_interrupt_only():
        return run_finetune(args, sys.stdout, sys.stderr, stage)


def run_finetune(args: argparse.Namespace, out: TextIO, err: TextIO, stage: Stage) -> int:
    try:
        tune = _prepare(args, err, stage)
    except KeyboardInterrupt:
        return interrupted(stage, err)
    except REFUSED as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    printer = _Printer(out, args.json, tune)
    try:
        stage("starting the ranks")
        if not tune.start():
            why = tune.session.error or f"nothing was started ({tune.state})"
            err.write(f"macmesh: {why}\n")
            return 1
        stage("training")
        err.write(f"Training on {', '.join(tune.nodes)}…\n")
        err.flush()
        adapter = tune.wait()
    except KeyboardInterrupt:
        if tune.session.job is None:  # still in a step: nothing trains yet
            tune.cancel()
            return interrupted(stage, err)
        err.write("\nmacmesh: stopping at the next step (the adapter is kept)…\n")
        err.flush()
        tune.stop()
        try:
            adapter = tune.wait(STOP_WITHIN_S)
        except TimeoutError:
            tune.cancel()
            adapter = tune.wait(STOP_WITHIN_S)
        printer.summary(adapter, tune, err)
        return INTERRUPTED
    except REFUSED as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    printer.summary(adapter, tune, err)
    return 1 if tune.state == RunState.FAILED or tune.error else 0


def _prepare(args: argparse.Namespace, err: TextIO, stage: Stage) -> FineTune:
    hosts = where_hosts(args, "a fine-tune on the cluster needs")
    info = _model(args, err, stage)
    given = {
        "iters": args.iters,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "lora_rank": args.lora_rank,
    }
    base = default_settings(args.data).to_dict()
    settings = TuneSettings.from_dict({**base, **{k: v for k, v in given.items() if v is not None}})
    settings.check(len(hosts))
    tune = FineTune(info, hosts, args.data, settings, name=args.name, watch=follow(stage, err))
    stage.session = tune.session
    return tune


def _model(args: argparse.Namespace, err: TextIO, stage: Stage) -> ModelInfo:
    if args.model:
        return resolve_model(args.model, to_run=True)
    if not args.demo:
        raise ModelError("name the base model: a folder, a name `macmesh models` lists")
    return read_model_info(demo_model_said(err, stage))


class _Printer:
    """Each report as one line (words or JSON), from the job's threads, in order."""

    def __init__(self, out: TextIO, as_json: bool, tune: FineTune) -> None:
        self.out, self.as_json = out, as_json
        self._lock = threading.Lock()
        tune.report.connect(self.report)
        tune.validated.connect(self.validated)
        tune.checkpoint.connect(self.checkpoint)

    def write(self, words: str, record: dict[str, Any]) -> None:
        with self._lock:
            self.out.write((json.dumps(record) if self.as_json else words) + "\n")
            self.out.flush()

    def report(self, r: TrainReport) -> None:
        memory = ", ".join(f"{node} {size(v)}" for node, v in r.peak_memory_bytes.items())
        eta = f", {seconds(r.eta_s)} left" if r.eta_s is not None else ""
        words = (
            f"step {r.iteration}/{r.iters}: loss {r.train_loss:.3f}, "
            f"{rate(r.tokens_per_s)} tokens/s, learning rate {r.learning_rate:.2g}; "
            f"memory {memory}{eta}"
        )
        self.write(words, {"event": "train", **asdict(r)})

    def validated(self, iteration: int, loss: float) -> None:
        words = f"step {iteration}: validation loss {loss:.3f}"
        self.write(words, {"event": "validation", "iteration": iteration, "val_loss": loss})

    def checkpoint(self, iteration: int, path: str) -> None:
        words = f"step {iteration}: checkpoint {path}"
        self.write(words, {"event": "checkpoint", "iteration": iteration, "path": path})

    def summary(self, adapter: Adapter | None, tune: FineTune, err: TextIO) -> None:
        meta = _fields(adapter)
        record = {
            "event": "summary",
            "adapter": str(meta["path"]) if meta else None,
            "iterations": meta.get("iterations") if meta else 0,
            "train_loss": meta.get("train_loss") if meta else None,
            "val_loss": meta.get("val_loss") if meta else None,
            "stopped": meta.get("stopped") if meta else None,
            "error": tune.error or None,
        }
        if tune.error:
            err.write(f"macmesh: the fine-tune failed: {tune.error}\n")
        if meta:
            kept = "stopped early, kept as it stood" if meta.get("stopped") else "trained"
            loss = meta.get("train_loss")
            words = (
                f"Adapter {kept}: {meta['path']} ({meta.get('iterations')} steps"
                + (f", loss {loss:.3f}" if isinstance(loss, float) else "")
                + ")"
            )
        else:
            words = "No adapter: nothing was trained."
        self.write(words, record)
        if tune.not_kept:
            err.write(f"macmesh: {tune.not_kept}\n")


def _fields(adapter: Adapter | None) -> dict[str, Any]:
    """The adapter's fields for the summary."""
    if adapter is None:
        return {}
    return {
        k: getattr(adapter, k) for k in ("path", "iterations", "train_loss", "val_loss", "stopped")
    }
