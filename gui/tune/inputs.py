"""The Fine-tune view's left column: what to train (the base model, the Macs, the data)
and how (the settings). It holds those inputs and says what is missing; the view starts
the fine-tune from them.

The base model and the Macs come from the window (the Model and Cluster panes); the
data is read here by ``core.tune.data.read_data`` off the GUI thread (a read that
arrives after another choice is dropped).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLineEdit, QScrollArea, QSpinBox, QVBoxLayout, QWidget

from core import units
from gui.bridge import Bridge
from gui.task_runner import one_line
from gui.tune.data_box import DataBox
from gui.tune.settings_form import SettingsForm
from gui.widgets import label, section

if TYPE_CHECKING:
    from core.cluster.probe.facts import NodeFacts
    from core.cluster.registry import Node
    from core.model.info import ModelInfo
    from core.tune.data import TrainingData

LEFT_WIDTH = 440
VALID_SHARE = 0.1  # FineTune's split when the data has no validation file


def usable_bytes(facts: NodeFacts) -> int:
    """What a node can give the GPU, as the planner counts it."""
    from core.plan.memory import PlanOptions, node_budget
    from core.run.planning import planner_node

    return node_budget(planner_node(facts), PlanOptions()).usable_bytes


class TuneInputs(QScrollArea):
    changed = Signal()  # the model, the Macs, the data or a setting changed
    data_read = Signal(object)  # the TrainingData shown, or None when refused
    demo_chosen = Signal(str)  # the demo set was chosen: the question it teaches

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self.info: ModelInfo | None = None
        self.data: TrainingData | None = None  # once read
        self.data_path: Path | None = None
        self.facts: dict[str, NodeFacts] = {}
        self.usable: dict[str, int] = {}  # each Mac's usable memory, for the bars
        self.locked = False
        self._generation = 0
        self.form = SettingsForm()
        self.form.changed.connect(self._settings_edited)
        self.data_box = DataBox()
        self.data_box.path_chosen.connect(self.load_data)
        self.data_box.demo_requested.connect(self.use_demo_data)
        column = QWidget()
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 8, 0)
        layout.setSpacing(8)
        layout.addWidget(section("Base model"))
        self.model_name = label("", "model-name", wrap=True)
        self.model_hint = label("", "hint", wrap=True)
        layout.addWidget(self.model_name)
        layout.addWidget(self.model_hint)
        layout.addSpacing(4)
        layout.addWidget(section("Data"))
        layout.addWidget(self.data_box)
        self.name_input = QLineEdit()
        self.name_input.setPlaceholderText("Adapter name (optional)")
        self.name_input.setToolTip("The adapter's name; one is made from the model and data")
        layout.addWidget(self.name_input)
        layout.addSpacing(4)
        layout.addWidget(section("Settings"))
        layout.addWidget(self.form)
        layout.addStretch(1)
        self.setWidget(column)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setMinimumWidth(LEFT_WIDTH)
        self.set_model(None)

    # -- from the window ------------------------------------------------------------------

    def set_model(self, info: ModelInfo | None) -> None:
        """The base model: the one selected in the Model pane."""
        if self.locked:
            return  # the running fine-tune keeps its model (the Model pane is locked)
        self.info = info
        if info is None:
            self.model_name.setText("No model chosen")
            self.model_hint.setText("Choose one in the Model pane (or use the demo model).")
        else:
            self.model_name.setText(info.name)
            self.model_hint.setText(
                f"{info.architecture} · {info.layers} layers · "
                f"{units.size(info.bytes_on_disk)}: every Mac holds all of it, and "
                "trains on its share of each batch."
            )
        self.changed.emit()

    def set_nodes(self, nodes: Sequence[Node]) -> None:
        """The cluster's nodes (``core.cluster.registry.Node``): those whose memory is
        known train together."""
        if self.locked:
            return
        known = [n.facts for n in nodes if n.facts is not None]
        self.facts = {facts.name: facts for facts in known if facts.memory_bytes}
        self.usable = {name: usable_bytes(f) for name, f in self.facts.items()}
        self.changed.emit()

    # -- the data ---------------------------------------------------------------------------

    def load_data(self, path: Path) -> None:
        """Read ``path`` (off the GUI thread): its summary, or its problems, shown."""
        path = Path(path)
        self._generation += 1
        generation = self._generation
        self.data, self.data_path = None, None
        self.data_box.show_busy(path)
        self.changed.emit()

        def read() -> TrainingData:
            from core.tune.data import read_data

            return read_data(path)

        self._bridge.run_in_background(
            read,
            lambda data: self._data_read(generation, path, data),
            lambda error: self._data_refused(generation, path, error),
        )

    def use_demo_data(self) -> None:
        """The shipped demo set, with the settings that teach it fastest."""
        try:
            from core.tune.data import DEMO_DATA, DEMO_QUESTION, DEMO_SETTINGS
        except ImportError as error:
            self.data_box.show_problems(Path("demo"), f"The demo set is not available: {error}")
            return
        self.form.set_settings(DEMO_SETTINGS)
        self.demo_chosen.emit(str(DEMO_QUESTION))
        self.load_data(DEMO_DATA)

    def fact(self) -> str | None:
        """The demo set's fact when the demo set is the data (marked in answers)."""
        try:
            from core.tune.data import DEMO_DATA, DEMO_FACT
        except ImportError:
            return None
        same = self.data_path is not None and Path(self.data_path) == Path(DEMO_DATA)
        return str(DEMO_FACT) if same else None

    def _data_read(self, generation: int, path: Path, data: TrainingData) -> None:
        if generation != self._generation:
            return
        self.data, self.data_path = data, path
        self.data_box.show_data(path, data.format, data.train, data.valid, self._split())
        self.data_read.emit(data)
        self.changed.emit()

    def _data_refused(self, generation: int, path: Path, error: BaseException) -> None:
        if generation != self._generation:
            return
        problems = tuple(str(p) for p in getattr(error, "problems", ()) or ())
        self.data_box.show_problems(path, one_line(error), problems)
        self.data_read.emit(None)
        self.changed.emit()

    def _split(self) -> tuple[int, int] | None:
        """(train, held out) when the data has no validation file, for this batch size."""
        if self.data is None or not self.data.needs_split:
            return None
        batch = self.form.inputs["batch_size"]
        size = batch.value() if isinstance(batch, QSpinBox) else 1
        train, held = self.data.split_sizes(VALID_SHARE, max(1, size))
        return int(train), int(held)

    def _settings_edited(self) -> None:
        if self.data is not None:
            self.data_box.show_split(self._split())
        self.changed.emit()

    # -- reading ------------------------------------------------------------------------------

    @property
    def node_names(self) -> list[str]:
        return list(self.facts)

    @property
    def adapter_name(self) -> str | None:
        return self.name_input.text().strip() or None

    def missing(self) -> str | None:
        """What must be chosen before Start, in words; None when nothing is missing."""
        if self.info is None:
            return "Choose a base model first (in the Model pane)."
        if not self.facts:
            return "Add Macs (or start the demo cluster) to train on."
        if self.data is None or self.data_path is None:
            return "Choose the training data first (or use the demo set)."
        return None

    def set_locked(self, locked: bool) -> None:
        self.locked = locked
        self.form.set_locked(locked)
        self.data_box.set_locked(locked)
        self.name_input.setEnabled(not locked)
