"""Screenshots of the window, as people see it: ``python -m tests.gui.screenshots [OUTDIR]``.

Runs the real app on the xcb platform (real fonts and styling) under Xvfb, which it starts
itself when ``DISPLAY`` is unset (``apt-get install xvfb``), with a real demo job on this
machine, and saves light and dark PNGs of three states to OUTDIR (default
``docs/screenshots``):

- ``idle``: the demo cluster, the demo model, pipeline chosen;
- ``running``: the second answer of a conversation streaming in, live plots;
- ``error``: a rank killed mid-job: the launcher's message and the per-rank log buttons.

and the Cluster pane alone, fed the fixture clusters' real parsed facts (no network):

- ``cluster-mesh4``: four ready Mac Studios, one being probed, one new Mac to trust;
- ``cluster-mesh4-cables``, ``cluster-ring4-cables``: the Thunderbolt map (the ring with
  its two missing mesh cables dashed);
- ``cluster-tb-bridge-cables``: three Thunderbolt 4 Macs without RDMA, the bridge on,
  one cable short of a ring: how each ring link runs (Thunderbolt, or Wi-Fi and why);
- ``cluster-guide``, ``cluster-trust``, ``cluster-access``: the RDMA guide for a macOS 27
  Mac, a first contact's fingerprint, setting up access with a password.

and the Run pane's setup on real Macs (``take_run_setup``, no network):

- ``run-preflight-failed``, ``run-preflight-copy``: the checks before start (one Mac
  runs another mlx), then the model copy under way with speed and time left;
- ``launch-command``, ``launch-command-demo``: the equivalent mlx.launch dialog;
- ``run-network-change``: a network change offered for a faster ring (issue 18), with
  its undo and the admin password asked once.

and the Model pane's library (``take_library``; the real huggingface_hub against the fake
Hub on 127.0.0.1, models with real headers over sparse or virtual data):

- ``library-local``: the models on this Mac (Hugging Face cache, LM Studio, a GGUF, a
  half download) with the fit badges on the demo cluster;
- ``library-search``, ``library-download``, ``library-gated``: Hugging Face search
  results planned from their headers, a download under way, a gated repo's message;
  each under the library: where the nodes get the model from (``model_source``).

and the Run pane's API section with a real demo job (``take_api``):

- ``run-api``: the API on, a key just made (shown once, with Copy), the curl example, and
  an answer asked through the API streaming into the chat under who asked.

and the live-demo kit on a real demo job of four simulated Macs (``take_demokit``):

- ``split-editor``: the Model pane with a pipeline split moved by hand;
- ``linktest-cables``: Test links, each ring link's bytes/s and share of loopback TCP
  on its cable;
- ``compare``: Compare's panel: one Mac vs the four, side by side, the headline large,
  the estimate for the real Macs and the demo's note that its Macs are simulated;
- ``presentation``: presentation mode (full screen);
- ``history``: the History window, the newest chat run's figures and plots: two answers
  with idle time between them (the lines hold at zero across it).

and the Fine-tune view on a real fine-tune of the demo model on the 2-node demo cluster
with the shipped demo set (``take_tune``):

- ``finetune-training``: mid-training: the loss falling, validation points, tokens/s,
  each Mac's peak memory and the time left;
- ``finetune-compare``: finished: the adapter, then Compare with base (the mascot
  question to the base model and to the base plus adapter, side by side).

and eight API clients streaming at once from a real demo job (``take_api8``):

- ``run-api-8-clients``: four apps with their own keys, two streams each, served as one
  batch: the API panel's "serving 8 at once · M waiting", and the chat showing what each
  client asked under the app that asked it.

and the layout test's windows (``take_layout``; issue 35): the window on a 1280×800 and a
1440×900 screen, with no panel, the API panel and Compare's result open, each checked
whole (``layout-<screen>-<panel>``, light theme).

``--layout`` renders only those; ``--tune`` only the Fine-tune view's; ``--api8`` only the
eight API clients'; ``--main`` only the idle, running and error states.
``--cluster`` renders only the Cluster pane's (seconds, no demo job); ``--run-setup``
only the Run pane's setup shots; ``--library`` only the library's; ``--api`` only the API
section's; ``--demokit`` only the live-demo kit's. Settings, logs and
window geometry go to a temporary home; every rank is ended at exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.helpers.procs import die_with_parent

ROOT = Path(__file__).resolve().parents[2]
SIZE = (1440, 900)
FIRST = "What is the capital of France?"
SECOND = "And Italy? Tell me about its capital in a few sentences."
THIRD = "And Spain?"
IDLE_S = 8.0  # idle time between the last two answers of the live-demo kit


@contextlib.contextmanager
def virtual_display() -> Iterator[None]:
    """An Xvfb display when there is none; nothing to do when there is one."""
    if os.environ.get("DISPLAY"):
        yield
        return
    # Xvfb picks a free display itself and writes its number to ``-displayfd``: two runs
    # started together never share one (the first to end would take the other's down).
    read, write = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(write,),
        preexec_fn=die_with_parent,  # no Xvfb left behind by a killed run
    )
    os.close(write)
    try:
        with os.fdopen(read) as said:
            number = said.readline().strip()  # once the display is ready; "" if it died
        if not number.isdigit():
            raise RuntimeError("Xvfb did not start (apt-get install xvfb)")
        os.environ["DISPLAY"] = f":{number}"
        yield
    finally:
        xvfb.terminate()
        try:
            xvfb.wait(5)
        except subprocess.TimeoutExpired:
            xvfb.kill()
            xvfb.wait()


def wait_for(app, condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        app.processEvents()
        time.sleep(0.02)


def settle(app, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.02)


def shoot_themes(
    app, widget, outdir: Path, name: str, settle_s: float, prepare: Callable[[], None] | None = None
) -> list[Path]:
    """``widget`` grabbed in the light then the dark theme as ``<name>-<theme>.png``
    (``prepare`` runs once the theme has settled), and the light theme back."""
    from gui import style

    paths = []
    for theme in (style.LIGHT, style.DARK):
        style.apply(app, theme)
        settle(app, settle_s)
        if prepare is not None:
            prepare()
        path = outdir / f"{name}-{theme.name}.png"
        widget.grab().save(str(path))
        paths.append(path)
    style.apply(app, style.LIGHT)
    return paths


def take_layout(outdir: Path) -> list[Path]:
    """The layout test (``tests/gui/test_layout.py``) on this display, with real fonts: the
    window on a 1280×800 and a 1440×900 screen, with no panel, the API and Compare open,
    saved as ``layout-<screen>-<panel>.png`` (light theme) as it checks each."""
    env = {**os.environ, "MACMESH_LAYOUT_SHOTS": str(outdir)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(ROOT / "tests" / "gui" / "test_layout.py"), "-k", "every_widget"],
        env=env,
        cwd=ROOT,
        check=False,
    )  # fmt: skip
    if run.returncode:
        raise RuntimeError("the layout test failed: see its output above")
    return sorted(outdir.glob("layout-*.png"))


def take(outdir: Path) -> list[Path]:
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from core.model.demo_model import ensure_demo_model
    from core.run.states import RunState
    from core.settings import Settings
    from gui.app import configure
    from gui.main_window import MainWindow
    from gui.preferences import Preferences

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, os.environ["MACMESH_CONFIG_DIR"]
    )
    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure(app, "light")
    model = ensure_demo_model()
    window = MainWindow(Preferences(Settings(max_tokens=64)), demo=True)
    window.resize(*SIZE)
    window.show()
    saved: list[Path] = []

    def shoot(name: str) -> None:
        saved.extend(shoot_themes(app, window, outdir, name, 0.15, window.run.redraw))

    run = window.run
    try:
        window.model.load(model)
        wait_for(app, lambda: window.model.info is not None, 60, "the demo model")
        window.model.select_strategy("pipeline")
        settle(app, 0.5)
        shoot("idle")
        run.start()
        run.chat.prompt.setText(FIRST)
        run.chat.prompt.returnPressed.emit()
        wait_for(
            app,
            lambda: run.controller.state == RunState.READY and "Paris" in run.chat.text(),
            240,
            "the first answer",
        )
        run.chat.prompt.setText(SECOND)
        run.chat.prompt.returnPressed.emit()
        wait_for(
            app,
            lambda: (
                run.chat.text().count("MacMesh cluster") == 2
                and len(run.chat.text().split("MacMesh cluster")[-1]) > 60
            ),
            240,
            "the second answer to stream",
        )
        shoot("running")
        wait_for(app, lambda: run.controller.state == RunState.READY, 240, "the second answer")
        victim = run.controller.job.ranks[-1].pid
        os.kill(victim, signal.SIGKILL)
        wait_for(app, lambda: run.controller.state == RunState.FAILED, 60, "the failure")
        settle(app, 0.5)
        shoot("error")
    finally:
        if run.busy:
            run.stop()
            wait_for(app, lambda: not run.busy, 30, "the job to stop")
        window.close()
        app.processEvents()
    return saved


def take_api(outdir: Path) -> list[Path]:
    import threading

    import httpx
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from core.model.demo_model import ensure_demo_model
    from core.run.states import RunState
    from core.settings import Settings
    from gui.app import configure
    from gui.main_window import MainWindow
    from gui.preferences import Preferences
    from tests.helpers.serving import free_port

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, os.environ["MACMESH_CONFIG_DIR"]
    )
    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure(app, "light")
    model = ensure_demo_model()
    window = MainWindow(Preferences(Settings(max_tokens=64)), demo=True)
    window.resize(*SIZE)
    window.show()
    run, saved = window.run, []
    try:
        window.model.load(model)
        wait_for(app, lambda: window.model.info is not None, 60, "the demo model")
        window.model.select_strategy("pipeline")
        run.api_button.setChecked(True)
        panel = run.api_panel
        panel.port.setValue(free_port())
        panel.enabled.setChecked(True)
        panel.new_key.click()
        key = panel.key.text()
        run.start()
        wait_for(app, lambda: run.api.running, 240, "the API to serve the job")
        body = {
            "model": window.model.info.name,
            "messages": [{"role": "user", "content": SECOND}],
            "max_tokens": 64,
        }
        url = f"{run.api.address}/chat/completions"
        headers = {"Authorization": f"Bearer {key}"}
        threading.Thread(
            target=lambda: httpx.post(url, json=body, headers=headers, timeout=300), daemon=True
        ).start()
        wait_for(
            app,
            lambda: (
                "Asked through the API" in run.chat.text()
                and "MacMesh cluster" in run.chat.text()  # the question comes first
                and len(run.chat.text().split("MacMesh cluster")[-1]) > 60
            ),
            240,
            "the API answer to stream",
        )
        saved.extend(shoot_themes(app, window, outdir, "run-api", 0.15, run.redraw))
        wait_for(app, lambda: run.controller.state == RunState.READY, 240, "the API answer")
    finally:
        if run.busy:
            run.stop()
            wait_for(app, lambda: not run.busy, 30, "the job to stop")
        window.close()
        app.processEvents()
    return saved


# Eight API clients at once (issue 24): four apps, each with its own key, two streams each.
API_CLIENTS = ("Zed", "Raycast", "notebook", "Open WebUI")
API_QUESTIONS = (  # each asks for a few sentences: eight answers stream side by side
    "Tell me about Paris in a few sentences.",
    "Describe the rivers of Europe in a few sentences.",
    "Explain in a few sentences how a pipeline of computers works.",
    "Tell me about the Mac Studio in a few sentences.",
    "Describe the sea on a stormy day in a few sentences.",
    "Tell me about Rome, the capital of Italy, in a few sentences.",
    "Explain in a few sentences what a cache does.",
    "Tell me about the history of bread in a few sentences.",
)

API8_SIZE = (1440, 1000)


def take_api8(outdir: Path) -> list[Path]:
    """Eight API clients streaming at once from the real demo job: the Run pane's API
    panel serving them as one batch ("serving 8 at once · M waiting") and the chat showing
    what each client asked, under the app that asked it; light and dark."""
    import threading

    import httpx
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from core.model.demo_model import ensure_demo_model
    from core.run.states import RunState
    from core.settings import Settings
    from gui.app import configure
    from gui.main_window import MainWindow
    from gui.preferences import Preferences
    from tests.helpers.serving import free_port

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, os.environ["MACMESH_CONFIG_DIR"]
    )
    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure(app, "light")
    model = ensure_demo_model()
    window = MainWindow(Preferences(Settings(max_tokens=64)), demo=True)
    window.resize(*API8_SIZE)  # taller: the chat shows several answers under the API panel
    window.show()
    run, saved = window.run, []
    streamed: list[int] = [0] * len(API_QUESTIONS)  # chunks each client has read
    try:
        window.model.load(model)
        wait_for(app, lambda: window.model.info is not None, 60, "the demo model")
        window.model.select_strategy("pipeline")
        run.api_button.setChecked(True)
        panel = run.api_panel
        panel.port.setValue(free_port())
        panel.enabled.setChecked(True)
        keys = [run.api.new_key(name) for name in API_CLIENTS]
        panel.refresh()
        run.start()
        wait_for(app, lambda: run.api.running, 240, "the API to serve the job")
        url = f"{run.api.address}/chat/completions"

        def client(i: int) -> None:
            body = {
                "model": window.model.info.name,
                "messages": [{"role": "user", "content": API_QUESTIONS[i]}],
                "max_tokens": 160,
                "stream": True,
            }
            headers = {"Authorization": f"Bearer {keys[i % len(keys)]}"}
            with httpx.stream("POST", url, json=body, headers=headers, timeout=600) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        streamed[i] += 1

        for i in range(len(API_QUESTIONS)):
            threading.Thread(target=client, args=(i,), daemon=True).start()
        try:
            wait_for(
                app,
                lambda: (
                    run.api.serving == len(API_QUESTIONS)
                    and run.chat.text().count("Asked through the API") == len(API_QUESTIONS)
                    and min(streamed) >= 12
                ),
                300,
                "eight clients streaming at once",
            )
        except TimeoutError as late:
            seen = f"serving {run.api.serving}, {run.api.served} answered, streamed {streamed}"
            raise TimeoutError(f"{late} ({seen})") from None

        def prepare() -> None:
            panel.refresh()
            run.redraw()

        saved.extend(shoot_themes(app, window, outdir, "run-api-8-clients", 0.15, prepare))
        wait_for(app, lambda: run.controller.state == RunState.READY, 600, "the answers")
    finally:
        if run.busy:
            run.stop()
            wait_for(app, lambda: not run.busy, 30, "the job to stop")
        window.close()
        app.processEvents()
    return saved


CLUSTER_WIDTH = 434  # the Cluster pane's width in the window's left column


def take_cluster(outdir: Path) -> list[Path]:
    """The Cluster pane with the fixture clusters, light and dark."""
    import tempfile as _tempfile
    from dataclasses import replace

    import paramiko
    from PySide6.QtWidgets import QApplication, QVBoxLayout, QWidget

    from core.cluster.discovery import BonjourPeer
    from core.cluster.registry import ProbeState
    from core.remote.ssh import UnknownHostKey
    from gui.app import configure
    from gui.bridge import Bridge
    from gui.cluster.pane import CABLES, MACS, ClusterPane
    from tests.fixtures.macos.hosts import load_facts
    from tests.gui.fakes import FakeScanner

    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure(app, "light")
    saved: list[Path] = []
    home = Path(_tempfile.mkdtemp(prefix="macmesh-cluster-shots-"))

    def peer(name: str, address: str, is_self: bool = False) -> BonjourPeer:
        return BonjourPeer(
            name, frozenset({"_ssh._tcp.local."}), hostname=f"{name}.local.",
            addresses=(address,), ssh_port=22, model="Mac15,14", osxvers=25, is_self=is_self,
        )  # fmt: skip

    def pane_for(fixture_set: str, extras: bool) -> tuple[QWidget, ClusterPane, FakeScanner]:
        scanner = FakeScanner(home / f"{fixture_set}-hosts.json")
        frame = QWidget()
        frame.setObjectName("central")
        layout = QVBoxLayout(frame)
        layout.setContentsMargins(14, 14, 14, 14)
        pane = ClusterPane(bridge, scanner=scanner, host_is_mac=True, open_url=lambda _url: None)
        layout.addWidget(pane)
        frame.setFixedWidth(CLUSTER_WIDTH + 28)
        registry = scanner.registry
        for i, facts in enumerate(load_facts(fixture_set)):
            registry.peer_seen(peer(facts.name, f"10.0.0.{i + 2}", is_self=i == 0))
            registry.set_probe_result(facts.name, ProbeState.READY, "", facts)
        if extras:
            scanner.add_host("mini.local")
            registry.set_probe_state(
                "mini.local", ProbeState.PROBING, "Asking mini.local over SSH for its facts…"
            )
            registry.peer_seen(peer("studio-e", "10.0.0.9"))
            key = UnknownHostKey("studio-e.local", 22, paramiko.ECDSAKey.generate(), home / "kh")
            registry.set_probe_state(
                "studio-e", ProbeState.NEEDS_HOST_KEY, "Compare its fingerprint, then trust it."
            )
            scanner.host_key_needed.emit("studio-e", key)
        frame.show()
        settle(app, 0.2)
        return frame, pane, scanner

    def shoot(widget: QWidget, name: str, fit: bool = True) -> None:
        def prepare() -> None:
            if fit:
                widget.adjustSize()
            settle(app, 0.1)

        saved.extend(shoot_themes(app, widget, outdir, name, 0.15, prepare))

    bridge = Bridge()
    try:
        frame, pane, _ = pane_for("mesh4", extras=True)
        shoot(frame, "cluster-mesh4")
        pane.show_view(CABLES)
        shoot(frame, "cluster-mesh4-cables")
        pane.show_view(MACS)
        trust = pane.actions.show_host_key("studio-e")
        assert trust is not None
        shoot(trust, "cluster-trust")
        trust.close()
        access = pane.actions.show_access("studio-e")
        assert access is not None
        shoot(access, "cluster-access")
        access.close()
        frame.close()

        frame, pane, _ = pane_for("ring4", extras=False)
        pane.show_view(CABLES)
        shoot(frame, "cluster-ring4-cables")
        frame.close()

        # Issue 18: no RDMA, the bridge on, no cable between mini-a and mini-c: how the
        # ring runs over each link, in words.
        frame, pane, _ = pane_for("tb-bridge", extras=False)
        pane.show_view(CABLES)
        shoot(frame, "cluster-tb-bridge-cables")
        frame.close()

        frame, pane, _ = pane_for("pair27", extras=False)
        off = replace(load_facts("pair27")[1])
        guide = pane.actions.show_guide(off.name)
        assert guide is not None
        shoot(guide, "cluster-guide", fit=False)
        guide.close()
        frame.close()
    finally:
        bridge.close()
        app.processEvents()
    return saved


RUN_SIZE = (1000, 800)  # the Run pane's size in the default window


def take_run_setup(outdir: Path) -> list[Path]:
    """The Run pane's checks before start on two macOS 27 Macs (pair27's real parsed
    facts; one runs another mlx), the model copy under way, and the mlx.launch dialog for
    real Macs and for the demo: light and dark. Nothing connects anywhere."""
    from dataclasses import replace

    from PySide6.QtWidgets import QApplication

    from core.model.manifest import FileEntry, Manifest
    from core.plan.memory import Node, PlanOptions
    from core.plan.planner import make_plan
    from core.remote.modelcheck import CheckResult
    from core.remote.modelcopy import CopyProgress
    from core.remote.targets import Target
    from core.run.checks.preflight import Gathered, evaluate
    from core.run.demo import demo_facts
    from core.run.placement import demo_launch, job_spec, planned_launch
    from core.run.planning import plan_on
    from gui.app import configure
    from gui.bridge import Bridge
    from gui.run.launch_dialog import LaunchDialog
    from gui.run.network_dialog import NetworkChangeDialog
    from gui.run.pane import RunPane
    from tests.fixtures.macos.hosts import load_facts
    from tests.helpers.header_models import synthetic_model_info

    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure(app, "light")
    saved: list[Path] = []
    info = synthetic_model_info(
        name="Llama-3.3-70B-Instruct-4bit", layers=80, layer_bytes=470_000_000,
        shared_bytes=1_100_000_000,
    )  # fmt: skip
    info = replace(info, path=Path("/Users/admin/Models") / info.name)
    facts = load_facts("pair27")
    nodes = [Node(f.name, f.memory_bytes or 0, chip=f.chip) for f in facts]
    plan = make_plan(info, nodes, options=PlanOptions(strategy="pipeline"))
    targets = [
        Target(f.name, f"{f.name}.local", user="admin", python=f.python_executable) for f in facts
    ]
    model_id = "5f0c1e9a2b7d4c3e8a61f0b2d9e4c7a1"
    manifests: dict[str, Manifest] = {}
    for rank, stage in enumerate(plan.ranks):
        weights = [
            FileEntry(f"model-{i:05d}-of-00008.safetensors", 4_700_000_000, "0" * 64)
            for i in range(1 + 4 * rank, 5 + 4 * rank)
        ]
        files = (FileEntry("config.json", 1_412, "1" * 64), *weights)
        manifests[stage.node] = Manifest(info.name, files, model_id)
    folder = "/Users/admin/Library/Caches/MacMesh/models/Llama-3.3-70B-Instruct-4bit-5f0c1e9a2b7d"

    def gather(odd_mlx: bool) -> list[Gathered]:
        result = []
        for target, node_facts in zip(targets, facts, strict=True):
            if target is targets[-1]:  # the fixture's second Mac has no mlx yet
                versions = ("0.29.1", "0.28.0") if odd_mlx else ("0.32.4", "0.32.2")
                node_facts = replace(
                    node_facts, mlx_version=versions[0], mlx_lm_version=versions[1]
                )
            part = manifests[target.name]
            missing = tuple(e.name for e in part.files)
            size = sum(e.size for e in part.files)
            check = CheckResult(target.name, "missing", folder, missing, size)
            result.append(Gathered(target, node_facts, model=check))
        return result

    def shoot(widget, name: str) -> None:
        saved.extend(shoot_themes(app, widget, outdir, name, 0.2))

    bridge = Bridge()
    pane = RunPane(bridge)
    pane.resize(*RUN_SIZE)
    pane.set_plan(info, plan)
    pane.show()
    try:
        failed = evaluate(plan, gather(odd_mlx=True), manifests)
        pane.checks.show_report(failed)
        count = len(failed.failures)
        pane.controller.state_changed.emit(
            "not-ready", f"Not ready: {count} check{'s' * (count != 1)} failed. Fix "
            f"{'them' if count != 1 else 'it'} as shown, then press Start again.",
        )  # fmt: skip
        shoot(pane, "run-preflight-failed")
        ready = evaluate(plan, gather(odd_mlx=False), manifests)
        pane.checks.show_report(ready)
        names = ", ".join(ready.copies_needed)
        pane.controller.state_changed.emit("copying", f"Copying {info.name} to {names}…")
        for node, done, rate in ((facts[0].name, 0.62, 1.12e9), (facts[1].name, 0.37, 0.86e9)):
            total = manifests[node].total_bytes
            left = total * (1 - done)
            pane.checks.show_copy(
                CopyProgress(node, "copying", int(total * done), total, rate, left / rate)
            )
        shoot(pane, "run-preflight-copy")
        pane.controller.state_changed.emit("idle", "")

        # Issue 18: the cable carries only IPv6 (the bridge down): the change offered for
        # a faster ring, as the checks' Change… button opens it.
        first = facts[0].name
        offered = [o for o in ready.backend.offers if o.node == first]
        change = NetworkChangeDialog(
            first, offered, apply=lambda _pw: None, run_in_background=lambda *a, **k: None
        )
        change.show()
        shoot(change, "run-network-change")
        change.close()

        dialog = LaunchDialog(planned_launch(info, plan, targets, facts))
        dialog.show()
        shoot(dialog, "launch-command")
        dialog.close()
        demo_plan = plan_on(info, demo_facts(2), "pipeline")
        spec = replace(job_spec(info, demo_plan), python="/Users/admin/mlx/bin/python3")
        dialog = LaunchDialog(demo_launch(spec))
        dialog.show()
        shoot(dialog, "launch-command-demo")
        dialog.close()
    finally:
        pane.close()
        pane.deleteLater()
        bridge.close()
        app.processEvents()
    return saved


def take_demokit(outdir: Path) -> list[Path]:
    """The live-demo kit on a real demo job of four simulated Macs: the split editor,
    Test links on the cable map, presentation mode, Compare (one Mac, then the four) and
    History; light and dark."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from core.model.demo_model import ensure_demo_model
    from core.run.states import RunState
    from core.settings import Settings
    from gui.app import configure
    from gui.cluster.pane import CABLES
    from gui.main_window import MainWindow
    from gui.preferences import Preferences

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, os.environ["MACMESH_CONFIG_DIR"]
    )
    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure(app, "light")
    model = ensure_demo_model()
    window = MainWindow(Preferences(Settings(max_tokens=48, demo_nodes=4)), demo=True)
    window.resize(*SIZE)
    window.show()
    saved: list[Path] = []
    run = window.run

    def shoot(widget, name: str, settle_s: float = 0.2) -> None:
        saved.extend(shoot_themes(app, widget, outdir, name, settle_s, run.redraw))

    def answered(prompt: str) -> None:
        run.chat.prompt.setText(prompt)
        run.chat.prompt.returnPressed.emit()
        wait_for(app, lambda: run.controller.state == RunState.GENERATING, 60, "generating")
        wait_for(app, lambda: run.controller.state == RunState.READY, 300, "the answer")

    try:
        window.model.load(model)
        wait_for(app, lambda: window.model.info is not None, 60, "the demo model")
        window.model.select_strategy("pipeline")
        settle(app, 0.3)
        boxes = window.model.split_editor.boxes
        boxes[0].setValue(boxes[0].value() + 2)  # a boundary moved by hand
        settle(app, 0.3)
        shoot(window.model, "split-editor")
        run.controller.link_scale = 0.25  # 8 MiB a size: seconds on two shared cores
        run.start()
        wait_for(app, lambda: run.controller.state == RunState.READY, 300, "the job to load")
        answered(FIRST)
        window.cluster.show_view(CABLES)
        window.cluster.link_bar.button.click()
        wait_for(app, lambda: window.cluster.link_bar.tested is not None, 300, "the link test")
        wait_for(app, lambda: run.controller.state == RunState.READY, 60, "ready again")
        settle(app, 0.3)
        shoot(window.cluster, "linktest-cables")
        run.stop()
        wait_for(app, lambda: not run.busy, 60, "the job to stop")
        run.compare()
        wait_for(app, lambda: run.comparison.result is not None, 900, "the comparison")
        settle(app, 0.5)
        # Compare's panel whole (the pane's column scrolls it): the headline, both runs,
        # the estimate for the real Macs and the demo's "simulated" note.
        shoot(run.comparison, "compare")
        run.start()  # live again, for presentation mode
        wait_for(app, lambda: run.controller.state == RunState.READY, 300, "the job to load")
        view = window.show_presentation()
        # Full screen is the window manager's to make; Xvfb has none: the screen's size.
        view.setGeometry(view.screen().geometry())
        run.chat.prompt.setText(SECOND)
        run.chat.prompt.returnPressed.emit()
        wait_for(
            app,
            lambda: (
                any(line.measured for line in view.map.scene.cables())
                and run.controller.telemetry is not None
                and run.controller.telemetry.current().total_tokens > 8
            ),
            300,
            "live traffic on the cables",
        )
        shoot(view, "presentation", 0.4)
        view.close()
        wait_for(app, lambda: run.controller.state == RunState.READY, 300, "the answer")
        settle(app, IDLE_S)  # idle between two answers: History's lines hold at zero
        answered(THIRD)
        run.stop()
        wait_for(app, lambda: not run.busy, 60, "the job to stop")
        history = window.show_history()
        history.resize(1100, 820)
        # Every run kept (three chats, the link test, the compare) before one is chosen:
        # the newest chat's plots show two answers with idle time between them.
        wait_for(app, lambda: history.view.table.rowCount() >= 5, 30, "the history")
        chat = next(i for i, r in enumerate(history.view.records) if r.kind == "chat")
        history.view.table.selectRow(chat)
        wait_for(app, lambda: history.view.current is not None, 30, "the chat run")
        wait_for(app, lambda: history.view.current.kind == "chat", 30, "the chat run")
        settle(app, 0.5)
        shoot(history, "history")
        history.close()
    finally:
        if run.busy:
            run.stop()
            wait_for(app, lambda: not run.busy, 60, "the job to stop")
        window.close()
        app.processEvents()
    return saved


LIBRARY_SIZE = (560, 900)


def _sparse_model(folder: Path, config: dict, files: int) -> Path:
    """A model folder with real headers whose data is a hole in the file (no disk used)."""
    from core.model.safetensors_headers import read_header
    from tests.helpers.header_models import llama_tensors, write_header_only_model

    write_header_only_model(folder, config, llama_tensors(config), files=files)
    for weights in folder.glob("*.safetensors"):
        declared = read_header(weights, check_data=False).declared_size
        with weights.open("r+b") as handle:
            handle.truncate(declared)
    return folder


def take_library(outdir: Path) -> list[Path]:
    """The Model pane's library on this Mac and on Hugging Face (the fake Hub), light
    and dark; the download shot shows a real download's progress line, held still."""
    import tempfile as _tempfile

    from huggingface_hub import constants
    from PySide6.QtWidgets import QApplication

    from core.library.download import DownloadProgress
    from core.run.demo import demo_nodes
    from gui.app import configure
    from gui.bridge import Bridge
    from gui.model.library_view import HUB
    from gui.model.pane import ModelPane
    from tests.helpers.fake_hub import FakeHub
    from tests.helpers.header_models import llama_config, llama_tensors
    from tests.helpers.hf_cache import put_in_hf_cache

    home = Path(_tempfile.mkdtemp(prefix="macmesh-library-shots-"))
    hub = FakeHub().start()
    saved_env = {k: os.environ.get(k) for k in ("HOME", "HF_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE")}
    os.environ.update(
        HOME=str(home), HF_HOME=str(home / "hf"), HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="0"
    )
    os.environ["MACMESH_CACHE_DIR"] = str(home / "macmesh-cache")
    constants.HF_HUB_OFFLINE = False
    constants.HF_HUB_CACHE = str(home / "hf" / "hub")

    def shape(layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int, **kw):
        return llama_config(
            layers=layers, hidden=hidden, heads=heads, kv_heads=kv, intermediate=ffn,
            vocab=vocab, **kw,
        )  # fmt: skip

    llama8 = shape(32, 4096, 32, 8, 14336, 128256, bits=4)
    qwen14 = shape(48, 5120, 40, 8, 13824, 152064, bits=4, model_type="qwen2")
    mistral = shape(40, 5120, 32, 8, 32768, 131072, bits=4, model_type="mistral")
    llama70 = shape(80, 8192, 64, 8, 28672, 128256, bits=4)
    qwen72 = shape(80, 8192, 64, 8, 29568, 152064, bits=8, model_type="qwen2")
    llama405 = shape(126, 16384, 128, 8, 53248, 128256, bits=4)
    cache = home / "hf" / "hub"
    staging = home / "staging"
    put_in_hf_cache(
        cache, "mlx-community/Meta-Llama-3.1-8B-Instruct-4bit",
        _sparse_model(staging / "a", llama8, 2), move=True,
    )  # fmt: skip
    put_in_hf_cache(
        cache,
        "mlx-community/Qwen2.5-14B-Instruct-4bit",
        _sparse_model(staging / "b", qwen14, 3),
        move=True,
    )
    put_in_hf_cache(
        cache, "mlx-community/Llama-3.3-70B-Instruct-4bit",
        _sparse_model(staging / "c", llama70, 8),
        interrupted=["model-00008-of-00008.safetensors"], move=True,
    )  # fmt: skip
    lms = home / ".lmstudio" / "models"
    _sparse_model(lms / "mlx-community" / "Mistral-Small-24B-Instruct-2501-4bit", mistral, 3)
    gguf = lms / "bartowski" / "Llama-3.2-3B-Instruct-GGUF"
    gguf.mkdir(parents=True)
    with (gguf / "Llama-3.2-3B-Instruct-Q4_K_M.gguf").open("wb") as handle:
        handle.truncate(2_019_377_696)
    for repo_id, config, files, downloads in (
        ("mlx-community/Llama-3.3-70B-Instruct-4bit", llama70, 8, 48_211),
        ("mlx-community/Qwen2.5-72B-Instruct-8bit", qwen72, 16, 21_904),
        ("mlx-community/Meta-Llama-3.1-8B-Instruct-4bit", llama8, 2, 310_552),
        ("mlx-community/Llama-3.1-405B-Instruct-4bit", llama405, 48, 3_120),
    ):
        hub.add_virtual_model(repo_id, config, llama_tensors(config), files=files,
                              downloads=downloads)  # fmt: skip
    hub.add_virtual_model(
        "meta-llama/Llama-3.1-8B-Instruct", llama8, llama_tensors(llama8), files=2, gated=True
    )

    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure(app, "light")
    saved: list[Path] = []
    bridge = Bridge()
    pane = ModelPane(bridge)
    pane.resize(*LIBRARY_SIZE)
    pane.show()
    view = pane.library

    def shoot(name: str) -> None:
        saved.extend(shoot_themes(app, pane, outdir, name, 0.2))

    try:
        pane.set_nodes(demo_nodes(2))
        wait_for(
            app,
            lambda: (
                view.table.topLevelItemCount() == 5 and all(entry.checked for entry in view._local)
            ),
            60,
            "the local library, checked",
        )
        shoot("library-local")
        view.search_hub("instruct")
        wait_for(
            app,
            lambda: (
                view.table.topLevelItemCount() == 4
                and all(
                    view.table.topLevelItem(i).text(3) != "…"
                    for i in range(view.table.topLevelItemCount())
                )
            ),
            60,
            "the search results and their fit",
        )
        shoot("library-search")
        view.table.setCurrentItem(view.table.topLevelItem(0))
        view.downloading = "mlx-community/Llama-3.3-70B-Instruct-4bit"
        view._show_progress(True)
        total = 39_709_844_480
        view._progress(
            DownloadProgress(view.downloading, int(total * 0.42), total, 3, 12, 84e6,
                             total * 0.58 / 84e6)
        )  # fmt: skip
        view._say("")
        shoot("library-download")
        view._finish_download("")
        view.tabs.setCurrentIndex(HUB)
        view.search_hub("meta-llama/Llama-3.1-8B-Instruct")
        wait_for(app, lambda: view.table.topLevelItemCount() == 1, 60, "the gated repo")
        view.table.setCurrentItem(view.table.topLevelItem(0))
        view.download("meta-llama/Llama-3.1-8B-Instruct")
        wait_for(app, lambda: view.downloading is None, 60, "the gated refusal")
        shoot("library-gated")
    finally:
        pane.close()
        pane.deleteLater()
        bridge.close(60)
        app.processEvents()
        hub.stop()
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return saved


TUNE_SIZE = (1360, 900)


def take_tune(outdir: Path) -> list[Path]:
    """The Fine-tune view on a real fine-tune of the demo model (2 simulated Macs, the
    demo set), mid-training and then compared with its base; light and dark."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from core.model.demo_model import ensure_demo_model
    from core.settings import Settings
    from gui.app import configure
    from gui.main_window import MainWindow
    from gui.preferences import Preferences

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, os.environ["MACMESH_CONFIG_DIR"]
    )
    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure(app, "light")
    model = ensure_demo_model()
    window = MainWindow(Preferences(Settings(max_tokens=48, demo_nodes=2)), demo=True)
    window.resize(*SIZE)
    window.show()
    saved: list[Path] = []
    tune_window = None
    try:
        window.model.load(model)
        wait_for(app, lambda: window.model.info is not None, 60, "the demo model")
        tune_window = window.show_fine_tune()
        tune_window.resize(*TUNE_SIZE)
        view = tune_window.view
        view.data_box.demo_button.click()
        wait_for(app, lambda: view.data is not None, 60, "the demo set")
        view.inputs.name_input.setText("Mochi the mascot")
        view.start()
        plot = view.plot
        wait_for(
            app,
            lambda: plot.valid.size >= 2 and plot.train.size >= 0.6 * plot.iterations,
            1800,
            "training past halfway, with a validation loss",
        )
        view.timer.stop()  # held still for the shot: every theme shows the same moment
        saved.extend(
            shoot_themes(app, tune_window, outdir, "finetune-training", 0.2, view.plot.refresh)
        )
        view.timer.start()
        wait_for(app, lambda: not view.controller.active, 1800, "the fine-tune to finish")
        wait_for(app, lambda: view.adapter is not None, 60, "the adapter")
        view.adapter_panel.compare_button.click()
        wait_for(app, lambda: view.answers.isVisible(), 900, "the comparison with base")
        saved.extend(shoot_themes(app, tune_window, outdir, "finetune-compare", 0.2))
    finally:
        if tune_window is not None:
            tune_window.view.shutdown()
        window.close()
        app.processEvents()
    return saved


def main(argv: list[str]) -> int:
    cluster_only = "--cluster" in argv
    run_setup_only = "--run-setup" in argv
    library_only = "--library" in argv
    api_only = "--api" in argv
    api8_only = "--api8" in argv
    main_only = "--main" in argv
    demokit_only = "--demokit" in argv
    tune_only = "--tune" in argv
    layout_only = "--layout" in argv
    flags = (
        "--cluster", "--run-setup", "--library", "--api", "--api8", "--main", "--demokit",
        "--tune", "--layout",
    )  # fmt: skip
    argv = [a for a in argv if a not in flags]
    outdir = Path(argv[0]) if argv else ROOT / "docs" / "screenshots"
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="macmesh-shots-") as home:
        os.environ["MACMESH_CONFIG_DIR"] = str(Path(home) / "config")
        os.environ["MACMESH_LOG_DIR"] = str(Path(home) / "logs")
        os.environ["MACMESH_DATA_DIR"] = str(Path(home) / "data")
        os.environ["QT_QPA_PLATFORM"] = "xcb"
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        with virtual_display():
            if layout_only:
                shots = take_layout(outdir.resolve())
            elif tune_only:
                shots = take_tune(outdir.resolve())
            elif demokit_only:
                shots = take_demokit(outdir.resolve())
            elif api_only:
                shots = take_api(outdir.resolve())
            elif api8_only:
                shots = take_api8(outdir.resolve())
            elif main_only:
                shots = take(outdir.resolve())
            elif library_only:
                shots = take_library(outdir.resolve())
            elif run_setup_only:
                shots = take_run_setup(outdir.resolve())
            else:
                shots = take_cluster(outdir.resolve()) + take_run_setup(outdir.resolve())
                shots += take_library(outdir.resolve())
            only = (
                cluster_only, run_setup_only, library_only, api_only, api8_only, main_only,
                demokit_only, tune_only, layout_only,
            )  # fmt: skip
            if not any(only):
                shots += take_layout(outdir.resolve())
                shots += take(outdir.resolve()) + take_api(outdir.resolve())
                shots += take_api8(outdir.resolve())
                shots += take_demokit(outdir.resolve()) + take_tune(outdir.resolve())
            for path in shots:
                print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
