"""Checks before Start, each with a plain-language result and a fix (issue 6).

One gather step per node, in parallel over SSH (``gather``): the probe's facts (with the
Python that node will run, ``Target.interpreter``) and the model check by manifest
(``core.remote.modelcheck.check``). Then pure functions over what was gathered
(``evaluate``): every node reachable; its Python and its mlx / mlx-lm; the same versions
everywhere (and the same macOS build for jaccl); the model present where it is needed
("missing" → a copy is offered, when the node has the free space for it; "different" →
refused; "present (size checked)" unless ``verify`` hashed every file there now); memory
per the Plan against what each node reports; and the backend (``choose_backend``): jaccl
when every pair of ranks is cabled with RDMA on, jaccl-ring when the ranks' neighbours
are, else ring over each node's network address, with the reason said plainly.

``run_preflight`` does both; the report is JSON-able (``to_dict``) and ``format_report``
prints it for ``macmesh run``.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from core.cluster.probe.facts import NodeFacts, run_local_probe
from core.cluster.probe.remote import probe_over_ssh
from core.cluster.rdma import GUIDES, build_mismatch
from core.cluster.ringpath import RingLink
from core.model.manifest import HashCache, Manifest, ManifestError, build_manifest, node_manifest
from core.plan.memory import Node, node_budget
from core.plan.planner import Plan
from core.remote.modelcheck import CheckResult, check
from core.remote.ssh import (
    AuthFailed,
    HostKeyChanged,
    HostUnreachable,
    RemoteLoginOff,
    SSHError,
    SSHTimeout,
    UnknownHostKey,
)
from core.remote.targets import Target
from core.remote.transport import ModelCopyError
from core.run.checks.backend_choice import BackendChoice, choose_backend, with_links
from core.run.checks.modelsource import with_model_sources
from core.run.checks.report import CLUSTER, Check, PreflightReport
from core.run.checks.ringcheck import check_links
from core.units import size
from core.worker.vocab import Backend, ModelSource

BACKENDS = (Backend.AUTO, Backend.JACCL, Backend.JACCL_RING, Backend.RING)  # a person may ask


@dataclass(frozen=True)
class Gathered:
    """One node as the gather step found it: facts, or the SSH error; the model check."""

    target: Target
    facts: NodeFacts | None = None
    error: SSHError | None = None
    model: CheckResult | None = None
    model_error: str | None = None


# -- gather (SSH, parallel) ------------------------------------------------------------------


def gather_node(
    target: Target,
    manifest: Manifest | None,
    facts: NodeFacts | None = None,
    verify: bool = False,
) -> Gathered:
    """Probe ``target`` (unless its fresh ``facts`` are given) and check its model over one
    SSH session (``verify``: hashing every file there). Never raises for SSH."""
    if target.local:
        facts = facts or run_local_probe(target.name, python=target.interpreter)
        return Gathered(target, facts)  # a local rank reads the model folder itself
    try:
        with target.connection() as connection:
            if facts is None:
                facts = probe_over_ssh(connection, target.name, python=target.interpreter)
            if manifest is None:
                return Gathered(target, facts)
            try:
                model = check(target, manifest, verify=verify, connection=connection)
            except ModelCopyError as error:
                return Gathered(target, facts, model_error=str(error))
            return Gathered(target, facts, model=model)
    except SSHError as error:
        return Gathered(target, error=error)


def gather(
    targets: Sequence[Target],
    manifests: Mapping[str, Manifest] | None = None,
    facts: Mapping[str, NodeFacts] | None = None,
    verify: bool = False,
) -> list[Gathered]:
    """``gather_node`` for every target at once (one thread per node); ``facts``: nodes
    probed moments ago (``macmesh run`` probes to plan), not probed again."""
    manifests, facts = manifests or {}, facts or {}
    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        futures = [
            pool.submit(gather_node, t, manifests.get(t.name), facts.get(t.name), verify)
            for t in targets
        ]
    return [future.result() for future in futures]


def run_preflight(
    targets: Sequence[Target],
    plan: Plan,
    model_dir: Path | str,
    backend: Backend | str = Backend.AUTO,
    manifest: Manifest | None = None,
    cache: HashCache | None = None,
    facts: Mapping[str, NodeFacts] | None = None,
    verify: bool = False,
    check_paths: bool = True,
    model_source: ModelSource | str = ModelSource.AUTO,
) -> PreflightReport:
    """Every check for running ``plan`` of the model in ``model_dir`` on ``targets``
    (``facts``: nodes just probed, by name, reused instead of probing them again;
    ``verify``: every model file on the nodes hashed there now, not only sized;
    ``check_paths``: each ring link's chosen path tried with a TCP connect between its
    nodes, falling back to the next path that answers; off: the paths as probed;
    ``model_source``: where nodes lacking files get them, ``core.run.checks.modelsource``)."""
    manifests: dict[str, Manifest] = {}
    problem = None
    try:
        whole = manifest or build_manifest(model_dir, cache)
        for rank, stage in enumerate(plan.ranks):
            manifests[stage.node] = node_manifest(model_dir, plan.layers_of(rank), manifest=whole)
    except ManifestError as error:
        problem = Check.fail(
            CLUSTER, "model", f"Cannot read the model: {error}.", "Choose a model folder."
        )
    report = evaluate(plan, gather(targets, manifests, facts, verify), manifests, backend)
    if check_paths and report.backend.links and len(report.backend.links) > 1:
        report = _checked_paths(report, targets, backend)
    if report.copies_needed:
        report = with_model_sources(report, targets, model_dir, model_source)
    if problem is not None:
        return PreflightReport((problem, *report.checks), report.backend, (), {}, report.facts)
    return report


def _checked_paths(
    report: PreflightReport, targets: Sequence[Target], requested: Backend | str
) -> PreflightReport:
    """The report once every ring link's path was tried between its two nodes."""
    by_name = {t.name: t for t in targets}
    problems: list[Check] = []

    def failed(link: RingLink, why: str) -> None:
        problems.append(
            Check.warn(
                CLUSTER,
                "backend",
                f"Could not try the path from {link.dialer} to {link.listener}: {why}.",
                "The job uses the path as probed; its own connect will say if it fails.",
            )
        )

    links = tuple(check_links(report.backend.links, by_name, failed))
    choice = with_links(report.backend, links)
    ordered = [by_name[name] for name in (link.listener for link in links)]
    checks = [
        c
        for c in report.checks
        if not (c.name == "backend" and c.node == CLUSTER) and c.name != "network"
    ]
    checks += [*backend_checks(choice, requested, ordered), *problems]
    return replace(report, checks=tuple(checks), backend=choice)


# -- checks (pure) ---------------------------------------------------------------------------


def evaluate(
    plan: Plan,
    gathered: Sequence[Gathered],
    manifests: Mapping[str, Manifest] | None = None,
    backend: Backend | str = Backend.AUTO,
) -> PreflightReport:
    """The report for ``plan`` from what ``gather`` found. Pure."""
    manifests = manifests or {}
    by_name = {g.target.name: g for g in gathered}
    order = list(plan.nodes_used)
    checks: list[Check] = []
    if backend not in BACKENDS:
        checks.append(
            Check.fail(
                CLUSTER,
                "backend",
                f"Unknown backend {backend!r}.",
                f"Choose one of {', '.join(BACKENDS)}.",
            )
        )
        backend = Backend.AUTO
    lost = [name for name in order if name not in by_name]
    for name in lost:
        checks.append(
            Check.fail(
                name,
                "ssh",
                f"The plan uses {name}, but no host of that name was given.",
                "Plan again with the hosts you will run on.",
            )
        )
    if not plan.fits:
        checks.append(
            Check.fail(CLUSTER, "plan", plan.reason, "Add a Mac, or choose a smaller model.")
        )
    used = [by_name[name] for name in order if name in by_name]
    for g in used:
        checks.append(reachable_check(g))
    reached = [g for g in used if g.facts is not None]
    for g in reached:
        checks.append(python_check(g))
        if g.facts is not None and g.facts.runs_on_cpu:
            checks.append(blas_check(g.facts, g.target.name))
    checks.extend(version_checks(reached))
    for g in reached:
        checks.extend(_model(g, manifests.get(g.target.name)))
        checks.extend(_memory(g, plan))
    facts = {g.target.name: g.facts for g in reached if g.facts is not None}
    if len(reached) == len(order) and not lost:
        fallback = {t.name: t.rank_address for t in (by_name[n].target for n in order)}
        choice = choose_backend([facts[name] for name in order], Backend(backend), fallback)
        checks.extend(backend_checks(choice, backend, [by_name[n].target for n in order]))
        if choice.name.is_jaccl and (mismatch := build_mismatch(list(facts.values()))):
            checks.append(
                Check.fail(
                    CLUSTER,
                    "macos",
                    mismatch,
                    "Update every Mac to the same macOS (System Settings > General > Software "
                    "Update), or run with the ring backend.",
                )
            )
    else:
        choice = BackendChoice(Backend.RING, "Not chosen: some nodes could not be reached.")
    copies = tuple(
        g.target.name for g in reached if g.model is not None and g.model.status == "missing"
    )
    damaged = {g.target.name: g.model.damaged for g in reached if g.model and g.model.damaged}
    return PreflightReport(tuple(checks), choice, copies, dict(manifests), facts, damaged)


_SSH_FIXES: tuple[tuple[type[SSHError], str], ...] = (
    (UnknownHostKey, "Compare the fingerprint with the one that Mac shows, then accept it."),
    (HostKeyChanged, "Find out why the key changed before removing the old one."),
    (RemoteLoginOff, "Turn on Remote Login there: System Settings > General > Sharing."),
    (AuthFailed, "Set up access once with that Mac's password, or check the user name."),
    (SSHTimeout, "Wake the Mac, and check that nothing blocks SSH on the network."),
    (HostUnreachable, "Check that the Mac is on and on this network, and its name."),
)


def ssh_fix(error: SSHError | type[SSHError]) -> str:
    """What to do about an SSH failure (or a kind of one), or "" for a kind with no set fix."""
    kind_of = error if isinstance(error, type) else type(error)
    return next((fix for kind, fix in _SSH_FIXES if issubclass(kind_of, kind)), "")


def reachable_check(g: Gathered) -> Check:
    t = g.target
    where = f"{t.user + '@' if t.user else ''}{t.host}{f':{t.port}' if t.port != 22 else ''}"
    if g.error is None:
        how = "runs on this Mac" if t.local else f"reachable over SSH ({where})"
        return Check.ok(t.name, "ssh", f"{t.name} {how}.")
    fix = ssh_fix(g.error)
    return Check.fail(
        t.name,
        "ssh",
        f"{t.name} ({where}) cannot be reached: {g.error}",
        fix or "Check that the Mac is on, on this network, with Remote Login on.",
    )


def python_check(g: Gathered) -> Check:
    facts, t = g.facts, g.target
    assert facts is not None
    wanted = t.interpreter
    if facts.python_version is None:
        why = facts.unknowns.get("python_version", "it did not answer")
        return Check.fail(
            t.name,
            "python",
            f"{t.name} has no usable Python at {wanted} ({why}).",
            "Install Python 3 with mlx and mlx-lm there, or set this node's Python to one that "
            "has them.",
        )
    path = facts.python_executable or wanted
    missing = [
        n for n, v in (("mlx", facts.mlx_version), ("mlx-lm", facts.mlx_lm_version)) if not v
    ]
    if missing:
        return Check.fail(
            t.name,
            "python",
            f"{t.name}'s Python {path} ({facts.python_version}) has no {' or '.join(missing)}.",
            f"On {t.name} run `{shlex.quote(wanted)} -m pip install {' '.join(missing)}` (the "
            "same versions as the other nodes), or install MacMesh.app there: its own Python "
            "needs nothing else.",
        )
    runs = f"{wanted}, which runs {path}" if path != wanted else wanted
    if facts.macmesh_app and wanted == facts.macmesh_app:
        runs = f"MacMesh.app's own Python ({wanted})"
    return Check.ok(
        t.name,
        "python",
        f"{t.name} uses {runs} (Python {facts.python_version}, mlx {facts.mlx_version}, "
        f"mlx-lm {facts.mlx_lm_version}).",
    )


def blas_check(facts: NodeFacts, name: str) -> Check:
    """A Linux node runs MLX on its CPU: which BLAS its ranks will preload."""
    if facts.blas_path:
        return Check(
            name, "blas", "ok",
            f"{name} runs MLX on its CPU with OpenBLAS ({facts.blas_source}: {facts.blas_path}).",
        )  # fmt: skip
    return Check(
        name, "blas", "warn",
        f"{name} runs MLX on its CPU with MLX's reference BLAS, about 30x slower at float "
        "matmuls.",
        f"On {name} run `python3 -m pip install cmeel-openblas` for its Python, or install "
        "Debian's libopenblas0.",
    )  # fmt: skip


def version_checks(reached: Sequence[Gathered]) -> list[Check]:
    """The same mlx and mlx-lm everywhere; the version most nodes have is the reference
    (ties: the one of the lowest rank)."""
    have = [g for g in reached if g.facts and g.facts.mlx_version and g.facts.mlx_lm_version]
    if len(have) < 2:
        return []
    pairs = [(g.facts.mlx_version, g.facts.mlx_lm_version) for g in have if g.facts]
    counts = Counter(pairs)
    reference = max(pairs, key=lambda p: (counts[p], -pairs.index(p)))
    odd = [(g, p) for g, p in zip(have, pairs, strict=True) if p != reference]
    if not odd:
        return [
            Check.ok(
                CLUSTER,
                "versions",
                f"Every node runs mlx {reference[0]} and mlx-lm {reference[1]}.",
            )
        ]
    same = [g.target.name for g, p in zip(have, pairs, strict=True) if p == reference]
    checks = []
    for g, (mlx, mlx_lm) in odd:
        python = shlex.quote(g.target.interpreter)
        checks.append(
            Check.fail(
                g.target.name,
                "versions",
                f"{g.target.name} runs mlx {mlx} and mlx-lm {mlx_lm}; {', '.join(same)} "
                f"run{'s' if len(same) == 1 else ''} mlx {reference[0]} and mlx-lm "
                f"{reference[1]}. Every node needs the same versions.",
                f"On {g.target.name} run `{python} -m pip install mlx=={reference[0]} "
                f"mlx-lm=={reference[1]}`.",
            )
        )
    return checks


def _model(g: Gathered, manifest: Manifest | None) -> list[Check]:
    name = g.target.name
    if g.target.local or manifest is None:
        return []
    if g.model_error is not None:
        return [
            Check.fail(
                name,
                "model",
                f"Could not check the model on {name}: {g.model_error}",
                "Check the node's cache folder, then run the checks again.",
            )
        ]
    result = g.model
    if result is None:
        return []
    if result.status == "present":
        how = "verified now (SHA-256 on the node)" if result.verified else "present (size checked)"
        return [
            Check.ok(
                name,
                "model",
                f"{name} has the {len(manifest.files)} files of {manifest.name} it needs "
                f"({size(manifest.total_bytes)}), {how}, in {result.folder}.",
            )
        ]
    if result.status == "missing":
        if result.short_bytes:
            root = str(PurePosixPath(result.folder).parent.parent)
            return [
                Check.fail(
                    name,
                    "model",
                    f"{name} needs {size(result.short_bytes)} more free space in {root}: the "
                    f"copy writes {size(result.to_write_bytes)} and it has "
                    f"{size(result.free_bytes or 0)} free.",
                    f"Free at least {size(result.short_bytes)} on {name}, or give it another "
                    "cache folder (--cache-root), then run the checks again.",
                )
            ]
        count = len(result.missing)
        damaged = f" {result.reason}" if result.damaged else ""
        return [
            Check.warn(
                name,
                "model",
                f"{name} lacks {count} file{'s' if count != 1 else ''} of {manifest.name} "
                f"({size(result.missing_bytes)}).{damaged}",
                f"MacMesh copies them to {result.folder} before starting (resumable, verified).",
            )
        ]
    return [
        Check.fail(
            name,
            "model",
            result.reason,
            f"MacMesh will not overwrite it. Remove that folder on {name} "
            f"(`rm -rf {shlex.quote(result.folder)}`) if you do not need it, then copy again.",
        )
    ]


def _memory(g: Gathered, plan: Plan) -> list[Check]:
    facts, name = g.facts, g.target.name
    assert facts is not None
    ranks = [r for r in plan.ranks if r.node == name]
    if not ranks:
        return []
    need = sum(r.need_bytes for r in ranks)
    if not facts.memory_bytes:
        why = facts.unknowns.get("memory_bytes", "it was not reported")
        return [Check.warn(name, "memory", f"{name}'s memory is unknown ({why}).")]
    budget = node_budget(Node(name, facts.memory_bytes, facts.wired_limit_mb), plan.options)
    usable = budget.usable_bytes
    if need > usable:
        return [
            Check.fail(
                name,
                "memory",
                f"{name} needs {size(need)} for its part of the model, but it can give the GPU "
                f"only {size(usable)} ({size(facts.memory_bytes)} of memory; limit from "
                f"{budget.gpu_limit_source}).",
                "Plan again on these Macs (the plan assumed more memory), add a Mac, or use a "
                "smaller quantization or a shorter context.",
            )
        ]
    checks = [
        Check.ok(name, "memory", f"{name} needs {size(need)} of the {size(usable)} it can give.")
    ]
    free = facts.free_memory_bytes
    if free is not None and free < need:
        checks.append(
            Check.warn(
                name,
                "memory",
                f"{name} has only {size(free)} free right now; its part needs {size(need)}.",
                f"Quit apps on {name} that use a lot of memory before starting.",
            )
        )
    return checks


# -- backend ----------------------------------------------------------------------------------


def backend_checks(
    choice: BackendChoice, requested: Backend | str, targets: Sequence[Target]
) -> list[Check]:
    return [*_backend_check(choice, requested, targets), *_offer_checks(choice)]


def _backend_check(
    choice: BackendChoice, requested: Backend | str, targets: Sequence[Target]
) -> list[Check]:
    addresses = ", ".join(choice.addresses or [t.rank_address for t in targets])
    if choice.problem is None:
        message = choice.reason
        if choice.name is Backend.RING and len(targets) > 1:
            message = f"{choice.reason} ({addresses})"
        return [Check.ok(CLUSTER, "backend", message)]
    fix = f"Follow “{GUIDES[choice.guide]}”." if choice.guide in GUIDES else ""
    if requested != Backend.AUTO:
        return [
            Check.fail(
                CLUSTER,
                "backend",
                choice.reason,
                (fix + " " if fix else "") + "Or run with the ring backend (--backend ring).",
            )
        ]
    message = f"{choice.reason} Addresses: {addresses}."
    if choice.guide:
        return [Check.warn(CLUSTER, "backend", message, fix)]
    return [Check.ok(CLUSTER, "backend", message)]


def _offer_checks(choice: BackendChoice) -> list[Check]:
    """A faster path a setting stands in the way of: each change offered, with its undo.
    A warning, never a failure: nothing is changed unless the person asks."""
    checks = []
    for offer in choice.offers:
        checks.append(
            Check.warn(
                offer.node,
                "network",
                f"A faster path needs a network setting changed on {offer.node}: it {offer.why}.",
                f"{offer.shown()}. MacMesh changes nothing unless you ask (Change… here, "
                "or `macmesh run --change-network`: that Mac's admin password, used once).",
            )
        )
    return checks
