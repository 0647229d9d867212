"""Run a model on real Macs: hosts → probe → plan → preflight → copy → job → answer → stop.

``macmesh run MODEL --hosts a,b,...`` is ``run_cli``; the steps are separate functions
so the app's Start can take the same path: ``make_targets`` (what the person typed),
``probe_targets`` (facts over SSH, in parallel, for the planner), ``plan_cluster``
(the planner on those facts), ``core.run.preflight.run_preflight`` (every check with its
fix, and the backend: jaccl when RDMA joins the ranks as it needs, else ring, said
plainly), ``copy_missing`` (each node gets the files its rank needs, ``core.remote.modelcopy``),
``cluster_spec`` (the plan as a ``JobSpec`` on targets, in the plan's rank order, each
rank's model folder on its node) and ``show_launch`` (the equivalent ``mlx.launch``
command and hostfile). Running, streaming and summarising are ``core.run.demo``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from core.bundle import worker_python
from core.cluster.hosts import parse_host
from core.cluster.probe.facts import NodeFacts
from core.cluster.probe.remote import probe_over_ssh
from core.cluster.rdma import node_verdict
from core.envvars import ENV_REMOTE_CACHE
from core.model.info import ModelError, ModelInfo, read_model_info
from core.plan.memory import Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.remote.modelcopy import CopyProgress, ModelCopyError, copy_model, remote_model_dir
from core.remote.ship import worker_bundle
from core.remote.ssh import SSHError, UnknownHostKey
from core.remote.targets import Target
from core.run import mlxenv
from core.run.demo import DEFAULT_PROMPT, MAX_TOKENS, run_and_summarise
from core.run.launcher import JobSpec
from core.run.preflight import (
    BACKENDS,
    BackendChoice,
    PreflightReport,
    format_report,
    run_preflight,
)
from core.units import bytes_per_s, duration, size
from core.worker.vocab import Strategy


class ClusterError(Exception):
    """The cluster cannot run this job; the message says why and what to do."""


def make_targets(
    hosts: Sequence[str], python: str | None = None, cache_root: str | None = None
) -> list[Target]:
    """Targets from ``[user@]host[:port]`` strings. ``cache_root`` may hold ``{host}``
    (the host as typed), so simulated hosts on one machine keep separate folders."""
    targets = []
    for text in hosts:
        host = parse_host(text)
        name = str(host)
        root = cache_root.replace("{host}", name.replace("/", "_")) if cache_root else None
        targets.append(
            Target(name, host.host, host.port, host.user, python=python, cache_root=root)
        )
    if len({t.name for t in targets}) != len(targets):
        raise ClusterError("a host is listed twice in --hosts")
    return targets


def probe_targets(targets: Sequence[Target]) -> list[NodeFacts]:
    """Every target's facts over SSH, in parallel. ClusterError naming each host that
    could not be probed."""

    def probe(target: Target) -> NodeFacts:
        with target.connection() as connection:
            return probe_over_ssh(connection, target.name, python=target.interpreter)

    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        futures = [pool.submit(probe, t) for t in targets]
    facts, problems = [], []
    for target, future in zip(targets, futures, strict=True):
        try:
            facts.append(future.result())
        except UnknownHostKey as exc:
            problems.append(
                f"{exc} (`ssh -p {target.port} {target.host}` once accepts it for MacMesh too.)"
            )
        except SSHError as exc:
            problems.append(str(exc))
    if problems:
        raise ClusterError("\n".join(problems))
    return facts


def plan_cluster(info: ModelInfo, facts: Sequence[NodeFacts], strategy: str = "auto") -> Plan:
    """The planner's verdict on the probed nodes (memory as each node reported it)."""
    unknown = [f for f in facts if not f.memory_bytes]
    if unknown:
        why = "; ".join(
            f"{f.name}: {f.unknowns.get('memory_bytes', 'not reported')}" for f in unknown
        )
        raise ClusterError(f"Cannot plan: the memory of some nodes is unknown ({why}).")
    nodes = [
        Node(
            f.name,
            int(f.memory_bytes or 0),
            wired_limit_mb=f.wired_limit_mb,
            chip=f.chip,
            rdma=node_verdict(f).on,
            cpu=f.runs_on_cpu,
        )
        for f in facts
    ]
    if len(nodes) == 1:
        strategy = Strategy.SINGLE
    return make_plan(info, nodes, options=PlanOptions(strategy=strategy))  # type: ignore[arg-type]


def in_rank_order(plan: Plan, targets: Sequence[Target]) -> list[Target]:
    by_name = {t.name: t for t in targets}
    return [by_name[name] for name in plan.nodes_used]


def copy_missing(
    report: PreflightReport,
    targets: Sequence[Target],
    model_dir: Path,
    progress: Callable[[CopyProgress], None] | None = None,
) -> None:
    """Copy each node's part of the model where preflight found it missing, in parallel
    (resumable and verified: ``core.remote.modelcopy``). ClusterError naming each failure."""
    by_name = {t.name: t for t in targets}
    todo = [(by_name[name], report.manifests[name]) for name in report.copies_needed]
    with ThreadPoolExecutor(max_workers=max(1, len(todo))) as pool:
        futures = [pool.submit(copy_model, t, part, model_dir, progress) for t, part in todo]
    problems = []
    for future in futures:
        try:
            future.result()
        except (ModelCopyError, SSHError) as exc:
            problems.append(str(exc))
    if problems:
        raise ClusterError("\n".join(problems) + "\nRun again: the copy resumes.")


def model_folders(
    report: PreflightReport, plan: Plan, targets: Sequence[Target], model_dir: Path
) -> list[str]:
    """Each rank's model folder on its node, rank order (this Mac's own for a local rank)."""
    return [
        str(model_dir) if t.local else remote_model_dir(t, report.manifests[t.name])
        for t in in_rank_order(plan, targets)
    ]


def cluster_spec(
    info: ModelInfo,
    plan: Plan,
    targets: Sequence[Target],
    backend: BackendChoice,
    rank_models: Sequence[str] | None = None,
    **fields,
) -> JobSpec:
    """What runs is what was planned, on the targets in the plan's rank order."""
    ordered = in_rank_order(plan, targets)
    return JobSpec(
        model=info.path,
        strategy=plan.strategy,
        split=list(plan.split) if plan.split and plan.strategy is Strategy.PIPELINE else None,
        backend=backend.name,
        targets=ordered,
        devices=backend.devices,
        rank_models=[Path(folder) for folder in rank_models] if rank_models else None,
        weights=[rank.worker_weights for rank in plan.ranks],
        **fields,
    )


def show_launch(spec: JobSpec) -> dict:
    """The equivalent ``mlx.launch`` command and hostfile (run it from a folder holding
    MacMesh's ``core/worker``, on every node)."""
    targets = spec.targets or []
    names = [f"{t.user}@{t.host}" if t.user else t.host for t in targets]
    jaccl = spec.backend.is_jaccl
    ips = [[t.rank_address] if (not jaccl or rank == 0) else [] for rank, t in enumerate(targets)]
    hostfile = mlxenv.launch_hostfile(spec.backend, names, ips, rdma=spec.devices)
    python = targets[0].interpreter if targets else spec.python
    digest, _ = worker_bundle()
    command = mlxenv.launch_command("hostfile.json", python, spec.worker_args(0))
    return {"command": command, "hostfile": hostfile, "worker_hash": digest}


# -- the command ------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model", type=Path, help="the model folder on this Mac (copied to nodes that lack it)"
    )
    parser.add_argument("--hosts", required=True, help="[user@]host[:port],... in any order")
    parser.add_argument("--strategy", choices=("auto", "pipeline", "tensor"), default="auto")
    parser.add_argument("--backend", choices=BACKENDS, default="auto")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--python", help="the Python on every node (default: this one's path)")
    parser.add_argument(
        "--cache-root",
        default=os.environ.get(ENV_REMOTE_CACHE) or None,
        help="MacMesh's folder on every node ({host} is replaced by the host); default the "
        f"node's cache folder, or ${ENV_REMOTE_CACHE}",
    )
    parser.add_argument(
        "--show-launch", action="store_true", help="print the equivalent mlx.launch; run nothing"
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON summary line")


def run_cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="macmesh run", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Probe, plan, launch, ask once, stream the answer, summarise, stop every rank."""
    try:
        if not 1 <= args.max_tokens <= MAX_TOKENS:
            raise ClusterError(f"--max-tokens must be 1 to {MAX_TOKENS:,}")
        info = read_model_info(args.model)
        hosts = [h for h in args.hosts.split(",") if h.strip()]
        targets = make_targets(hosts, args.python, args.cache_root)
        err.write(f"{info.summary()}\nProbing {len(targets)} host(s)…\n")
        facts = probe_targets(targets)
        asked = [t.interpreter for t in targets]
        # Each node's worker Python: --python, else MacMesh.app there when fitting.
        targets = [
            replace(t, python=worker_python(t.python, f))
            for t, f in zip(targets, facts, strict=True)
        ]
        plan = plan_cluster(info, facts, args.strategy)
        if plan.verdict != "fits":
            raise ClusterError(plan.reason)
        err.write(f"{plan.reason}\nChecking the nodes…\n")
        # Preflight reuses those facts, except where the worker's Python has changed.
        probed = {
            t.name: f
            for t, f, python in zip(targets, facts, asked, strict=True)
            if t.interpreter == python
        }
        report = run_preflight(targets, plan, info.path, args.backend, facts=probed)
        err.write(format_report(report))
        if args.show_launch and report.backend.problem and args.backend != "auto":
            raise ClusterError(report.backend.reason)
        if not args.show_launch:
            if not report.ok:
                raise ClusterError("the checks above failed; nothing was started")
            copy_missing(report, targets, info.path, _progress_printer(err))
        backend = report.backend
        spec = cluster_spec(
            info, plan, targets, backend, model_folders(report, plan, targets, info.path)
        )
    except (ClusterError, ModelError, ValueError) as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    if args.show_launch:
        launch = show_launch(spec)
        if args.json:
            out.write(json.dumps(launch) + "\n")
        else:
            out.write(
                "# on every node, MacMesh's core/ and core/worker/ (worker "
                f"{launch['worker_hash']}) must be importable: add --cwd <that folder>\n"
            )
            out.write(" ".join(launch["command"]) + "\n")
            out.write("hostfile.json:\n" + json.dumps(launch["hostfile"], indent=2) + "\n")
        return 0
    err.write(f"Starting {spec.nodes} rank(s) on {', '.join(plan.nodes_used)}…\n")
    about = {
        "strategy": spec.rank_strategy,
        "nodes": spec.nodes,
        "hosts": list(plan.nodes_used),
        "backend": spec.rank_backend,
        "split": spec.split,
        "model": info.name,
        "preflight": [check.to_dict() for check in report.checks],
    }
    return run_and_summarise(spec, args, about, "the cluster", out, err)


def _progress_printer(err: TextIO) -> Callable[[CopyProgress], None]:
    """Copy progress on stderr: a line per node at each tenth, and when verified."""
    shown: dict[str, tuple[str, int]] = {}
    lock = threading.Lock()

    def show(progress: CopyProgress) -> None:
        step = (progress.phase, int(progress.fraction * 10))
        with lock:
            if shown.get(progress.node) == step:
                return
            shown[progress.node] = step
            rate = f", {bytes_per_s(progress.rate)}" if progress.rate else ""
            eta = f", about {duration(progress.eta_s)} left" if progress.eta_s else ""
            err.write(
                f"Copying the model to {progress.node}: {progress.phase} "
                f"{size(progress.bytes_done)} of {size(progress.bytes_total)}"
                f"{rate}{eta}\n"
            )
            err.flush()

    return show
