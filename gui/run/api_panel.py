"""The Run pane's API section: on/off, this Mac only or shared on the network, the
address, keys (a new one shown once with Copy; revoke), copy-able curl and Python
examples, the requests being served at once, waiting and served, the served model's tool
call format and structured output, whether
``/metrics`` needs the key, and whether the prompt cache is one per key or shared. A thin
view over ``core.serve.service.ApiService``: its blocking calls go to the bridge's pool,
its ``changed`` comes back through the bridge.
"""

from __future__ import annotations

from PySide6.QtCore import QThreadPool, QTimer
from PySide6.QtGui import QCloseEvent, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from core.paths import FolderError
from core.serve.service import ApiService, ApiSettings, examples
from gui.bridge import Bridge
from gui.style import set_role
from gui.widgets import label

REFRESH_MS = 1000  # the requests served and waiting, while serving


class ApiPanel(QFrame):
    def __init__(
        self,
        service: ApiService,
        bridge: Bridge,
        queue: QThreadPool | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        set_role(self, "subcard")
        self.service, self._bridge = service, bridge
        self._queue = queue or bridge.serial_queue()  # the settings apply in their order
        self.new_key_text: str | None = None  # the key made last, shown until the next
        self.enabled = QCheckBox("Serve an OpenAI-compatible API")
        self.share = QCheckBox("Share on this network")
        self.share.setToolTip("Other computers on this network can use it, always with a key")
        self.require_key = QCheckBox("Require a key on this Mac")
        self.metrics_open = QCheckBox("Metrics without a key")
        self.metrics_open.setToolTip(
            "GET /metrics (Prometheus) answers without a key, for a scraper; the API "
            "itself keeps its key"
        )
        self.shared_cache = QCheckBox("One prompt cache for every key")
        self.shared_cache.setToolTip(
            "For one person's apps: every key reuses what any key sent. Off, each key has "
            "its own prompt cache and no key can see or time another's prompts."
        )
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setToolTip("The API's port")
        self.status = label("", "secondary", wrap=True, selectable=True)
        # the served model's tool call format and structured output (issue 34)
        self.supports = label("", "secondary", wrap=True, selectable=True)
        self.supports.hide()
        # Two rows, so the panel fits the Run pane at a 1280-pixel-wide window.
        top = QHBoxLayout()
        top.setSpacing(10)
        top.addWidget(self.enabled)
        top.addWidget(self.share)
        top.addWidget(self.shared_cache)
        top.addStretch(1)
        access = QHBoxLayout()
        access.setSpacing(10)
        access.addWidget(self.require_key)
        access.addWidget(self.metrics_open)
        access.addStretch(1)
        access.addWidget(label("Port", "secondary"))
        access.addWidget(self.port)
        self.new_key = QPushButton("New key")
        self.key = QLineEdit()
        self.key.setReadOnly(True)
        self.key.setPlaceholderText("A new key, shown once")
        self.copy_key = QPushButton("Copy")
        self.keys = QComboBox()
        self.keys.setMinimumContentsLength(18)
        self.revoke = QPushButton("Revoke")
        keys = QHBoxLayout()
        keys.setSpacing(8)
        keys.addWidget(self.new_key)
        keys.addWidget(self.key, 1)
        keys.addWidget(self.copy_key)
        keys.addWidget(label("Keys", "secondary"))
        keys.addWidget(self.keys)
        keys.addWidget(self.revoke)
        self.curl = _code()
        self.python = _code()
        self.examples = QTabWidget()
        self.copy_curl = QPushButton("Copy")
        self.copy_python = QPushButton("Copy")
        for name, text, button in (
            ("curl", self.curl, self.copy_curl),
            ("Python", self.python, self.copy_python),
        ):
            page = QWidget()
            row = QHBoxLayout(page)
            row.setContentsMargins(0, 4, 0, 0)
            row.addWidget(text, 1)
            row.addWidget(button)
            self.examples.addTab(page, name)
        self.examples.setMaximumHeight(140)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 10)
        layout.setSpacing(8)
        layout.addLayout(top)
        layout.addLayout(access)
        layout.addWidget(self.status)
        layout.addWidget(self.supports)
        layout.addLayout(keys)
        layout.addWidget(self.examples)
        self._show_settings(service.settings)
        for box in (
            self.enabled,
            self.share,
            self.require_key,
            self.metrics_open,
            self.shared_cache,
        ):
            box.toggled.connect(self._settings_changed)
        self.port.editingFinished.connect(self._settings_changed)
        self.new_key.clicked.connect(self._new_key)
        self.copy_key.clicked.connect(lambda: _copy(self.key.text()))
        self.revoke.clicked.connect(self._revoke)
        self.copy_curl.clicked.connect(lambda: _copy(self.curl.toPlainText()))
        self.copy_python.clicked.connect(lambda: _copy(self.python.toPlainText()))
        service.changed.connect(self._changed_elsewhere)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self.timer.start()
        self.refresh()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.service.changed.disconnect(self._changed_elsewhere)
        super().closeEvent(event)

    # -- the person's choices ---------------------------------------------------------------

    def settings(self) -> ApiSettings:
        return ApiSettings(
            enabled=self.enabled.isChecked(),
            share=self.share.isChecked(),
            require_key=self.require_key.isChecked() or self.share.isChecked(),
            port=self.port.value(),
            metrics_without_key=self.metrics_open.isChecked(),
            shared_prompt_cache=self.shared_cache.isChecked(),
        )

    def _settings_changed(self) -> None:
        chosen = self.settings()
        self._show_settings(chosen)
        if chosen == self.service.settings:
            return
        self.status.setText("Applying…")
        self._bridge.run_in_background(
            lambda: self.service.apply(chosen), None, self._failed, queue=self._queue
        )

    def _new_key(self) -> None:
        try:
            self.new_key_text = self.service.new_key("made in the window")
        except (FolderError, OSError) as error:
            self.status.setText(f"No key could be made: {error}")
            return
        self.key.setText(self.new_key_text)
        self.refresh()

    def _revoke(self) -> None:
        key_id = self.keys.currentData()
        if key_id:
            self.service.revoke(str(key_id))
            self.key.clear()
            self.new_key_text = None
            self.refresh()

    def _failed(self, error: BaseException) -> None:
        self.status.setText(f"The API could not be changed: {error}")

    # -- what it shows ----------------------------------------------------------------------

    def _show_settings(self, settings: ApiSettings) -> None:
        for box, value in (
            (self.enabled, settings.enabled),
            (self.share, settings.share),
            (self.require_key, settings.needs_key),
            (self.metrics_open, settings.metrics_without_key),
            (self.shared_cache, settings.shared_prompt_cache),
        ):
            box.blockSignals(True)
            box.setChecked(value)
            box.blockSignals(False)
        self.require_key.setEnabled(not settings.share)  # the network always needs a key
        self.port.setValue(settings.port)

    def _changed_elsewhere(self) -> None:
        """From any thread: the service changed; show it on the GUI thread."""
        self._bridge.run_on_main(self.refresh)

    def refresh(self) -> None:
        service = self.service
        settings = service.settings
        if service.error:
            text = f"Not serving: {service.error}"
        elif service.running:
            text = (
                f"Serving at {service.address} · serving {service.serving} at once · "
                f"{service.waiting} waiting · {service.served} answered"
                + ("" if settings.needs_key else " · no key needed on this Mac")
                + f" · {cache_said(settings)}"
            )
        elif settings.enabled:
            text = (
                f"On: serves at {service.address} once a job is running · {cache_said(settings)}."
            )
        else:
            text = "Off: turn it on to use the cluster from other apps."
        if self.status.text() != text:
            self.status.setText(text)
        supports = service.supports if service.running else ""
        if self.supports.text() != supports:
            self.supports.setText(supports)
            self.supports.setVisible(bool(supports))
        shown = [(f"{k.label or 'key'} · {k.start}…", k.id) for k in service.list_keys()]
        if [
            (self.keys.itemText(i), self.keys.itemData(i)) for i in range(self.keys.count())
        ] != shown:
            self.keys.clear()
            for text_, key_id in shown:
                self.keys.addItem(text_, key_id)
        self.revoke.setEnabled(bool(shown))
        self.copy_key.setEnabled(bool(self.key.text()))
        lines = examples(service.address, service.model or "<model>", self.new_key_text)
        if self.curl.toPlainText() != lines["curl"]:
            self.curl.setPlainText(lines["curl"])
            self.python.setPlainText(lines["python"])


def cache_said(settings: ApiSettings) -> str:
    """Which prompt cache is on, as the panel says it."""
    if settings.shared_prompt_cache:
        return "prompt cache shared by every key"
    return "prompt cache: one per key"


def _code() -> QPlainTextEdit:
    text = QPlainTextEdit()
    text.setReadOnly(True)
    set_role(text, "code")
    return text


def _copy(text: str) -> None:
    if text:
        QGuiApplication.clipboard().setText(text)
