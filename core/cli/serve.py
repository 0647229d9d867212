"""``macmesh serve``: the cluster as an OpenAI-compatible API, headless (a Mac in a
server room). ``--demo`` serves the demo cluster; ``MODEL --hosts a,b,...`` serves a
model on real Macs after the same probe, plan, checks and copy as ``macmesh run``.

The keys: every key of the store ``macmesh keys`` and the window manage, and the key in
``--api-key-file F`` (F is written with a new key, 0600, when it does not exist yet,
before the server accepts connections; without it, the key file in MacMesh's data
folder). Each key has its own prompt cache and its fair share of the queue; with
``--shared-prompt-cache`` every key shares one prompt cache. ``--demo MODEL`` serves a
model folder on the demo cluster instead of the demo model. ``--no-key`` turns keys off,
on loopback only;
``--metrics-without-key`` for ``GET /metrics`` alone (Prometheus). Once ready it prints
the address and the key's file, then one line per request. Ctrl-C (exit 130) or SIGTERM
(exit 0) stops the server and every rank.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from core import paths
from core.cli import serve_many
from core.cli.demo import demo_model_said
from core.cli.interrupt import Stage, first_interrupt_only, interrupted
from core.cli.options import split_of
from core.cli.session import add_cluster_arguments, open_session, serving_of
from core.cli.steps import follow, starting
from core.library.resolve import resolve_model
from core.model.info import ModelError, read_model_info
from core.run import demo
from core.run.errors import ClusterError
from core.run.job.launcher import JobError
from core.run.session import Session, simulated_hosts
from core.run.states import Step
from core.run.tasks.watch import Phase, Watch
from core.serve.answers import DEFAULT_WAITING
from core.serve.keys import Gate, KeyFileError, KeyStore, key_file
from core.serve.server import APIServer, ServeError, ServerOptions, bind, is_loopback
from core.serve.task import serve as serve_session
from core.worker.vocab import Strategy

DEFAULT_PORT = 8080
KEY_FILE = "serve-api-key"  # in the user data folder, when --api-key-file is not given


class Terminated(BaseException):
    """SIGTERM on the main thread: stop as Ctrl-C does, exit 0 (a service stopped)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        nargs="?",
        help="the model (with --demo: on the simulated Macs): a folder, a name "
        "`macmesh models` lists, or hf:ORG/NAME once downloaded",
    )
    parser.add_argument("--demo", action="store_true", help="serve the demo cluster")
    parser.add_argument(
        "--model",
        dest="demo_model",
        metavar="PATH[@STRATEGY][:MACS]",
        action="append",
        help="--demo: a model folder, a name `macmesh models` lists, or hf:ORG/NAME once "
        "downloaded (default: the demo model; MODEL says the same); repeated, several "
        "models at once (`demo` names the demo model), each with its own plan if given: "
        "PATH@STRATEGY (auto, single, pipeline, tensor), PATH@STRATEGY:MACS or PATH@:MACS, "
        "MACS the demo's Mac numbers (1,2) or hosts out of --hosts (studio-a,studio-b)",
    )
    parser.add_argument("--nodes", type=int, default=2, help="--demo: simulated Macs, 1-4")
    serve_many.add_arguments(parser)
    parser.add_argument("--hosts", help="[user@]host[:port],... (with MODEL)")
    add_cluster_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="the address to serve on")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--api-key-file", type=Path, help="the key's file (made when missing)")
    parser.add_argument(
        "--no-key", action="store_true", help="no key needed (only on a loopback --host)"
    )
    parser.add_argument(
        "--metrics-without-key",
        action="store_true",
        help="GET /metrics (Prometheus) needs no key; the API itself still does",
    )
    parser.add_argument(
        "--shared-prompt-cache",
        action="store_true",
        help="one prompt cache for every key (a single-user setup): a key's requests may "
        "then reuse, and time, what another key sent; default: one per key",
    )
    parser.add_argument(
        "--max-waiting",
        type=int,
        default=DEFAULT_WAITING,
        help=f"requests that may wait; more get 429 (default {DEFAULT_WAITING})",
    )


def serve_cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="macmesh serve", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return serve(parser.parse_args(argv))


def serve(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    stage = Stage("reading the model")
    with first_interrupt_only(), _terminate_as_exception():
        try:
            return _serve(args, out, err, stage)
        except KeyboardInterrupt:
            return interrupted(stage, err)
        except Terminated:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # clean-up runs to its end
            if stage.session is not None:
                stage.session.stop()
            err.write(f"macmesh: stopped (SIGTERM) while {stage.doing}; every rank stopped\n")
            err.flush()
            return 0


def _serve(args: argparse.Namespace, out: TextIO, err: TextIO, stage: Stage) -> int:
    try:
        if serve_many.wants_many(args):
            return _serve_many(args, out, err, stage)
        args.demo_model = args.demo_model[0] if args.demo_model else None
        _check(args)
        key, key_path, made = _key(args)
        stage("checking the address")
        bind(args.host, args.port).close()  # a taken port is said now, not after loading
        watch = follow(stage, err)
        session = _session(args, err, stage, watch)
        gate = Gate(open_=True) if args.no_key else Gate(key=key, store=KeyStore())
        server = APIServer(
            session,
            session.info.name,
            session.info.context_length,
            gate,
            ServerOptions.for_job(
                session.spec or session.job_spec(),
                args.host,
                args.port,
                max_waiting=args.max_waiting,
                metrics_without_key=args.metrics_without_key,
                shared_prompt_cache=args.shared_prompt_cache,
            ),
            log=lambda line: _say(out, line),
        )
        err.write(starting(session.rank_nodes()))
        err.flush()

        def serving() -> None:
            stage("serving")
            keys = "no key needed (--no-key)" if args.no_key else f"key in {key_path}"
            keys += " (new)" if made else ""
            keys += " and `macmesh keys`" if not args.no_key else ""
            cache = "shared by every key" if args.shared_prompt_cache else "one per key"
            keys += f"; prompt cache {cache}"
            _say(out, f"Serving {session.info.name} at {server.address} ({keys}). Ctrl-C stops.")

        ended = serve_session(session, server, serving, watch)
    except (ClusterError, ModelError, ServeError, KeyFileError, ValueError) as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    except JobError as exc:
        logs = stage.session.job.run_dir if stage.session and stage.session.job else "none"
        err.write(f"\nmacmesh: the cluster failed: {exc}\nLogs: {logs}\n")
        return 1
    finally:
        if stage.session is not None:
            stage.session.stop()
    if ended.failed:
        advice = stage.session.failure_advice() if stage.session is not None else ""
        err.write(f"macmesh: the cluster failed: {ended.message}\n" + (advice and advice + "\n"))
        err.write(f"Logs: {ended.logs or 'none'}\n")
        return 1
    return 0


def _serve_many(args: argparse.Namespace, out: TextIO, err: TextIO, stage: Stage) -> int:
    """Several models (``core.cli.serve_many``)."""
    if args.demo and args.hosts:
        raise ClusterError("--demo runs on simulated Macs: --hosts is not for it")
    if not args.demo and not args.hosts:
        raise ClusterError("--hosts is needed: the Macs to run the models on (or --demo)")
    _check_serving(args)
    key, key_path, made = _key(args)
    stage("checking the address")
    bind(args.host, args.port).close()
    keys = "no key needed (--no-key)" if args.no_key else f"key in {key_path}"
    keys += " (new)" if made else ""
    return serve_many.serve_many(args, out, err, stage, key, keys)


def _check_serving(args: argparse.Namespace) -> None:
    if not 0 <= args.port <= 65535:
        raise ClusterError("--port must be 0 to 65535")
    if args.max_waiting < 1:
        raise ClusterError("--max-waiting must be at least 1")
    serving_of(args)
    if args.no_key and not is_loopback(args.host):
        raise ClusterError(
            f"--no-key only works on a loopback address: serving on {args.host} shares the "
            "cluster on the network, which always needs a key"
        )
    if args.no_key and args.api_key_file:
        raise ClusterError("--no-key and --api-key-file contradict each other: choose one")


def _check(args: argparse.Namespace) -> None:
    if not args.demo and args.model is None:
        raise ClusterError("name a model folder with --hosts, or --demo")
    if args.demo and args.hosts:
        raise ClusterError("--demo runs on simulated Macs: --hosts is not for it")
    if not args.demo and not args.hosts:
        raise ClusterError("--hosts is needed with a model: the Macs to run it on")
    if args.demo_model is not None and not args.demo:
        raise ClusterError("--model goes with --demo; with --hosts, name the model first")
    if args.demo_model is not None and args.model is not None:
        raise ClusterError("name the demo's model once: MODEL or --model, not both")
    if not 0 <= args.port <= 65535:
        raise ClusterError("--port must be 0 to 65535")
    if args.max_waiting < 1:
        raise ClusterError("--max-waiting must be at least 1")
    serving_of(args)  # --batch and --prompt-cache-mb in range, before any loading
    if args.no_key and not is_loopback(args.host):
        raise ClusterError(
            f"--no-key only works on a loopback address: serving on {args.host} shares the "
            "cluster on the network, which always needs a key"
        )
    if args.no_key and args.api_key_file:
        raise ClusterError("--no-key and --api-key-file contradict each other: choose one")


def _key(args: argparse.Namespace) -> tuple[str | None, Path | None, bool]:
    if args.no_key:
        return None, None, False
    path = args.api_key_file or paths.data_dir() / KEY_FILE
    key, made = key_file(path)
    return key, path, made


def _session(args: argparse.Namespace, err: TextIO, stage: Stage, watch: Watch) -> Session:
    """The session to serve, started up to the copy: the demo's, or ``run``'s on real
    Macs (``open_session``: the same probe, plan, checks and copy)."""
    if not args.demo:
        return open_session(args, err, watch)
    named = args.demo_model if args.demo_model is not None else args.model
    if named is not None:
        info = resolve_model(named, to_run=True)
    else:
        info = read_model_info(demo_model_said(err, stage))
    strategy = Strategy.PIPELINE if args.strategy == Strategy.AUTO else args.strategy
    session = Session(
        info,
        simulated_hosts(demo.demo_facts(args.nodes)),
        strategy=strategy,
        split=split_of(args),
        serving=serving_of(args),
    )
    watch(session, Phase.RUN)
    session.start(Step.COPY)
    session.job_spec()
    plan = session.plan
    err.write(f"{info.summary()}\n{plan.reason if plan else ''}\n")
    return session


def _say(out: TextIO, line: str) -> None:
    out.write(line + "\n")
    out.flush()


@contextlib.contextmanager
def _terminate_as_exception() -> Iterator[None]:
    """Within, on the main thread: SIGTERM raises ``Terminated``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
