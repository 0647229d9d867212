"""What the Fine-tune view's tests share: the view on the demo model and the 2-Mac demo
cluster, and chat-format data lines."""

from __future__ import annotations

import json

from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo
from core.run.demo import demo_nodes
from gui.bridge import Bridge
from gui.tune.view import FineTuneView


def open_tune_view(qtbot: QtBot, info: ModelInfo) -> FineTuneView:
    """The view, shown, with ``info`` as its base model and two demo Macs; shut down
    (every rank it started ended) when the test ends."""
    bridge = Bridge()
    widget = FineTuneView(bridge)

    def before_close(_widget: FineTuneView) -> None:
        widget.shutdown()
        bridge.close()

    qtbot.addWidget(widget, before_close_func=before_close)
    widget.resize(1200, 820)
    widget.show()
    widget.set_model(info)
    widget.set_nodes(demo_nodes(2))
    return widget


def chat_line(question: str, answer: str) -> str:
    """One example in mlx-lm's chat format."""
    return json.dumps(
        {
            "messages": [
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
            ]
        }
    )


def good_lines(count: int) -> list[str]:
    return [chat_line(f"What is {i} plus {i}?", f"{i} plus {i} is {2 * i}.") for i in range(count)]
