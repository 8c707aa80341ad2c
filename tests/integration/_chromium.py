"""Headless Chromium (Debian's ``chromium``, installed by scripts/bootstrap.sh) for tests that open an HTML page.

Run as root with a fresh profile and everything that talks to the network off; the page is a local file.
:func:`dump_dom` returns the DOM Chromium built (``--dump-dom``), parsed into elements with their attributes and
text; :func:`screenshot` writes a PNG; :func:`png_pixels` reads one back (plain zlib, no imaging library).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def chromium() -> str:
    """The chromium binary; a missing one is a failure of the environment (bootstrap installs it), never a skip."""
    found = shutil.which("chromium")
    assert found, "chromium is not installed; run scripts/bootstrap.sh (it installs Debian's chromium)"
    return found


def _run(page: Path, *args: str, timeout: int = 120) -> str:
    with tempfile.TemporaryDirectory(prefix="gpufleet-chromium-") as profile:
        proc = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
                              capture_output=True, text=True, check=False, timeout=timeout)
    assert proc.returncode == 0, f"chromium failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
    return proc.stdout


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""
    children: list[Element] = field(default_factory=list)

    def iter(self, tag: str | None = None, **attrs: str) -> list[Element]:
        """This element and its descendants with ``tag`` whose attributes (``data_level`` for ``data-level``) match."""
        want = {k.replace("_", "-"): v for k, v in attrs.items()}
        found = []
        if (tag is None or self.tag == tag) and all(self.attrs.get(k) == v for k, v in want.items()):
            found.append(self)
        for child in self.children:
            found.extend(child.iter(tag, **attrs))
        return found

    def has_class(self, name: str) -> bool:
        return name in self.attrs.get("class", "").split()

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)


class _Tree(HTMLParser):
    VOID = frozenset({"meta", "link", "br", "img", "input", "hr", "col", "area", "base", "source", "wbr"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in self.VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].text += data


def dump_dom(page: Path) -> Element:
    """The DOM Chromium built for ``page`` (serialised with ``--dump-dom``), as an element tree."""
    tree = _Tree()
    tree.feed(_run(page, "--dump-dom"))
    return tree.root


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 1800) -> Path:
    """Chromium's screenshot of ``page`` at ``width`` x ``height`` CSS pixels, written to ``png``."""
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)
    _run(page, f"--screenshot={png.resolve()}", f"--window-size={width},{height}", "--hide-scrollbars")
    assert png.is_file(), f"chromium wrote no screenshot to {png}"
    return png


def png_pixels(png: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """``(width, height, RGB pixels row by row)`` of an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes)."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _c, _f, interlace = struct.unpack(">IIBBBBB", header)
    assert (depth, colour in (2, 6), interlace) == (8, True, 0), f"unexpected PNG format in {png}"
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytearray] = []
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = prev[x]
            corner = prev[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(line)
        prev = line
    pixels = [(r[x], r[x + 1], r[x + 2]) for r in rows for x in range(0, stride, channels)]
    return width, height, pixels
