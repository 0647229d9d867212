"""The app's plain-file resources (docs/design.md, rule 7: loaded by path, no .qrc).

``python -m gui.resources`` re-renders ``resources/icon.png`` from ``resources/icon.svg``
(the PNG is what packaging and window managers without SVG support use).
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QGuiApplication, QIcon, QImage, QPainter

RESOURCES = Path(__file__).resolve().parent.parent / "resources"
ICON_SVG = RESOURCES / "icon.svg"
ICON_PNG = RESOURCES / "icon.png"
ICON_SIZES = (16, 32, 64, 128, 256, 512)


def resource_path(*parts: str) -> Path:
    """A file under resources/, whether run from the source tree or an app bundle."""
    bundle = getattr(sys, "_MEIPASS", None)  # PyInstaller puts resources next to the code
    root = Path(bundle) / "resources" if bundle else RESOURCES
    return root.joinpath(*parts)


def app_icon() -> QIcon:
    """The app icon: the SVG at every size (crisp on Retina), the PNG as a fallback."""
    icon = QIcon()
    svg, png = resource_path("icon.svg"), resource_path("icon.png")
    if svg.is_file():
        for size in ICON_SIZES:
            icon.addFile(str(svg), QSize(size, size))
    if png.is_file():
        icon.addFile(str(png))
    return icon


def render_png(svg: Path = ICON_SVG, png: Path = ICON_PNG, size: int = 1024) -> Path:
    """Render the SVG icon to a square PNG with a transparent background."""
    from PySide6.QtSvg import QSvgRenderer

    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    QSvgRenderer(str(svg)).render(painter)
    painter.end()
    if not image.save(str(png)):
        raise OSError(f"could not write {png}")
    return png


if __name__ == "__main__":
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    print(render_png())
