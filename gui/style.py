"""The look: one light and one dark theme, following the system's colour scheme.

A theme is a handful of named colours (``Theme``); the palette, the style sheet
(``resources/style/app.qss``, ``$name`` placeholders) and the plots all come from it, so
the whole window changes together when macOS switches between light and dark.
Fusion is the base style on every platform: the same metrics everywhere, and style sheets
behave the same on macOS as in the screenshots taken on Linux.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from string import Template

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontDatabase, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

from gui.resources import resource_path

THEME_ENV = "MACMESH_THEME"  # "light" or "dark" overrides the system's choice
FONT_FAMILIES = ("SF Pro Text", ".AppleSystemUIFont", "Inter", "Segoe UI", "Cantarell")
MONO_FAMILIES = ("SF Mono", "Menlo", "JetBrains Mono", "DejaVu Sans Mono")
BASE_PX = 13


@dataclass(frozen=True)
class Theme:
    name: str
    window: str
    card: str
    card_alt: str  # table stripes, inputs on cards
    border: str
    text: str
    text2: str  # secondary text
    text3: str  # hints, disabled
    accent: str
    accent_hover: str
    accent_text: str
    success: str
    success_bg: str
    warning: str
    warning_bg: str
    danger: str
    danger_bg: str
    go: str  # the Start button
    stop: str  # the Stop button
    track: str  # empty part of bars
    selection: str
    series: tuple[str, ...]  # plot lines, in order

    def qcolor(self, name: str, alpha: int = 255) -> QColor:
        color = QColor(getattr(self, name))
        color.setAlpha(alpha)
        return color


_SERIES_LIGHT = (
    "#007AFF",
    "#34C759",
    "#FF9500",
    "#AF52DE",
    "#FF2D55",
    "#30B0C7",
    "#FFCC00",
    "#A2845E",
)
_SERIES_DARK = (
    "#0A84FF",
    "#30D158",
    "#FF9F0A",
    "#BF5AF2",
    "#FF375F",
    "#40C8E0",
    "#FFD60A",
    "#AC8E68",
)

LIGHT = Theme(
    name="light",
    window="#F2F2F5",
    card="#FFFFFF",
    card_alt="#F7F7F9",
    border="#DCDCE1",
    text="#1D1D1F",
    text2="#5E5E66",
    text3="#9A9AA2",
    accent="#0A6CFF",
    accent_hover="#0058D6",
    accent_text="#FFFFFF",
    success="#1E8E3E",
    success_bg="#E2F4E7",
    warning="#B35900",
    warning_bg="#FFF1DE",
    danger="#D1242F",
    danger_bg="#FDE8EA",
    go="#1E8E3E",
    stop="#D1242F",
    track="#E6E6EB",
    selection="#DCE9FF",
    series=_SERIES_LIGHT,
)
DARK = Theme(
    name="dark",
    window="#161618",
    card="#222225",
    card_alt="#2A2A2E",
    border="#38383D",
    text="#F2F2F5",
    text2="#A4A4AD",
    text3="#6E6E77",
    accent="#0A84FF",
    accent_hover="#409CFF",
    accent_text="#FFFFFF",
    success="#32D74B",
    success_bg="#18311F",
    warning="#FF9F0A",
    warning_bg="#3A2A12",
    danger="#FF6961",
    danger_bg="#3D1E1F",
    go="#248A3D",
    stop="#C9342E",
    track="#333338",
    selection="#1B3A66",
    series=_SERIES_DARK,
)


class ThemeNotifier(QObject):
    """Tells widgets that paint their own colours (plots, bars) that the theme changed."""

    changed = Signal(object)  # Theme


_current = LIGHT
_notifier: ThemeNotifier | None = None


def current() -> Theme:
    return _current


def notifier() -> ThemeNotifier:
    global _notifier
    if _notifier is None:
        _notifier = ThemeNotifier(QApplication.instance())
    return _notifier


def system_theme() -> Theme:
    """Dark when the override or the system says so, light otherwise (and when unknown)."""
    override = os.environ.get(THEME_ENV, "").strip().lower()
    if override in ("light", "dark"):
        return DARK if override == "dark" else LIGHT
    hints = QGuiApplication.styleHints()
    return DARK if hints.colorScheme() == Qt.ColorScheme.Dark else LIGHT


def install(app: QApplication, theme: Theme | None = None) -> Theme:
    """Fusion, fonts, palette and style sheet; follows the system's scheme from now on."""
    app.setStyle(QStyleFactory.create("Fusion"))
    app.setFont(ui_font())
    apply(app, theme or system_theme())
    if theme is None:
        app.styleHints().colorSchemeChanged.connect(lambda _scheme: apply(app, system_theme()))
    return _current


def apply(app: QApplication, theme: Theme) -> None:
    global _current
    _current = theme
    app.setPalette(palette(theme))
    app.setStyleSheet(style_sheet(theme))
    notifier().changed.emit(theme)


def palette(theme: Theme) -> QPalette:
    pal = QPalette()
    role = QPalette.ColorRole
    colors = {
        role.Window: theme.window,
        role.WindowText: theme.text,
        role.Base: theme.card,
        role.AlternateBase: theme.card_alt,
        role.Text: theme.text,
        role.Button: theme.card,
        role.ButtonText: theme.text,
        role.BrightText: theme.accent_text,
        role.Highlight: theme.accent,
        role.HighlightedText: theme.accent_text,
        role.ToolTipBase: theme.card,
        role.ToolTipText: theme.text,
        role.PlaceholderText: theme.text3,
        role.Link: theme.accent,
        role.Mid: theme.border,
        role.Midlight: theme.card_alt,
        role.Dark: theme.border,
        role.Shadow: theme.border,
        role.Light: theme.card,
    }
    for r, value in colors.items():
        pal.setColor(r, QColor(value))
    disabled = QPalette.ColorGroup.Disabled
    for r in (role.WindowText, role.Text, role.ButtonText):
        pal.setColor(disabled, r, QColor(theme.text3))
    return pal


def style_sheet(theme: Theme) -> str:
    template = Template(resource_path("style", "app.qss").read_text(encoding="utf-8"))
    values = {k: v for k, v in asdict(theme).items() if isinstance(v, str)}
    return template.substitute(values, base_px=BASE_PX, mono=mono_family())


def _first_family(candidates: tuple[str, ...]) -> str | None:
    available = set(QFontDatabase.families())
    return next((family for family in candidates if family in available), None)


def ui_font(px: int = BASE_PX, weight: QFont.Weight = QFont.Weight.Normal) -> QFont:
    """The system UI font on macOS, Inter (or the default) elsewhere, at ``px`` pixels."""
    font = QFont(QApplication.font())
    family = _first_family(FONT_FAMILIES)
    if family:
        font.setFamily(family)
    font.setPixelSize(px)
    font.setWeight(weight)
    return font


def number_font(px: int, weight: QFont.Weight = QFont.Weight.DemiBold) -> QFont:
    """Large figures: tabular digits, so a changing number does not jiggle."""
    font = ui_font(px, weight)
    if hasattr(QFont, "Tag"):  # Qt 6.7+
        font.setFeature(QFont.Tag("tnum"), 1)
    return font


def mono_family() -> str:
    return _first_family(MONO_FAMILIES) or "monospace"


def mono_font(px: int = 12) -> QFont:
    font = QFont(mono_family())
    font.setStyleHint(QFont.StyleHint.Monospace)
    font.setPixelSize(px)
    return font


def set_role(widget: QObject, role: str) -> None:
    """Tags a widget for the style sheet (``[role="..."]`` selectors) and re-polishes it."""
    widget.setProperty("role", role)
    style = widget.style() if hasattr(widget, "style") else None
    if style is not None:
        style.unpolish(widget)
        style.polish(widget)
