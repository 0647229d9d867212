"""``resources/icon.png`` → ``MacMesh.icns``, the app bundle's icon.

On a Mac it uses Apple's ``iconutil`` over an ``.iconset`` folder (every size
at 1x and 2x, resized by ``sips``); elsewhere Pillow writes the ``.icns``, so
the same spec builds on Linux (and CI checks it). Usage:
``python packaging/make_icns.py OUT.icns``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ICON_PNG = ROOT / "resources" / "icon.png"
SIZES = (16, 32, 128, 256, 512)


def with_iconutil(png: Path, out: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        iconset = Path(tmp) / "MacMesh.iconset"
        iconset.mkdir()
        for size in SIZES:
            for scale, suffix in ((1, ""), (2, "@2x")):
                target = iconset / f"icon_{size}x{size}{suffix}.png"
                pixels = str(size * scale)
                subprocess.run(
                    ["sips", "-z", pixels, pixels, str(png), "--out", str(target)],
                    check=True,
                    capture_output=True,
                )
        subprocess.run(["iconutil", "-c", "icns", str(iconset), "-o", str(out)], check=True)
    return out


def with_pillow(png: Path, out: Path) -> Path:
    from PIL import Image

    with Image.open(png) as image:
        image.convert("RGBA").save(out, format="ICNS")
    return out


def make_icns(out: Path, png: Path = ICON_PNG) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    if shutil.which("iconutil") and shutil.which("sips"):
        return with_iconutil(png, out)
    return with_pillow(png, out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python packaging/make_icns.py OUT.icns")
    print(make_icns(Path(sys.argv[1])))
