"""The model library beside the drop zone: the models on this Mac and on Hugging Face.

Each row: name, size, architecture, and the planner's badge for the current cluster
(fits / pipeline / tensor / doesn't fit). "On this Mac" lists ``core.library.local``
(the Hugging Face cache, LM Studio, added folders), with the reason a model cannot be
used; "On Hugging Face" searches (mlx-community by default, by downloads; an ``org/name``
or a huggingface.co link looks that model up), plans each result from its headers and
downloads with a progress bar and Cancel. "Use" hands a folder to the pane.

Everything that touches the disk or the network runs through the bridge; a result that
arrives after a newer request is dropped. Reading a header-only copy happens on the GUI
thread (milliseconds; MLX prefers its imports off worker threads).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTabBar,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from core.library.download import DownloadCancelled, DownloadProgress, download_model
from core.library.entries import LibraryEntry, State
from core.library.fit import fit
from core.library.hub import (
    OFFLINE_MESSAGE,
    HubModel,
    header_copy,
    offline,
    read_header_copy,
    repo_id_of,
    search_models,
)
from core.library.local import complete_library
from core.library.resolve import library_with_demo
from core.model.info import ModelError, ModelInfo
from core.settings import load_settings, save_settings
from core.units import bytes_per_s, duration, size
from gui.bridge import Bridge
from gui.folders import choose_folder
from gui.widgets import label

if TYPE_CHECKING:
    from core.cluster.probe.facts import NodeFacts

LOCAL, HUB = 0, 1
COLUMNS = ("Model", "Size", "Type", "Fit")  # config.json's model_type: a narrow heading
NAME, SIZE, ARCH, FIT = range(4)
ROLE = Qt.ItemDataRole.UserRole
NO_CLUSTER = "–"


@dataclass(frozen=True)
class Choice:
    """What a row stands for (kept on its item): a model on this Mac or on Hugging Face."""

    kind: Literal["local", "hub"]
    name: str  # the folder's name, or the repo id
    folder: Path | None  # where it is on this Mac (a Hugging Face model once downloaded)
    ok: bool  # usable as it is


# A row: the texts of its columns, what it stands for, its tooltip.
Row = tuple[tuple[str, str, str, str], Choice, str]


class LibraryView(QFrame):
    model_chosen = Signal(Path, str)  # a usable model folder on this Mac, and its name

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self._nodes: list[NodeFacts] = []
        self._local: list[LibraryEntry] = []
        self._hub: list[HubModel] = []
        self._local_generation = 0
        self._hub_info: dict[str, ModelInfo | str] = {}  # facts from headers, or why not
        self._downloaded: dict[str, Path] = {}
        self._generation = 0
        self._cancel: threading.Event | None = None
        self.downloading: str | None = None
        self._hub_message = ""  # the Hugging Face tab's last message, shown on that tab

        self.tabs = QTabBar()
        self.tabs.addTab("On this Mac")
        self.tabs.addTab("On Hugging Face")
        self.tabs.currentChanged.connect(self._tab_changed)
        self.search = QLineEdit()
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._filter)
        self.search.returnPressed.connect(self._search_pressed)
        self.table = QTreeWidget()
        self.table.setHeaderLabels(list(COLUMNS))
        self.table.setRootIsDecorated(False)
        self.table.setUniformRowHeights(True)
        self.table.setMinimumHeight(150)
        header = self.table.header()
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Stretch)
        for column in (SIZE, ARCH, FIT):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(False)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda *_: self.use_selected())
        self.status = label("", "hint", wrap=True, selectable=True)

        self.use_button = QPushButton("Use")
        self.use_button.clicked.connect(self.use_selected)
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(self.download_selected)
        self.add_button = QPushButton("Add a folder…")
        self.add_button.clicked.connect(self._add_folder)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setToolTip(
            "Take the folder you added out of the library (nothing is deleted)"
        )
        self.remove_button.clicked.connect(self.remove_selected)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress_text = label("", "secondary", wrap=True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_download)

        buttons = QHBoxLayout()
        buttons.setSpacing(8)
        for button in (self.use_button, self.download_button, self.add_button, self.remove_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress, 1)
        progress_row.addWidget(self.cancel_button)
        self._progress_widgets = (self.progress, self.progress_text, self.cancel_button)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        layout.addWidget(self.tabs)
        layout.addWidget(self.search)
        layout.addWidget(self.status)  # under what was typed, not below the fold
        layout.addWidget(self.table, 1)
        layout.addLayout(progress_row)
        layout.addWidget(self.progress_text)
        layout.addLayout(buttons)
        self._show_progress(False)
        self._tab_changed(LOCAL)
        self.refresh_local()

    # -- inputs -------------------------------------------------------------------------

    def set_nodes(self, nodes: list[NodeFacts]) -> None:
        """The cluster the badges are planned on (nodes with known memory)."""
        self._nodes = list(nodes)
        self._render()

    def set_locked(self, locked: bool) -> None:
        self.use_button.setEnabled(not locked and self._selected_folder() is not None)

    def refresh_local(self) -> None:
        self._local_generation += 1
        generation = self._local_generation
        folders = load_settings().library_folders
        self._bridge.run_in_background(
            lambda: library_with_demo(folders, checked=False),  # at once; headers next
            lambda entries: self._local_listed(generation, entries),
            lambda error: self._say(f"Cannot list the models on this Mac: {error}"),
        )

    def search_hub(self, text: str) -> None:
        """Search Hugging Face; an ``org/name`` or a link also looks that model up."""
        self.tabs.setCurrentIndex(HUB)
        if self.search.text() != text:
            self.search.setText(text)
        if offline():
            self._hub = []
            self._render()
            self._say(OFFLINE_MESSAGE)
            return
        self._generation += 1
        generation = self._generation
        repo_id = repo_id_of(text)
        query = repo_id.split("/", 1)[1] if repo_id else text.strip()
        author = repo_id.split("/", 1)[0] if repo_id else "mlx-community"
        self._say(f"Searching Hugging Face for {text.strip() or 'models'}…")
        self._bridge.run_in_background(
            lambda: search_models(query, author=author, limit=20),
            lambda found: self._hub_found(generation, found, repo_id),
            lambda error: self._hub_failed(generation, error),
        )

    def show_repo(self, repo_id: str) -> None:
        """A dropped huggingface.co link, or a typed org/name."""
        self.search_hub(repo_id)

    # -- actions --------------------------------------------------------------------------

    def use_selected(self) -> None:
        folder, data = self._selected_folder(), self._selected()
        if folder is not None and data is not None:
            self.model_chosen.emit(folder, data.name)

    def download_selected(self) -> None:
        data = self._selected()
        if data and data.kind == "hub":
            self.download(data.name)

    def download(self, repo_id: str) -> None:
        if self.downloading:
            return
        self.downloading = repo_id
        self._cancel = threading.Event()
        cancel = self._cancel
        self._show_progress(True)
        self.progress.setValue(0)
        self.progress_text.setText(f"Downloading {repo_id}…")
        self._say("")
        self._update_buttons()

        def report(progress: DownloadProgress) -> None:
            self._bridge.run_on_main(lambda: self._progress(progress))

        self._bridge.run_in_background(
            lambda: download_model(repo_id, progress=report, cancel=cancel),
            lambda path: self._downloaded_ok(repo_id, path),
            lambda error: self._download_failed(repo_id, error),
        )

    def cancel_download(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
            self.progress_text.setText("Stopping…")

    # -- results ------------------------------------------------------------------------------

    def _local_listed(self, generation: int, entries: list[LibraryEntry]) -> None:
        if generation != self._local_generation:
            return  # a newer listing is on its way
        self._local = entries
        pending = not all(e.checked for e in entries)
        if pending:
            self._bridge.run_in_background(
                lambda: complete_library(entries),
                lambda done: self._local_listed(generation, done),
                lambda error: self._say(f"Cannot check the models on this Mac: {error}"),
            )
        if self.tabs.currentIndex() == LOCAL:
            self._render()
            usable = sum(e.usable for e in entries)
            self._say(
                f"{len(entries)} found; reading their headers…"
                if pending
                else f"{usable} model{'s' * (usable != 1)} MLX can run, of {len(entries)} found."
                if entries
                else "No models found on this Mac yet: search Hugging Face, or add a folder."
            )

    def _hub_found(self, generation: int, found: list[HubModel], repo_id: str | None) -> None:
        if generation != self._generation:
            return
        self._hub = found
        if repo_id and not any(m.repo_id == repo_id for m in found):
            self._say_hub(f"{repo_id} was not found among Hugging Face's models.")
        else:
            self._say_hub(f"{len(found)} model{'s' * (len(found) != 1)} on Hugging Face.")
        self._render()
        for model in found:
            if model.repo_id not in self._hub_info:
                self._bridge.run_in_background(
                    functools.partial(header_copy, model.repo_id),
                    self._headers_read,
                    functools.partial(self._headers_failed, model.repo_id),
                )

    def _hub_failed(self, generation: int, error: BaseException) -> None:
        if generation == self._generation:
            self._hub = []
            self._render()
            self._say_hub(
                str(error) if isinstance(error, ModelError) else f"Search failed: {error}"
            )

    def _headers_read(self, copy: tuple[str, Path, int]) -> None:
        try:
            self._hub_info[copy[0]] = read_header_copy(*copy)
        except ModelError as error:
            self._hub_info[copy[0]] = str(error)
        self._render()

    def _headers_failed(self, repo_id: str, error: BaseException) -> None:
        self._hub_info[repo_id] = str(error)
        self._render()

    def _progress(self, progress: DownloadProgress) -> None:
        if self.downloading is None:
            return
        self.progress.setValue(int(progress.fraction * 1000))
        parts = [
            f"{progress.fraction:.0%}",
            f"{size(progress.bytes_done)} of {size(progress.bytes_total)}",
        ]
        if progress.rate:
            parts.append(bytes_per_s(progress.rate))
        if progress.eta_s is not None and progress.bytes_done < progress.bytes_total:
            parts.append(f"about {duration(progress.eta_s)} left")
        self.progress_text.setText(f"{self.downloading}: " + " · ".join(parts))
        if progress.note:
            self._say(progress.note)

    def _downloaded_ok(self, repo_id: str, path: Path) -> None:
        self._downloaded[repo_id] = path
        self._finish_download(f"{repo_id} is on this Mac: select it and press Use.")
        self.refresh_local()

    def _download_failed(self, repo_id: str, error: BaseException) -> None:
        if isinstance(error, DownloadCancelled | ModelError):
            message = str(error)
        else:
            message = f"Download of {repo_id} failed: {type(error).__name__}: {error}"
        self._finish_download(message)

    def _finish_download(self, message: str) -> None:
        self.downloading = None
        self._cancel = None
        self._show_progress(False)
        self._say(message)
        self._render()

    # -- drawing ----------------------------------------------------------------------------

    def _tab_changed(self, index: int) -> None:
        hub = index == HUB
        self.search.setPlaceholderText(
            "Search Hugging Face (mlx-community), or type org/name, then Return"
            if hub
            else "Filter the models on this Mac"
        )
        self.add_button.setVisible(not hub)
        self.remove_button.setVisible(not hub)
        self.download_button.setVisible(hub)
        # What Hugging Face said belongs to its tab: this Mac's models go without it.
        self._say(self._hub_message if hub else "")
        if hub and offline():
            self._say(OFFLINE_MESSAGE)
        self._render()

    def _render(self) -> None:
        selected = self._selected()
        self.table.clear()
        rows = self._local_rows() if self.tabs.currentIndex() == LOCAL else self._hub_rows()
        for values, data, tooltip in rows:
            item = QTreeWidgetItem(list(values))
            item.setData(NAME, ROLE, data)
            for column in range(len(COLUMNS)):
                item.setToolTip(column, tooltip)
            item.setTextAlignment(SIZE, Qt.AlignmentFlag.AlignRight)
            self.table.addTopLevelItem(item)
            if selected and data.name == selected.name:
                item.setSelected(True)
        self._filter(self.search.text())
        self._update_buttons()

    def _local_rows(self) -> list[Row]:
        rows: list[Row] = []
        for entry in self._local:
            if entry.info is not None:
                badge, reason = self._badge(entry.info)
                arch, tip = entry.info.architecture, f"{entry.summary()}\n{reason}"
            elif not entry.checked and entry.usable:
                badge, arch, tip = "…", entry.architecture or "…", "Reading its headers…"
            else:
                badge = "not MLX" if entry.state is State.NOT_MLX else "broken"
                arch, tip = "–", f"{entry.name}: {entry.reason}"
            data = Choice("local", entry.name, entry.path, entry.usable)
            rows.append(((entry.name, size(entry.size_bytes), arch, badge), data, tip))
        return rows

    def _hub_rows(self) -> list[Row]:
        rows: list[Row] = []
        for model in self._hub:
            info = self._hub_info.get(model.repo_id)
            if isinstance(info, ModelInfo):
                badge, tip = self._badge(info)
                arch = info.architecture
            else:
                badge, arch = ("…", "…") if info is None else ("?", "–")
                tip = info or "Reading its safetensors headers…"
            shown = size(model.size_bytes) if model.size_bytes else "–"
            folder = self._downloaded.get(model.repo_id)
            data = Choice("hub", model.repo_id, folder, bool(folder))
            name = model.repo_id + (" · gated" if model.gated else "")
            rows.append(((name, shown, arch, badge), data, f"{model.downloads:,} downloads\n{tip}"))
        return rows

    def _badge(self, info: ModelInfo) -> tuple[str, str]:
        if not self._nodes:
            return NO_CLUSTER, "Add Macs (or try the demo cluster) to see what fits."
        from core.run.planning import chat_options, planner_node

        nodes = [planner_node(f) for f in self._nodes]
        badge, plan = fit(info, nodes, options=chat_options())
        return badge, plan.reason

    def _filter(self, text: str) -> None:
        if self.tabs.currentIndex() != LOCAL:
            return
        needle = text.strip().lower()
        for index in range(self.table.topLevelItemCount()):
            item = self.table.topLevelItem(index)
            if item is None:
                continue
            item.setHidden(bool(needle) and needle not in item.text(NAME).lower())

    def _search_pressed(self) -> None:
        text = self.search.text()
        if self.tabs.currentIndex() == HUB or (repo_id_of(text) and "/" in text):
            if self.tabs.currentIndex() == LOCAL and any(e.name == text for e in self._local):
                return
            self.search_hub(text)

    def _selected(self) -> Choice | None:
        items = self.table.selectedItems()
        data = items[0].data(NAME, ROLE) if items else None
        return data if isinstance(data, Choice) else None

    def _selected_folder(self) -> Path | None:
        data = self._selected()
        return data.folder if data and data.ok else None

    def _update_buttons(self) -> None:
        data = self._selected()
        self.use_button.setEnabled(self._selected_folder() is not None)
        self.download_button.setEnabled(
            bool(data and data.kind == "hub" and not data.ok) and not self.downloading
        )
        self.remove_button.setEnabled(self._added_by_hand(data) is not None)

    def _show_progress(self, shown: bool) -> None:
        for widget in self._progress_widgets:
            widget.setVisible(shown)

    def _say(self, text: str) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))
        if self.tabs.currentIndex() == HUB:
            self._hub_message = text

    def _say_hub(self, text: str) -> None:
        """A search's outcome: said on the Hugging Face tab (at once when it is shown)."""
        self._hub_message = text
        if self.tabs.currentIndex() == HUB:
            self._say(text)

    def _added_by_hand(self, data: Choice | None) -> str | None:
        """The library folder (as saved) a local row stands for, when one was added with
        "Add a folder…" (models in the Hugging Face or LM Studio caches are not)."""
        if data is None or data.kind != "local" or data.folder is None:
            return None
        return next((f for f in load_settings().library_folders if Path(f) == data.folder), None)

    def remove_selected(self) -> None:
        """Take the selected added folder out of the library; its files stay."""
        folder = self._added_by_hand(self._selected())
        if folder is None:
            return
        settings = load_settings()
        kept = tuple(f for f in settings.library_folders if f != folder)
        save_settings(settings.updated(library_folders=kept))
        self._say("")
        self.refresh_local()

    def _add_folder(self) -> None:
        folder = choose_folder(self, "Add a model folder to the library")
        if folder is not None:
            self.add_folder(folder)

    def add_folder(self, folder: Path) -> None:
        settings = load_settings()
        folders = (*settings.library_folders, str(folder))
        save_settings(settings.updated(library_folders=folders))
        self.refresh_local()
