"""The Model pane: which model, how it is spread (strategy), and what each Mac must hold.

Reading a model folder imports mlx-lm (about a second) and preparing the demo model
converts a GGUF (a few seconds), so both run through the bridge; a result that arrives
after the person picked another folder is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QWidget

from core.model.info import ModelError, ModelInfo, read_model_info
from core.plan.estimate import Estimate
from core.plan.planner import Plan, make_plan
from core.run import demo
from core.run.planning import chat_options, planner_node
from core.worker.vocab import Strategy
from gui.bridge import Bridge
from gui.model.drop_zone import DropZone
from gui.model.library_view import LibraryView
from gui.model.memory_bars import MemoryBars
from gui.model.planning import estimate_all, plan_all
from gui.model.serving_choice import ServingChoice
from gui.model.source_choice import ModelSourceChooser
from gui.model.split_editor import SplitEditor
from gui.model.strategy import StrategyChooser
from gui.widgets import Card, label, section

if TYPE_CHECKING:
    from core.cluster.probe.facts import NodeFacts
    from core.cluster.registry import Node


def _named(info: ModelInfo, name: str | None) -> ModelInfo:
    return replace(info, name=name) if name else info


class ModelPane(Card):
    plan_changed = Signal(object, object)  # ModelInfo | None, Plan | None
    model_changed = Signal(str)  # a usable model's folder
    strategy_changed = Signal(str)

    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__("Model", parent)
        self._bridge = bridge
        self._generation = 0
        self._info: ModelInfo | None = None
        self._nodes: list[NodeFacts] = []  # the facts of the nodes planned on
        self._plans: dict[Strategy, Plan] | None = None
        self._split: tuple[int, ...] | None = None  # the pipeline split set by hand
        self.setAcceptDrops(True)
        self.drop_zone = DropZone()
        self.drop_zone.folder_chosen.connect(self.load)
        self.drop_zone.demo_requested.connect(self.use_demo_model)
        self.body.addWidget(self.drop_zone)
        self.body.addSpacing(4)
        self.body.addWidget(section("Library · on this Mac and on Hugging Face"))
        self.library = LibraryView(bridge)
        self.library.model_chosen.connect(lambda folder, name: self.load(folder, name=name))
        self.drop_zone.hub_link_dropped.connect(self.library.show_repo)
        self.body.addWidget(self.library, 1)
        self.source = ModelSourceChooser()
        self.body.addWidget(self.source)
        self.body.addSpacing(4)
        self.body.addWidget(section("Strategy"))
        self.chooser = StrategyChooser()
        self.chooser.strategy_changed.connect(self._strategy_changed)
        self.body.addWidget(self.chooser)
        self.serving = ServingChoice()
        self.serving.serving_changed.connect(lambda _serving: self._replan())
        self.body.addWidget(self.serving)
        self.plan_hint = label("", "hint", wrap=True)
        self.body.addWidget(self.plan_hint)
        self.body.addSpacing(4)
        self.body.addWidget(section("Memory per Mac · planned use of usable memory"))
        self.bars = MemoryBars()
        self.body.addWidget(self.bars)
        self.split_editor = SplitEditor()
        self.split_editor.edited.connect(self.try_split)
        self.split_editor.reset.connect(self.reset_split)
        self.body.addWidget(self.split_editor)
        self.chooser.select(Strategy.PIPELINE)
        self._replan()

    # -- inputs -----------------------------------------------------------------------

    def load(self, folder: Path, *, name: str | None = None) -> None:
        """Read ``folder`` in the background; show its facts or why it cannot be used.
        ``name``: the library's name for it (a cache snapshot's folder is a commit)."""
        folder = Path(folder)
        self._generation += 1
        generation = self._generation
        self.drop_zone.show_busy(f"Reading {folder.name or folder}…")
        self._bridge.run_in_background(
            lambda: _named(read_model_info(folder), name),
            lambda info: self._loaded(generation, info),
            lambda error: self._failed(generation, folder, error),
        )

    def use_demo_model(self) -> None:
        """The bundled SmolLM2-135M, converted once into the cache (a few seconds); the
        library lists it from then on."""
        self._generation += 1
        generation = self._generation
        preparing = demo.needs_preparing()
        self.drop_zone.show_busy(
            "Preparing the demo model (once, a few seconds)…"
            if preparing
            else "Reading the demo model…"
        )

        def loaded(info: ModelInfo) -> None:
            self._loaded(generation, info)
            if preparing:
                self.library.refresh_local()

        self._bridge.run_in_background(
            lambda: read_model_info(demo.demo_model()),
            loaded,
            lambda error: self._failed(generation, None, error),
        )

    def set_nodes(self, nodes: Sequence[Node]) -> None:
        """Plan on the nodes whose memory is known (a host not probed yet has none)."""
        nodes_now = [n.facts for n in nodes if n.facts is not None and n.facts.memory_bytes]
        if [f.name for f in nodes_now] != [f.name for f in self._nodes]:
            self._split = None  # another cluster: the planner's split again
        self._nodes = nodes_now
        self.library.set_nodes(self._nodes)
        self._replan()

    def select_strategy(self, choice: Strategy | str) -> None:
        self.chooser.select(choice)

    def set_locked(self, locked: bool) -> None:
        self.setAcceptDrops(not locked)
        self.drop_zone.set_locked(locked)
        self.chooser.set_locked(locked)
        self.library.set_locked(locked)
        self.source.set_locked(locked)
        self.serving.set_locked(locked)
        self.split_editor.set_locked(locked)

    def try_split(self, split: Sequence[int]) -> bool:
        """A pipeline split by hand (rank order): taken when the planner says it fits,
        else refused with the planner's reason (the Mac and the gigabytes missing)."""
        if self._info is None or not self._nodes or self._plans is None:
            return False
        plan = self._hand_plan(tuple(split))
        if not plan.fits:
            self.split_editor.refuse(plan.reason)
            return False
        self._split = tuple(split)
        self._plans[Strategy.PIPELINE] = plan
        self.split_editor.accepted()
        self.chooser.show_plans(self._plans, self._estimates())  # "by hand" in its reason
        self._show_selected()
        return True

    def reset_split(self) -> None:
        """Back to the planner's split."""
        self._split = None
        self.split_editor.accepted()
        self._replan()

    def _hand_plan(self, split: tuple[int, ...]) -> Plan:
        assert self._info is not None
        nodes = [planner_node(f) for f in self._nodes]
        options = chat_options(Strategy.PIPELINE, split, self.serving.selected())
        return make_plan(self._info, nodes, options=options)

    # -- state --------------------------------------------------------------------------

    @property
    def info(self) -> ModelInfo | None:
        return self._info

    def plan(self) -> Plan | None:
        return self._plans.get(self.chooser.selected()) if self._plans else None

    def plans(self) -> dict[Strategy, Plan] | None:
        return self._plans

    # -- results ----------------------------------------------------------------------------

    def _loaded(self, generation: int, info: ModelInfo) -> None:
        if generation != self._generation:
            return
        self._info = info
        self._split = None
        self.drop_zone.show_model(info)
        self.model_changed.emit(str(info.path))
        self._replan()

    def _failed(self, generation: int, folder: Path | None, error: BaseException) -> None:
        if generation != self._generation:
            return
        self._info = None
        if isinstance(error, ModelError) or folder is None:
            message = str(error)
        else:
            message = f"MacMesh could not read {folder}: {type(error).__name__}: {error}"
        title = "The demo model is not available" if folder is None else "Not a usable model"
        self.drop_zone.show_error(title, message)
        self._replan()

    def _strategy_changed(self, choice: str) -> None:
        self.strategy_changed.emit(choice)
        self._show_selected()

    def _replan(self) -> None:
        if self._info is not None and self._nodes:
            self._plans = plan_all(self._info, self._nodes, self.serving.selected())
            if self._split is not None:
                hand = self._hand_plan(self._split)
                if hand.fits:
                    self._plans[Strategy.PIPELINE] = hand
                else:
                    self._split = None
            self.plan_hint.hide()
        else:
            self._plans = None
            self.plan_hint.setText(
                "Choose a model to see what fits."
                if self._nodes
                else "Add Macs (or try the demo cluster) to see what fits where."
            )
            self.plan_hint.show()
        self.chooser.show_plans(self._plans, self._estimates())
        self._show_selected()

    def _estimates(self) -> dict[Strategy, Estimate] | None:
        """Each choice's speed estimate on the real Macs (None: nothing planned)."""
        if self._info is None or not self._plans:
            return None
        return estimate_all(self._info, self._nodes, self._plans)

    def _show_selected(self) -> None:
        plan = self.plan()
        if plan is not None and plan.ranks:
            self.bars.show_plan(plan)
        elif plan is not None:
            self.bars.show_plan(None, "No memory plan: this strategy cannot run here.")
        else:
            self.bars.show_plan(None, "Choose a model and Macs to see the memory each needs.")
        editable = plan is not None and plan.fits and plan.strategy == Strategy.PIPELINE
        if editable and plan is not None and len(plan.ranks) > 1:
            self.split_editor.show_plan(plan, by_hand=self._split is not None)
            self.split_editor.show()
        else:
            self.split_editor.hide()
        self.plan_changed.emit(self._info, plan)

    # -- drops anywhere on the pane ------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        self.drop_zone.dragEnterEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:
        self.drop_zone.dropEvent(event)
