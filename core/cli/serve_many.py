"""``macmesh serve`` with several models (issue 37): ``--model A --model B`` (loaded at
start), ``--loadable C`` (loaded on its first request), ``--keep-alive`` (an idle model
unloads after it; default 30 min), or ``--models-file F``, a small JSON file::

    {"models": [{"model": "A", "strategy": "pipeline", "nodes": [1, 2]},
                {"model": "C", "load": "on-demand", "keep_alive": "10m", "nodes": [3]}]}

On the demo (``--demo``) the models run on the simulated Macs; with ``--hosts`` on real
Macs (each load runs the probe, plan, checks and copy). Each model has its own plan: a
strategy and a set of Macs (``--model A@pipeline:1,2``, a file's ``"strategy"``,
``"nodes"`` or ``"hosts"``: ``core.cli.model_plans``; else ``--strategy`` on every Mac).
Each loaded model is its own job. Before anything loads, the models that load at start
are placed together, each on its own Macs (``core.plan.placement_many``): a set that
does not fit is refused, naming the model to leave out.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from core.cli.demo import demo_model_said
from core.cli.interrupt import Stage
from core.cli.model_plans import OwnPlan, chosen_hosts, demo_macs, plan_of_item, split_model
from core.cli.options import split_of
from core.cli.session import make_targets, serving_of
from core.jsonfile import FileProblem, read_json
from core.library.resolve import resolve_model
from core.model.info import ModelInfo, read_model_info
from core.plan.placement_many import place_together
from core.plan.planner import Plan
from core.run import demo
from core.run.errors import ClusterError
from core.run.session import Host, Session, real_hosts, simulated_hosts
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
MAX_DEPTH = 8  # {"models": [{"hosts": [...]}]} is 4 deep
MAX_MODELS = 64
EVERY_MAC = OwnPlan()  # no plan of its own: --strategy on every Mac


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loadable",
        action="append",
        metavar="MODEL[@STRATEGY][:MACS]",
        help="a model served on demand: loaded on its first request (repeatable; its own "
        "plan as --model's)",
    )
    parser.add_argument(
        "--keep-alive",
        default="30m",
        help="an idle model unloads after this (seconds, or 30s / 10m / 1h; -1: never; "
        "default 30m); a request's Ollama keep_alive overrides it",
    )
    parser.add_argument(
        "--models-file",
        type=Path,
        help='a JSON file naming the models: {"models": [{"model": A, "load": "start" or '
        '"on-demand", "keep_alive": "10m", "strategy": "pipeline", "nodes": [1, 2] (the '
        'demo) or "hosts": [...] (out of --hosts)}, ...]}',
    )


def wants_many(args: argparse.Namespace) -> bool:
    """Several models, or one with its own plan (``MODEL@STRATEGY:MACS``)."""
    named = args.demo_model or []
    own = any("@" in m and not Path(m).exists() for m in named)
    return len(named) > 1 or own or bool(args.loadable) or args.models_file is not None


@dataclass(frozen=True)
class NamedModel:
    """A model the arguments name: whether it loads at start, its keep-alive, and its own
    plan (``core.cli.model_plans``: a strategy and a set of Macs)."""

    model: str
    at_start: bool
    keep_alive_s: float
    own: OwnPlan = EVERY_MAC


def model_list(args: argparse.Namespace) -> list[NamedModel]:
    """Each model the arguments name, its own plan checked against the Macs given."""
    try:
        default_keep = parse_keep_alive(args.keep_alive)
    except ValueError as error:
        raise ClusterError(f"--keep-alive: {error}") from None
    keep = DEFAULT_KEEP_ALIVE_S if default_keep is None else default_keep
    named: list[NamedModel] = []
    if args.model is not None:
        named.append(NamedModel(args.model, True, keep))
    for texts, at_start in ((args.demo_model or [], True), (args.loadable or [], False)):
        for text in texts:
            try:
                model, own = split_model(text)
            except ValueError as error:
                raise ClusterError(str(error)) from None
            named.append(NamedModel(model, at_start, keep, own))
    if args.models_file is not None:
        named += _from_file(args.models_file, keep, bool(args.demo))
    if not named:
        raise ClusterError("name the models: --model A --model B, or --models-file")
    for entry in named:
        try:
            _macs_of(args, entry.own)
        except (ValueError, ClusterError) as error:
            raise ClusterError(f"{entry.model}: {error}") from None
    return named


FILE_KEYS = ("model", "load", "keep_alive", "strategy", "hosts", "nodes")


def _from_file(path: Path, keep: float, demo: bool) -> list[NamedModel]:
    """The models of a models file (hostile: ``core.jsonfile`` reads it; one line each)."""
    try:
        data = read_json(path, cap=MAX_FILE, depth=MAX_DEPTH)
    except FileProblem as problem:
        raise ClusterError(f"--models-file {path}: cannot be read ({problem.what})") from None
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models or len(models) > MAX_MODELS:
        raise ClusterError(
            f'--models-file {path}: expected {{"models": [{{"model": ...}}, ...]}} '
            f"(1 to {MAX_MODELS} models)"
        )
    extra = sorted(str(k)[:40] for k in data if k != "models")
    if extra:
        raise ClusterError(f'--models-file {path}: unknown key {extra[0]!r} (only "models")')
    out = []
    for i, item in enumerate(models):
        name = item.get("model") if isinstance(item, dict) else None
        load = item.get("load", "start") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name or load not in ("start", "on-demand"):
            raise ClusterError(
                f'--models-file {path}: model {i + 1} needs "model": NAME and '
                '"load": "start" or "on-demand"'
            )
        assert isinstance(item, dict)
        unknown = [str(k)[:40] for k in item if k not in FILE_KEYS]
        if unknown:
            raise ClusterError(
                f"--models-file {path}: model {i + 1}: unknown key {unknown[0]!r} "
                f"(known: {', '.join(FILE_KEYS)})"
            )
        try:
            own_keep = parse_keep_alive(item.get("keep_alive"))
            own = plan_of_item(item, demo)
        except ValueError as error:
            raise ClusterError(f"--models-file {path}: model {i + 1}: {error}") from None
        out.append(NamedModel(name, load == "start", keep if own_keep is None else own_keep, own))
    return out


def _macs_of(args: argparse.Namespace, own: OwnPlan) -> list[Host]:
    """The hosts ``own`` chooses: the demo's simulated Macs, or out of ``--hosts``."""
    if args.demo:
        facts = demo.demo_facts(args.nodes)
        chosen = demo_macs(own, facts, [f.name for f in facts])
        return simulated_hosts(chosen)
    hosts = [h for h in (args.hosts or "").split(",") if h.strip()]
    return real_hosts(make_targets(chosen_hosts(own, hosts), args.python, args.cache_root))


def session_maker(
    args: argparse.Namespace, info: ModelInfo, own: OwnPlan = EVERY_MAC
) -> Callable[[], Session]:
    """A new session of ``info`` on its own Macs with its own strategy (``own``; else
    the demo's simulated Macs or the ``--hosts``, with ``--strategy``)."""
    strategy = own.strategy or Strategy(args.strategy)

    def make() -> Session:
        hosts = _macs_of(args, own)
        if args.demo:
            return Session(
                info,
                hosts,
                strategy=Strategy.PIPELINE if strategy == Strategy.AUTO else strategy,
                split=split_of(args),
                serving=serving_of(args),
            )
        return Session(
            info,
            hosts,
            strategy=strategy,
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
    for named in model_list(args):
        if args.demo and named.model == "demo":
            info = read_model_info(demo_model_said(err, stage))
        else:
            info = resolve_model(named.model, to_run=True)
        if any(s.name == info.name for s in specs):
            raise ClusterError(f"{info.name} is named twice: name each model once")
        make = session_maker(args, info, named.own)
        specs.append(ModelSpec(info.name, make, named.at_start, named.keep_alive_s))
        if named.at_start and args.demo:
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
