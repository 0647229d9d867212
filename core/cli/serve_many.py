"""``macmesh serve`` with several models (issue 37): ``--model A --model B`` (loaded at
start), ``--loadable C`` (loaded on its first request), ``--keep-alive`` (an idle model
unloads after it; default 30 min), or ``--models-file F``, a small JSON file::

    {"models": [{"model": "A"}, {"model": "C", "load": "on-demand", "keep_alive": "10m"}]}

On the demo (``--demo``) every model runs on the simulated Macs; with ``--hosts`` on real
Macs (each load runs the probe, plan, checks and copy). Each loaded model is its own
job. Before anything loads, the models that load at start are placed together
(``core.plan.placement_many``): a set that does not fit is refused, naming the model to
leave out.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from core.cli.demo import demo_model_said
from core.cli.interrupt import Stage
from core.cli.options import split_of
from core.cli.session import make_targets, serving_of
from core.library.resolve import resolve_model
from core.model.info import ModelInfo, read_model_info
from core.plan.placement_many import place_together
from core.plan.planner import Plan
from core.run import demo
from core.run.errors import ClusterError
from core.run.session import Session, real_hosts, simulated_hosts
from core.run.states import Step
from core.run.tasks.adapter_payload import adapter_payloads
from core.serve.keep_alive import DEFAULT_KEEP_ALIVE_S, parse_keep_alive
from core.serve.keys import Gate, KeyStore
from core.serve.model_list import describe
from core.serve.models import ModelRegistry, ModelSpec, ServeSettings
from core.serve.serve_many import ManyServer
from core.settings import load_settings
from core.worker.vocab import Strategy

MAX_FILE = 64 << 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loadable",
        action="append",
        metavar="MODEL",
        help="a model served on demand: loaded on its first request (repeatable)",
    )
    parser.add_argument(
        "--keep-alive",
        default="30m",
        help="an idle model unloads after this (seconds, or 30s / 10m / 1h; -1: never; "
        "default 30m); a request's Ollama keep_alive overrides it",
    )
    parser.add_argument(
        "--models-file", type=Path, help="a JSON file naming the models (see the docs)"
    )


def wants_many(args: argparse.Namespace) -> bool:
    named = args.demo_model or []
    return len(named) > 1 or bool(args.loadable) or args.models_file is not None


def model_list(args: argparse.Namespace) -> list[tuple[str, bool, float]]:
    """(model, loads at start, keep-alive) for each model the arguments name."""
    try:
        default_keep = parse_keep_alive(args.keep_alive)
    except ValueError as error:
        raise ClusterError(f"--keep-alive: {error}") from None
    keep = DEFAULT_KEEP_ALIVE_S if default_keep is None else default_keep
    named: list[tuple[str, bool, float]] = []
    if args.model is not None:
        named.append((args.model, True, keep))
    named += [(m, True, keep) for m in args.demo_model or []]
    named += [(m, False, keep) for m in args.loadable or []]
    if args.models_file is not None:
        named += _from_file(args.models_file, keep)
    if not named:
        raise ClusterError("name the models: --model A --model B, or --models-file")
    return named


def _from_file(path: Path, keep: float) -> list[tuple[str, bool, float]]:
    try:
        raw = path.read_bytes()[: MAX_FILE + 1]
        if len(raw) > MAX_FILE:
            raise ValueError("larger than 64 KB")
        data = json.loads(raw)
    except (OSError, ValueError) as error:
        raise ClusterError(f"--models-file {path}: cannot be read ({error})") from None
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models:
        raise ClusterError(f'--models-file {path}: expected {{"models": [{{"model": ...}}]}}')
    out = []
    for i, item in enumerate(models):
        name = item.get("model") if isinstance(item, dict) else None
        load = item.get("load", "start") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name or load not in ("start", "on-demand"):
            raise ClusterError(
                f'--models-file {path}: model {i + 1} needs "model": NAME and '
                '"load": "start" or "on-demand"'
            )
        try:
            own = parse_keep_alive(item.get("keep_alive"))
        except ValueError as error:
            raise ClusterError(f"--models-file {path}: model {i + 1}: {error}") from None
        out.append((name, load == "start", keep if own is None else own))
    return out


def session_maker(args: argparse.Namespace, info: ModelInfo) -> Callable[[], Session]:
    """A new session of ``info`` on the demo's simulated Macs or the ``--hosts``."""

    def make() -> Session:
        if args.demo:
            strategy = Strategy.PIPELINE if args.strategy == Strategy.AUTO else args.strategy
            return Session(
                info,
                simulated_hosts(demo.demo_facts(args.nodes)),
                strategy=strategy,
                split=split_of(args),
                serving=serving_of(args),
            )
        hosts = [h for h in args.hosts.split(",") if h.strip()]
        return Session(
            info,
            real_hosts(make_targets(hosts, args.python, args.cache_root)),
            strategy=args.strategy,
            backend=args.backend,
            verify=args.verify,
            split=split_of(args),
            payloads=adapter_payloads(info, args.adapter),
            model_source=args.model_source or load_settings().model_source,
            serving=serving_of(args),
        )

    return make


def specs_of(args: argparse.Namespace, err: TextIO, stage: Stage) -> list[ModelSpec]:
    """A spec per model named; the ones loading at start placed together first."""
    specs: list[ModelSpec] = []
    plans: list[tuple[str, Plan]] = []
    for named, at_start, keep in model_list(args):
        if args.demo and named == "demo":
            info = read_model_info(demo_model_said(err, stage))
        else:
            info = resolve_model(named, to_run=True)
        if any(s.name == info.name for s in specs):
            raise ClusterError(f"{info.name} is named twice: name each model once")
        make = session_maker(args, info)
        specs.append(ModelSpec(info.name, make, at_start, keep))
        if at_start and args.demo:
            session = make()
            try:
                session.start(Step.PLAN)
            except ClusterError as error:  # as place_together says it of a set
                raise ClusterError(
                    f"Leave out {info.name}: it does not fit alone ({error})"
                ) from None
            if session.plan is not None:
                plans.append((info.name, session.plan))
    placement = place_together(plans)
    if not placement.fits:
        raise ClusterError(placement.reason)
    return specs


def serve_many(
    args: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    stage: Stage,
    key: str | None,
    key_line: str,
) -> int:
    """Serve every model until Ctrl-C or SIGTERM; 2 when nothing could be served."""
    stage("reading the models")
    specs = specs_of(args, err, stage)
    gate = Gate(open_=True) if args.no_key else Gate(key=key, store=KeyStore())
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            out.write(line + "\n")
            out.flush()

    settings = ServeSettings(
        gate, say, args.max_waiting, args.shared_prompt_cache, args.metrics_without_key
    )
    registry = ModelRegistry(specs, settings)
    server = ManyServer(registry, args.host, args.port)
    stage.session = None
    try:
        stage("loading the models")
        failures = server.start()
        for line in failures:
            err.write(f"macmesh: {line}\n")
        err.flush()
        loaded = [e.name for e in registry.loaded()]
        on_demand = [s.name for s in specs if not s.load_at_start]
        if not loaded and not on_demand:
            err.write("macmesh: no model could be loaded; nothing is served\n")
            return 2
        stage("serving")
        what = ", ".join(loaded) or "no model yet"
        more = f"; on demand: {', '.join(on_demand)}" if on_demand else ""
        say(f"Serving {what}{more} at {server.address} ({key_line}). Ctrl-C stops.")
        idle = threading.Event()
        while not idle.wait(0.5):  # until Ctrl-C or SIGTERM (taken between waits)
            pass
        return 0
    finally:
        server.stop()


def describe_all(registry: ModelRegistry) -> list[dict[str, Any]]:
    return [describe(e) for e in registry.entries.values()]
