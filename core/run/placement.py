"""Where and how a plan runs: the hosts probed over SSH, each rank's target and model
folder, the ``JobSpec``, and the equivalent ``mlx.launch``: the pieces of a Start that
are not its sequence.

``core.run.session.Session`` sequences them (probe → plan → preflight → copy → launch);
``macmesh run`` and the window's Start both drive that session. Here:

- ``probe_targets``: every target's facts over SSH, in parallel;
- ``job_spec``: the plan as a ``JobSpec`` (the demo's local ranks, or targets in the
  plan's rank order with each rank's model folder on its node);
- ``show_launch`` / ``demo_launch`` / ``planned_launch``: the equivalent ``mlx.launch``
  command and hostfile, for the dialog, ``macmesh run --show-launch`` and people who run
  jobs by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from core.cluster.probe.facts import NodeFacts
from core.cluster.probe.remote import probe_over_ssh
from core.model.info import ModelInfo
from core.plan.planner import Plan
from core.remote.modelcheck import remote_model_dir
from core.remote.ship import worker_bundle
from core.remote.ssh import SSHError, UnknownHostKey
from core.remote.targets import Target
from core.run.checks.backend_choice import BackendChoice, choose_backend
from core.run.checks.report import PreflightReport
from core.run.errors import ClusterError  # re-exported: imported from here before
from core.run.job import mlxenv
from core.run.job.launcher import JobSpec
from core.worker.vocab import Backend, Strategy


def probe_targets(targets: Sequence[Target]) -> list[NodeFacts]:
    """Every target's facts over SSH, in parallel (the Python each will run is the one
    asked about). ClusterError naming each host that could not be probed."""

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


def in_rank_order(plan: Plan, targets: Sequence[Target]) -> list[Target]:
    by_name = {t.name: t for t in targets}
    return [by_name[name] for name in plan.nodes_used]


def model_folders(
    report: PreflightReport, plan: Plan, targets: Sequence[Target], model_dir: Path
) -> list[str]:
    """Each rank's model folder on its node, rank order (this Mac's own for a local rank)."""
    return [
        str(model_dir) if t.local else remote_model_dir(t, report.manifests[t.name])
        for t in in_rank_order(plan, targets)
    ]


def job_spec(
    info: ModelInfo,
    plan: Plan,
    targets: Sequence[Target] | None = None,
    backend: BackendChoice | None = None,
    rank_models: Sequence[str] | None = None,
    **fields: Any,
) -> JobSpec:
    """What runs is what was planned: the plan's strategy, rank count and split, on the
    demo's local ranks (``targets`` None: ring over loopback, each rank named after its
    simulated Mac in messages) or on ``targets`` in the
    plan's rank order with ``backend`` (preflight's choice)."""
    placed: dict[str, Any] = {"nodes": len(plan.ranks), "rank_names": list(plan.nodes_used)}
    if targets is not None:
        placed = {
            "targets": in_rank_order(plan, targets),
            "backend": backend.name if backend else Backend.RING,
            "devices": backend.devices if backend else None,
            "addresses": backend.addresses if backend else None,
            "rank_models": [Path(folder) for folder in rank_models] if rank_models else None,
        }
    return JobSpec(
        model=info.path,
        strategy=plan.strategy,
        split=list(plan.split) if plan.split and plan.strategy is Strategy.PIPELINE else None,
        weights=[rank.worker_weights for rank in plan.ranks],
        **placed,
        **fields,
    )


def show_launch(spec: JobSpec) -> dict[str, Any]:
    """The equivalent ``mlx.launch`` command and hostfile for a job on targets (run it
    from a folder holding MacMesh's ``core/worker``, on every node)."""
    targets = spec.targets or []
    names = [f"{t.user}@{t.host}" if t.user else t.host for t in targets]
    jaccl = spec.backend.is_jaccl
    own = [t.rank_address for t in targets]
    listen = spec.addresses if spec.addresses and spec.backend is Backend.RING else own
    ips = [[listen[rank]] if (not jaccl or rank == 0) else [] for rank in range(len(targets))]
    hostfile = mlxenv.launch_hostfile(spec.backend, names, ips, rdma=spec.devices)
    python = targets[0].interpreter if targets else spec.python
    digest, _ = worker_bundle()
    command = mlxenv.launch_command("hostfile.json", python, spec.worker_args(0))
    return {"command": command, "hostfile": hostfile, "worker_hash": digest}


def demo_launch(spec: JobSpec) -> dict[str, Any]:
    """``mlx.launch`` for the demo's local ranks: ``-n N --backend ring`` on this
    machine (mlx.launch writes the loopback hostfile itself, so there is none to show)."""
    command = [
        "mlx.launch", "-n", str(spec.nodes), "--backend", Backend.RING, "--python", spec.python,
        "--", "-m", "core.worker", *spec.worker_args(0),
    ]  # fmt: skip
    return {"command": command, "hostfile": None, "local": True}


def planned_launch(
    info: ModelInfo,
    plan: Plan,
    targets: Sequence[Target],
    facts: Sequence[NodeFacts],
    report: PreflightReport | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """``mlx.launch`` and its hostfile for ``plan`` on real nodes. The backend is the
    last preflight's when there is one that reached every node, else chosen from the
    probed ``facts`` (rank order) as preflight would; the model path is each node's copy
    once preflight knows it, else this Mac's folder. ``fields``: more of the JobSpec's
    (the batch, an adapter)."""
    ordered = in_rank_order(plan, targets)
    folders: list[str] | None
    if report is not None and all(t.local or t.name in report.manifests for t in ordered):
        backend, folders = report.backend, model_folders(report, plan, targets, info.path)
    else:
        by_name = {f.name: f for f in facts}
        known = [by_name[t.name] for t in ordered if t.name in by_name]
        backend = (
            choose_backend(known, fallback={t.name: t.rank_address for t in ordered})
            if len(known) == len(ordered)
            else BackendChoice(Backend.RING, "Ring over each node's network address.")
        )
        folders = None
    spec = job_spec(info, plan, ordered, backend, folders, **fields)
    launch = show_launch(spec)
    paths = backend.to_dict()["paths"]
    return {
        **launch,
        "backend": backend.name,
        "reason": backend.reason,
        "paths": paths,
        "local": False,
    }
