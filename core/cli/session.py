"""A session on real Macs from the command line's arguments: what ``macmesh run`` and
``macmesh serve`` share (``add_cluster_arguments``, ``open_session``), and the targets
every multi-Mac command makes from ``--hosts`` (``make_targets``, also ``where``'s)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import TextIO

from core.cli.answer import with_adapter
from core.cli.netchange import change_network
from core.cli.options import add_adapter_argument, add_split_argument, split_of
from core.cluster.hosts import parse_host
from core.envvars import ENV_REMOTE_CACHE
from core.library.resolve import resolve_model
from core.remote.targets import Target
from core.run.checks.preflight import BACKENDS
from core.run.errors import ClusterError
from core.run.planning import Serving
from core.run.session import Session, real_hosts
from core.run.states import Step
from core.run.tasks.adapter_payload import adapter_payloads
from core.run.tasks.watch import Phase, Watch
from core.settings import MODEL_SOURCES, load_settings
from core.worker import kvbits
from core.worker import protocol as p
from core.worker.vocab import Backend, Strategy


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


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """How a model runs on real Macs: what ``run`` and ``serve`` share (``open_session``)."""
    parser.add_argument(
        "--strategy",
        choices=(Strategy.AUTO, Strategy.PIPELINE, Strategy.TENSOR),
        default=Strategy.AUTO,
    )
    parser.add_argument("--backend", choices=BACKENDS, default=Backend.AUTO)
    parser.add_argument("--python", help="the Python on every node (default: this one's path)")
    parser.add_argument(
        "--cache-root",
        default=os.environ.get(ENV_REMOTE_CACHE) or None,
        help="MacMesh's folder on every node ({host} is replaced by the host); default the "
        f"node's cache folder, or ${ENV_REMOTE_CACHE}",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="hash every model file on the nodes (slower: reads them all); a file found "
        "changed is copied again",
    )
    add_split_argument(parser)
    add_adapter_argument(parser)
    parser.add_argument(
        "--model-source",
        choices=MODEL_SOURCES,
        default=None,
        help="where nodes lacking model files get them: auto (a node that reaches Hugging "
        "Face downloads its own files, when the model came from there; else a copy from "
        "this Mac), hub, or this-mac; default: the model_source setting (auto)",
    )
    add_serving_arguments(parser)
    parser.add_argument(
        "--change-network",
        action="store_true",
        help="apply the network changes the checks offer for a faster path (each Mac's "
        "admin password is asked once); without it they are only shown, with their undo",
    )


def add_serving_arguments(parser: argparse.ArgumentParser) -> None:
    """The batch and the prompt cache: planned, run by the ranks and (``serve``) the API's
    requests at once; default the settings' (``batch``, ``prompt_cache_mb``)."""
    parser.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help=f"requests the ranks generate at once, 1-{p.MAX_BATCH} (the API runs as many; "
        f"default: the batch setting, {p.DEFAULT_BATCH})",
    )
    parser.add_argument(
        "--prompt-cache-mb",
        type=int,
        metavar="MB",
        help="conversations' KV caches each rank keeps between requests, at most this many "
        f"MB (0: none; default: the prompt_cache_mb setting, {p.DEFAULT_PROMPT_CACHE_MB})",
    )
    add_kv_arguments(parser)


def add_kv_arguments(parser: argparse.ArgumentParser) -> None:
    """The KV cache's quantization (``core.worker.kvquant``): planned and run."""
    parser.add_argument(
        "--kv-bits",
        type=int,
        metavar="BITS",
        help="store the KV cache quantized at 8 or 4 bits, so a longer context or more "
        "requests fit (16: not quantized; default: the kv_bits setting, 16)",
    )
    parser.add_argument(
        "--kv-group-size",
        type=int,
        metavar="N",
        help="elements sharing one scale in the quantized KV cache: 32, 64 or 128 "
        f"(default: the kv_group_size setting, {kvbits.DEFAULT_GROUP_SIZE})",
    )


def serving_of(args: argparse.Namespace) -> Serving:
    """``--batch``, ``--prompt-cache-mb``, ``--kv-bits`` and ``--kv-group-size`` over the
    settings; ValueError when out of range."""
    return Serving.chosen(args.batch, args.prompt_cache_mb, args.kv_bits, args.kv_group_size)


def open_session(
    args: argparse.Namespace, err: TextIO, watch: Watch, show_launch: bool = False
) -> Session:
    """The session for ``args``' model on its hosts, started up to the copy (``show_launch``:
    up to the checks, which try no path), each step said by ``watch`` (``follow``): what
    ``macmesh run`` and ``macmesh serve`` share. ClusterError, ModelError or ValueError
    with the reason when a step cannot go on."""
    info = resolve_model(args.model, to_run=True)
    hosts = [h for h in args.hosts.split(",") if h.strip()]
    targets = make_targets(hosts, args.python, args.cache_root)
    session = Session(
        info,
        real_hosts(targets),
        strategy=args.strategy,
        backend=args.backend,
        verify=args.verify,
        split=split_of(args),
        check_paths=not show_launch,  # runs nothing: the paths as probed
        payloads=adapter_payloads(info, args.adapter),
        model_source=args.model_source or load_settings().model_source,
        serving=serving_of(args),
    )
    watch(session, Phase.RUN)
    err.write(f"{info.summary()}\n{with_adapter(session)}")
    checked = session.start(Step.PREFLIGHT)
    report = session.report
    assert report is not None  # real hosts are always checked
    if args.change_network and report.backend.offers and not show_launch:
        targets_now = {t.name: t for t in session.targets}
        if change_network(report.backend.offers, targets_now, err):
            err.write("Checking the nodes again…\n")
            checked = session.check_again()
            report = session.report
            assert report is not None
    if show_launch:
        if report.backend.problem and args.backend != Backend.AUTO:
            raise ClusterError(report.backend.reason)
        return session
    if not checked or not report.ok:
        raise ClusterError("the checks above failed; nothing was started")
    session.start(Step.COPY)
    return session
