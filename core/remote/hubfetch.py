"""A node fetches its own share of the model from Hugging Face, instead of this Mac sending it.

When the model on this Mac is a Hugging Face cache snapshot
(``.../models--ORG--NAME/snapshots/<commit>/``), a node that can reach the Hub may
download the files of its shard itself, every node at once, each at the Hub's speed,
instead of all of them through this Mac's one link. It runs ``huggingface_hub`` with the
worker's Python there (mlx-lm depends on it), with ``HF_ENDPOINT`` set to this Mac's
(the node's own environment may override it), into ``<cache root>/hub`` on the node (a
Hugging Face cache of its own), each weight file through ``core.worker.hubblob`` (its
source is sent with the program), so a download stopped half way, by a cancel or a lost
connection, continues from ``blobs/<etag>.incomplete`` on the next run as this Mac's own
downloads do; then it hard-links each file into the copy's
``<folder>.partial`` staging folder. ``copy_model`` then does what it does for a resumed
copy: it hashes those complete files on the node against this Mac's manifest, sends
only a file whose hash differs, and commits the folder with its marker. So a model that
came from the Hub is checked exactly like a copied one, and the launch does not change.

- ``hub_origin(model_dir)``: the repo and commit of a cache snapshot, or None;
- ``reach_hub(target, origin)``: a quick request from the node to the Hub (None: reached;
  else why not, in a few words);
- ``fetch_from_hub(...)``: the download, with ``CopyProgress`` as the copy reports it and
  the same cancel.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from core.model.manifest import Manifest
from core.remote.modelcheck import cache_root, node_session, remote_model_dir
from core.remote.modelcopy import CopyProgress, CopyResult, copy_model
from core.remote.ssh import Connection, SSHError
from core.remote.targets import Target
from core.remote.transport import CopyCancelled, ModelCopyError
from core.worker.hubblob import redact

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
_COMMIT = re.compile(r"[0-9a-f]{40}")
REACH_TIMEOUT_S = 5.0
PROGRESS_EVERY_S = 0.1


@dataclass(frozen=True)
class HubOrigin:
    """Where a cache snapshot came from: ``repo_id`` at ``revision`` (a commit)."""

    repo_id: str
    revision: str


def hub_origin(model_dir: Path | str) -> HubOrigin | None:
    """The repo and commit of a Hugging Face cache snapshot folder, else None."""
    folder = Path(model_dir).expanduser().absolute()
    snapshots, repo = folder.parent, folder.parent.parent
    if snapshots.name != "snapshots" or not repo.name.startswith("models--"):
        return None
    parts = repo.name[len("models--") :].split("--")
    if len(parts) != 2 or not all(parts) or not _COMMIT.fullmatch(folder.name):
        return None
    return HubOrigin("/".join(parts), folder.name)


def hub_endpoint() -> str:
    """The Hub this Mac uses (``HF_ENDPOINT``), which nodes are pointed at too."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_host(endpoint: str | None = None) -> str:
    """ "huggingface.co", or the host of another endpoint: what a person reads."""
    from urllib.parse import urlparse

    url = endpoint or hub_endpoint()
    parsed = urlparse(url)
    return parsed.netloc.rpartition("@")[2] or redact(url)


# Run by the node's Python: HEAD the repo's revision on the Hub. Prints "ok" or why not.
_REACH = r"""
import os, sys, urllib.request, urllib.error
endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
url = f"{endpoint}/api/models/{sys.argv[1]}/revision/{sys.argv[2]}"
try:
    urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=float(sys.argv[3]))
    print("ok")
except urllib.error.HTTPError as error:
    print(f"it answered HTTP {error.code}")
except Exception as error:
    print(f"{type(error).__name__}: {getattr(error, 'reason', None) or error}")
"""

# Run by the node's Python after core/worker/hubblob.py's source (``download_file``, its
# checks and bounds): download the files named in the spec with huggingface_hub,
# hard-link them into the staging folder, print "@@bytes N" and "@@file NAME" lines.
_FETCH = r"""
import json, os, shutil, sys, threading, time
spec = json.loads(sys.argv[1])
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
check_commit(spec["revision"])
lock = threading.Lock()
state = {"done": 0, "last": 0.0}
def say(line):
    sys.stdout.write(line + "\n"); sys.stdout.flush()
class Bar:
    def __init__(self, *args, **kwargs):
        self.n = int(kwargs.get("initial") or 0)
        with lock: state["done"] += self.n
    def update(self, n=1):
        n = int(n or 0); self.n += n
        with lock:
            state["done"] += n; now = time.monotonic()
            if now - state["last"] >= 0.1:
                state["last"] = now; say(f"@@bytes {state['done']}")
    def __enter__(self): return self
    def __exit__(self, *exc): pass
    def close(self): pass
    def refresh(self): pass
    def set_postfix_str(self, *a, **k): pass
    def set_description(self, *a, **k): pass
    set_description_str = set_description
for name, size in spec["files"]:
    final = os.path.join(spec["folder"], name)
    if os.path.isfile(final) and os.path.getsize(final) == size:
        with lock: state["done"] += size
        continue
    staged = os.path.join(spec["staging"], name)
    if os.path.isfile(staged) and os.path.getsize(staged) == size:
        with lock: state["done"] += size
        continue
    before = state["done"]
    try:
        path = download_file(spec["repo"], name, spec["revision"], spec["cache"], size=size,
                             tqdm_class=Bar)
    except (HubAnswerError, DiskFull) as error:
        sys.stderr.write(redact(str(error)) + "\n"); sys.exit(3)
    with lock: state["done"] = before + size
    os.makedirs(os.path.dirname(staged), exist_ok=True)
    if os.path.lexists(staged): os.unlink(staged)
    real = os.path.realpath(path)
    try: os.link(real, staged)
    except OSError: shutil.copyfile(real, staged)
    say(f"@@bytes {state['done']}"); say(f"@@file {name}")
say("@@done")
"""


def _fetch_program() -> str:
    """The node's download program: ``core/worker/hubblob.py``'s source, then ``_FETCH``.
    ModelCopyError when that source is not readable (an app that ships bytecode only)."""
    from core.worker import hubblob

    try:
        shared = Path(hubblob.__file__).read_text(encoding="utf-8")
    except OSError as error:
        raise ModelCopyError(
            f"This MacMesh cannot send its download program to a node ({error})."
        ) from error
    return shared + _FETCH


def _env_argv(endpoint: str, python: str, *args: str) -> list[str]:
    """``python args`` with the Hub's address in the environment: the node's own
    settings (a wrapper around its Python) still win."""
    return ["env", f"HF_ENDPOINT={endpoint}", "HF_HUB_OFFLINE=0", python, *args]


def reach_hub(
    target: Target,
    origin: HubOrigin,
    endpoint: str | None = None,
    connection: Connection | None = None,
) -> str | None:
    """None when ``target`` reaches the Hub for ``origin``; else why not, briefly."""
    endpoint = endpoint or hub_endpoint()
    argv = _env_argv(
        endpoint,
        target.interpreter,
        "-c",
        _REACH,
        origin.repo_id,
        origin.revision,
        str(REACH_TIMEOUT_S),
    )
    try:
        with node_session(target, connection) as conn:
            result = conn.run(argv, timeout=REACH_TIMEOUT_S + 30)
    except SSHError as error:
        return str(error)
    said = (result.stdout.strip().splitlines() or [""])[-1]
    if result.rc == 0 and said == "ok":
        return None
    return redact(said or (result.stderr.strip().splitlines() or [f"exit status {result.rc}"])[-1])


def fetch_from_hub(
    target: Target,
    manifest: Manifest,
    model_dir: Path | str,
    origin: HubOrigin,
    progress: Callable[[CopyProgress], None] | None = None,
    cancel: threading.Event | None = None,
    endpoint: str | None = None,
    connection: Connection | None = None,
) -> CopyResult:
    """``target`` downloads ``manifest``'s files from the Hub; then ``copy_model``
    verifies them there (sending from this Mac only a file whose hash differs) and
    commits. Raises ``CopyCancelled`` (what arrived is kept), ``ModelCopyError`` (the
    download failed: the message says why) or ``SSHError``."""
    endpoint = endpoint or hub_endpoint()
    cancel = cancel or threading.Event()
    started = time.monotonic()
    with node_session(target, connection) as conn:
        root = cache_root(target, conn)
        folder = remote_model_dir(target, manifest, conn)
        spec = {
            "repo": origin.repo_id,
            "revision": origin.revision,
            "cache": f"{root}/hub",
            "folder": folder,
            "staging": folder + ".partial",
            "files": [[entry.name, entry.size] for entry in manifest.files],
        }
        argv = _env_argv(endpoint, target.interpreter, "-c", _fetch_program(), json.dumps(spec))
        _download(conn, target, argv, manifest, progress, cancel)
        result = copy_model(target, manifest, model_dir, progress, cancel, connection=conn)
    return CopyResult(
        result.node,
        result.folder,
        result.sent_bytes,
        result.reused_bytes,
        result.resumed_bytes,
        result.files_copied,
        time.monotonic() - started,
    )


def fetch_or_copy(
    target: Target,
    manifest: Manifest,
    model_dir: Path | str,
    progress: Callable[[CopyProgress], None] | None = None,
    cancel: threading.Event | None = None,
    damaged: Collection[str] = (),
    *,
    fallback: bool = True,
) -> CopyResult:
    """``fetch_from_hub``, or ``copy_model`` when the model is not a cache snapshot, the
    node holds damaged files to replace, or (``fallback``) the download failed."""
    origin = hub_origin(model_dir)
    if origin is None or damaged:
        return copy_model(target, manifest, model_dir, progress, cancel, damaged=damaged)
    try:
        return fetch_from_hub(target, manifest, model_dir, origin, progress, cancel)
    except ModelCopyError as error:
        if not fallback or (cancel is not None and cancel.is_set()):
            raise
        log.warning("%s; copying from this Mac instead", error)
        return copy_model(target, manifest, model_dir, progress, cancel)


def _download(
    conn: Connection,
    target: Target,
    argv: list[str],
    manifest: Manifest,
    progress: Callable[[CopyProgress], None] | None,
    cancel: threading.Event,
) -> None:
    total = manifest.total_bytes
    process = conn.start(shlex.join(argv))
    stderr: list[str] = []
    reader = threading.Thread(
        target=lambda: stderr.extend(process.stderr_lines()), name="hub-fetch-stderr"
    )
    reader.start()
    watcher_done = threading.Event()

    def watch_cancel() -> None:
        while not watcher_done.wait(0.1):
            if cancel.is_set():
                with contextlib.suppress(SSHError):
                    process.terminate()
                return

    watcher = threading.Thread(target=watch_cancel, name="hub-fetch-cancel")
    watcher.start()
    began = time.monotonic()
    finished = False
    try:
        for line in process.stdout_lines():
            if line.startswith("@@bytes ") and progress is not None:
                done = min(total, int(line.split()[1]))
                elapsed = time.monotonic() - began
                rate = done / elapsed if elapsed > 0.5 and done else None
                eta = (total - done) / rate if rate else None
                progress(CopyProgress(target.name, "copying", done, total, rate, eta))
            elif line.startswith("@@done"):
                finished = True
        rc = process.wait(30)
    finally:
        watcher_done.set()
        watcher.join()
        reader.join(timeout=5)
        process.close()
    if cancel.is_set():
        raise CopyCancelled(
            f"The download of {manifest.name} on {target.name} stopped; what arrived is kept."
        )
    if not finished or rc != 0:
        said = next((line for line in reversed(stderr) if line.strip()), f"exit status {rc}")
        raise ModelCopyError(
            f"{target.name} could not download its part of {manifest.name} from "
            f"{hub_host()}: {redact(said.strip())[:200]}"
        )
