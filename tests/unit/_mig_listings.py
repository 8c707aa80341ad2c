"""Read real ``nvidia-smi mig -lgip`` tables and ``-lgipp`` lines (tests/data/ground-truth), for the tests that
hold the simulator's and the catalogue's MIG tables to them.

Strict on purpose: a line that is none of the shapes below raises :class:`ListingFormatError` naming the file and
line, so a listing of a new layout fails the test instead of being read as fewer rows. The one allowance is for
excerpts (``_partial`` files, cut by a search index): a last row without its second line is dropped, and reported
in :attr:`Listing.cut_rows`.

Shapes, as NVIDIA's nvidia-smi prints them (535 to 580):

    # source: ... / # driver: ... / # context: ...            provenance lines the copies start with
    +-----...-----+                                           border
    | GPU instance profiles:          |                       title
    | GPU   Name   ID   Instances   Memory   P2P   SM   DEC   ENC  |
    |              Free/Total   GiB          CE   JPEG  OFA  |     column heads
    |=====...=====|                                           head rule
    |   0  MIG 1g.5gb   19   7/7   4.75   No   14   0   0   |  row, first line: GPU, name, id, free/total, GiB,
    |                               1   0   0   |              P2P, SM, DEC, ENC; second line: CE, JPEG, OFA
    GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1          -lgipp (``Placement :`` when there is one)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

_BORDER = re.compile(r"^\+-+\+$")
_TITLE = re.compile(r"^\|\s*GPU instance profiles:\s*\|$")
_HEAD1 = re.compile(r"^\|\s*GPU\s+Name\s+ID\s+Instances\s+Memory\s+P2P\s+SM\s+DEC\s+ENC\s*\|$")
_HEAD2 = re.compile(r"^\|\s*Free/Total\s+GiB\s+CE\s+JPEG\s+OFA\s*\|$")
_RULE = re.compile(r"^\|=+\|$")
_ROW1 = re.compile(r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
                   r"(?P<gib>\d+\.\d\d)\s+(?P<p2p>Yes|No)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s*\|$")
_ROW2 = re.compile(r"^\|\s*(?P<ce>\d+)\s+(?P<jpeg>\d+)\s+(?P<ofa>\d+)\s*\|$")
_PLACEMENT = re.compile(r"^GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:\s*"
                        r"\{(?P<starts>\d+(?:,\d+)*)\}:(?P<size>\d+)$")
_META = re.compile(r"^#\s*(?P<key>source|driver|context):\s*(?P<value>.*)$")


class ListingFormatError(ValueError):
    """A line of a listing that the parser does not know."""


@dataclass(frozen=True)
class LgipRow:
    """One GPU-instance profile row of ``nvidia-smi mig -lgip`` (both of its lines)."""

    gpu: int
    name: str  # without the "MIG " prefix: 1g.5gb
    profile_id: int
    free: int
    total: int  # the instance count of the profile
    gib: Decimal  # as printed: two decimals of MiB / 1024
    p2p: bool
    sms: int
    decoders: int
    encoders: int
    copy_engines: int
    jpegs: int
    ofas: int


@dataclass
class Listing:
    """One ``-lgip`` listing (and the ``-lgipp`` lines of the same GPU, where there are any)."""

    path: Path
    driver: str  # "unknown" where the copy does not say
    source: str
    partial: bool
    rows: list[LgipRow] = field(default_factory=list)
    cut_rows: list[str] = field(default_factory=list)  # first lines of rows an excerpt cut short
    placements: dict[int, tuple[tuple[int, ...], int]] = field(default_factory=dict)  # profile id -> starts, size


def _meta(lines: list[str], path: Path) -> tuple[dict[str, str], list[tuple[int, str]]]:
    meta: dict[str, str] = {}
    body: list[tuple[int, str]] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if line.startswith("#"):
            match = _META.match(line)
            if not match:
                raise ListingFormatError(f"{path.name}:{number}: unknown comment line {line!r}")
            meta[match["key"]] = match["value"].strip()
            continue
        body.append((number, line))
    return meta, body


def _driver(meta: dict[str, str], default: str | None, path: Path) -> str:
    if "driver" in meta:
        return meta["driver"].split()[0]  # "580.105.06 (same host's -q in the same issue)" -> 580.105.06
    if default is None:
        raise ListingFormatError(f"{path.name}: no '# driver:' line and no driver given for it")
    return default


def parse_lgip(path: Path, driver: str | None = None) -> Listing:
    """The rows of an ``nvidia-smi mig -lgip`` listing; ``driver`` for a copy without a ``# driver:`` line."""
    meta, body = _meta(path.read_text(encoding="utf-8").splitlines(), path)
    partial = "_partial" in path.name
    listing = Listing(path=path, driver=_driver(meta, driver, path), source=meta.get("source", ""), partial=partial)
    pending: tuple[int, re.Match[str]] | None = None
    for number, line in body:
        row2 = _ROW2.match(line)
        if pending is not None:
            if not row2:
                raise ListingFormatError(f"{path.name}:{number}: expected the CE/JPEG/OFA line of the row at line "
                                         f"{pending[0]}, found {line!r}")
            first = pending[1]
            listing.rows.append(LgipRow(
                gpu=int(first["gpu"]), name=first["name"], profile_id=int(first["id"]), free=int(first["free"]),
                total=int(first["total"]), gib=Decimal(first["gib"]), p2p=first["p2p"] == "Yes", sms=int(first["sm"]),
                decoders=int(first["dec"]), encoders=int(first["enc"]), copy_engines=int(row2["ce"]),
                jpegs=int(row2["jpeg"]), ofas=int(row2["ofa"])))
            pending = None
            continue
        row1 = _ROW1.match(line)
        if row1:
            pending = (number, row1)
        elif row2:
            raise ListingFormatError(f"{path.name}:{number}: a CE/JPEG/OFA line without its row: {line!r}")
        elif not any(shape.match(line) for shape in (_BORDER, _TITLE, _HEAD1, _HEAD2, _RULE)):
            raise ListingFormatError(f"{path.name}:{number}: not a line of an nvidia-smi mig -lgip table: {line!r}")
    if pending is not None:
        if not partial:
            raise ListingFormatError(f"{path.name}:{pending[0]}: the last row has no CE/JPEG/OFA line, and the "
                                     "file is not an excerpt (_partial)")
        listing.cut_rows.append(pending[1].group(0))
    if not listing.rows:
        raise ListingFormatError(f"{path.name}: no GPU instance profile rows")
    return listing


def parse_lgipp(path: Path) -> dict[int, tuple[tuple[int, ...], int]]:
    """``nvidia-smi mig -lgipp``: profile id -> (placement starts, size). One GPU's lines only."""
    _meta_lines, body = _meta(path.read_text(encoding="utf-8").splitlines(), path)
    placements: dict[int, tuple[tuple[int, ...], int]] = {}
    gpus: set[int] = set()
    for number, line in body:
        match = _PLACEMENT.match(line)
        if not match:
            raise ListingFormatError(f"{path.name}:{number}: not a line of nvidia-smi mig -lgipp: {line!r}")
        gpus.add(int(match["gpu"]))
        profile_id = int(match["id"])
        if profile_id in placements:
            raise ListingFormatError(f"{path.name}:{number}: profile id {profile_id} listed twice")
        placements[profile_id] = (tuple(int(s) for s in match["starts"].split(",")), int(match["size"]))
    if len(gpus) != 1:
        raise ListingFormatError(f"{path.name}: expected the lines of one GPU, found GPUs {sorted(gpus)}")
    return placements


def load(lgip: Path, lgipp: Path | None = None, driver: str | None = None) -> Listing:
    """A listing with its placements (``lgipp``), which must be of the same GPU and name only listed ids."""
    listing = parse_lgip(lgip, driver)
    if lgipp is not None:
        listing.placements = parse_lgipp(lgipp)
        unknown = sorted(set(listing.placements) - {row.profile_id for row in listing.rows})
        if unknown:
            raise ListingFormatError(f"{lgipp.name}: placements of profile ids {unknown} that {lgip.name} lacks")
    return listing
