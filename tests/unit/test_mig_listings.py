"""The MIG tables of the simulator (its model files) and of the product (the catalogue in
``plugins/module_utils/mig_profiles.py``) against every real ``nvidia-smi mig -lgip`` / ``-lgipp`` listing the
project keeps (``tests/data/ground-truth``; provenance in the READMEs there).

Per row of each listing: the name, profile id and instance count (the "Total" of Free/Total), and the placements
of the same GPU's ``-lgipp`` where there is one, must be equal; on the simulator's side also SM, CE, DEC, ENC,
JPEG, OFA and P2P (the catalogue does not hold them). Memory: drivers print other sizes for the same profile
(H200 ``3g.71gb``: 69.50 GiB in mig-parted #120, 69.75 GiB on 580.159.04), so a table's size must print the
listing's GiB when the table cites a listing of the same driver (``memory_from``), and otherwise lie within the
spread the real listings of that profile show (:data:`SPREAD`); a listing of unknown driver counts as another
driver. A profile that only one listing shows has no spread: the table must print that listing's value.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "collections", REPO / "simulator" / "src", Path(__file__).resolve().parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from _mig_listings import LgipRow, Listing, ListingFormatError, load, parse_lgip, parse_lgipp  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_profiles as mp  # noqa: E402

from gpufleet_sim.models import load_model  # noqa: E402

GROUND_TRUTH = REPO / "tests" / "data" / "ground-truth"


@dataclass(frozen=True)
class Case:
    """A listing, the model it is of, and its ``-lgipp`` (same GPU) where the project has one."""

    lgip: str
    model: str
    lgipp: str | None = None
    driver: str | None = None  # for a copy without a "# driver:" line

    def load(self) -> Listing:
        return load(GROUND_TRUTH / self.lgip, GROUND_TRUTH / self.lgipp if self.lgipp else None, self.driver)


CASES = [
    Case("public/A100_PCIe_40GB__lgip__1.txt", "A100-PCIE-40GB"),
    Case("public/A30__lgip__1.txt", "A30-24GB"),
    Case("public/GB200__lgip_partial__1.txt", "GB200-186GB"),
    Case("public/GH200__lgip_partial__1.txt", "GH200-144GB"),  # 1g.18gb: the 144G HBM3e board (0x2348)
    Case("public/H100_NVL__lgip__1.txt", "H100-NVL-94GB"),
    Case("public/H100_SXM_80GB__lgip__1.txt", "H100-SXM5-80GB", "public/H100_SXM_80GB__lgipp__1.txt"),
    Case("public/H200_SXM__lgip_partial__1.txt", "H200-141GB"),
    Case("public/H200_SXM__lgip_partial__2.txt", "H200-141GB"),
    Case("public/RTX_PRO_6000_Blackwell__lgip_partial__1.txt", "RTX-PRO-6000-96GB"),
    # the copies of the real H200 carry no header; its README: driver 580.159.04
    Case("h200-sxm-passthrough-r580/nvidia-smi/mig_lgip.txt", "H200-141GB",
         "h200-sxm-passthrough-r580/nvidia-smi/mig_lgipp.txt", driver="580.159.04"),
]
LISTINGS = {case: case.load() for case in CASES}


def _spread() -> dict[tuple[str, str], Decimal]:
    """(model, profile) -> max - min of the GiB the real listings print for it: the tolerance for a table whose
    size is cited from another driver (or an unknown one). Derived from the data, not chosen."""
    seen: dict[tuple[str, str], list[Decimal]] = {}
    for case, listing in LISTINGS.items():
        for row in listing.rows:
            seen.setdefault((case.model, row.name), []).append(row.gib)
    return {key: max(values) - min(values) for key, values in seen.items()}


SPREAD = _spread()


@dataclass(frozen=True)
class TableRow:
    """One GI profile of a table, in the listing's terms."""

    profile_id: int
    instances: int
    memory_mib: int
    placements: tuple[tuple[int, ...], int]  # starts, size
    columns: dict[str, Any] | None  # sms, copy_engines, ... (the simulator's side only)


def simulator_table(model: str) -> tuple[dict[str, TableRow], str | None]:
    mig = load_model(model)["mig"]
    rows = {}
    for p in mig["gi_profiles"]:
        sizes = {size for _, size in p["placements"]}
        assert len(sizes) == 1, f"{model} {p['name']}: placements of several sizes {p['placements']}"
        columns = {key: p[key] for key in ("sms", "copy_engines", "decoders", "encoders", "jpegs", "ofas")}
        columns["p2p"] = bool(p["p2p"])
        rows[p["name"]] = TableRow(p["id"], p["instances"], p["memory_mib"],
                                   (tuple(start for start, _ in p["placements"]), sizes.pop()), columns)
    return rows, (mig.get("memory_from") or {}).get("driver")


def catalogue_table(model: str) -> tuple[dict[str, TableRow], str | None]:
    gpu = mp.find_model(model)
    assert gpu is not None, f"the catalogue has no row {model}"
    assert gpu.name == model, f"the catalogue finds {gpu.name} for {model}"
    rows = {p.name: TableRow(p.profile_id, p.instance_count, p.memory_mib, (p.starts, p.memory_slices), None)
            for p in gpu.gi_profiles}
    return rows, gpu.memory_from[1] if gpu.memory_from else None


SIDES: dict[str, Callable[[str], tuple[dict[str, TableRow], str | None]]] = {
    "simulator": simulator_table, "catalogue": catalogue_table}


def printed_gib(mib: int) -> Decimal:
    """What nvidia-smi prints for ``mib`` in the Memory GiB column (two decimals, as C's printf rounds)."""
    return Decimal(f"{mib / 1024:.2f}")


def disagreements(case: Case, listing: Listing, table: dict[str, TableRow], cited_driver: str | None) -> list[str]:
    same_driver = listing.driver != "unknown" and listing.driver == cited_driver
    problems = []
    for row in listing.rows:
        where = f"GPU {row.gpu} {row.name}"
        mine = table.get(row.name)
        if mine is None:
            problems.append(f"{where}: not in the table (it has {', '.join(sorted(table))})")
            continue
        if (mine.profile_id, mine.instances) != (row.profile_id, row.total):
            problems.append(f"{where}: id/count {mine.profile_id}/{mine.instances}, listed {row.profile_id}/"
                            f"{row.total}")
        if mine.columns is not None:
            listed = {"sms": row.sms, "copy_engines": row.copy_engines, "decoders": row.decoders,
                      "encoders": row.encoders, "jpegs": row.jpegs, "ofas": row.ofas, "p2p": row.p2p}
            wrong = {key: (mine.columns[key], want) for key, want in listed.items() if mine.columns[key] != want}
            if wrong:
                problems.append(f"{where}: (table, listed) {wrong}")
        if row.profile_id in listing.placements and mine.placements != listing.placements[row.profile_id]:
            problems.append(f"{where}: placements {mine.placements}, listed {listing.placements[row.profile_id]}")
        gib = printed_gib(mine.memory_mib)
        tolerance = Decimal(0) if same_driver else SPREAD[(case.model, row.name)]
        if abs(gib - row.gib) > tolerance:
            rule = "same driver" if same_driver else f"spread of the real listings {tolerance}"
            problems.append(f"{where}: {gib} GiB ({mine.memory_mib} MiB), listed {row.gib} GiB "
                            f"(driver {listing.driver}; table cites driver {cited_driver}; {rule})")
    return problems


@pytest.mark.parametrize("side", sorted(SIDES))
@pytest.mark.parametrize("case", CASES, ids=[case.lgip for case in CASES])
def test_table_agrees_with_the_real_listing(case: Case, side: str) -> None:
    table, cited_driver = SIDES[side](case.model)
    assert table, f"{side}: {case.model} has no MIG table, but {case.lgip} lists one"
    assert disagreements(case, LISTINGS[case], table, cited_driver) == []


def test_every_listing_in_the_project_is_compared() -> None:
    on_disk = {str(path.relative_to(GROUND_TRUTH)) for pattern in ("*lgip.txt", "*lgipp.txt", "*__lgip*__*.txt")
               for path in GROUND_TRUTH.rglob(pattern)}
    compared = {name for case in CASES for name in (case.lgip, case.lgipp) if name}
    assert on_disk == compared


@pytest.mark.parametrize(("case", "rows", "cut"), [
    (CASES[2], 3, 1),  # GB200: the excerpt ends after the first line of 2g.47gb
    (CASES[6], 6, 0),
    (CASES[7], 5, 0),  # GPU 2's 3g/4g/7g, GPU 3's 1g.18gb and +me
    (CASES[9], 7, 0),
], ids=["GB200", "H200 #120 chunk 1", "H200 #120 chunk 2", "H200 580.159.04"])
def test_listings_read_row_by_row(case: Case, rows: int, cut: int) -> None:
    listing = LISTINGS[case]
    assert (len(listing.rows), len(listing.cut_rows)) == (rows, cut)


def test_a_row_read_from_the_real_h200() -> None:
    """Transcribed from h200-sxm-passthrough-r580/nvidia-smi/mig_lgip.txt and mig_lgipp.txt."""
    listing = LISTINGS[CASES[9]]
    assert listing.rows[-1] == LgipRow(gpu=0, name="7g.141gb", profile_id=0, free=1, total=1, gib=Decimal("140.00"),
                                       p2p=False, sms=132, decoders=7, encoders=0, copy_engines=8, jpegs=7, ofas=1)
    assert listing.placements == {19: ((0, 1, 2, 3, 4, 5, 6), 1), 20: ((0, 1, 2, 3, 4, 5, 6), 1),
                                  15: ((0, 2, 4, 6), 2), 14: ((0, 2, 4), 2), 9: ((0, 4), 4), 5: ((0,), 4),
                                  0: ((0,), 8)}
    assert listing.driver == "580.159.04"
    assert LISTINGS[CASES[8]].driver == "580.105.06"  # "# driver: 580.105.06 (same host's -q in the same issue)"


@pytest.mark.parametrize(("key", "spread"), [
    (("H200-141GB", "3g.71gb"), Decimal("0.25")),  # 69.50 (mig-parted #120) and 69.75 (580.159.04)
    (("H200-141GB", "7g.141gb"), Decimal("0.25")),  # 139.75 and 140.00
    (("H200-141GB", "1g.18gb"), Decimal("0")),  # 16.00 in all three
    (("H100-NVL-94GB", "7g.94gb"), Decimal("0")),  # one listing
])
def test_the_memory_tolerance_is_the_spread_of_the_listings(key: tuple[str, str], spread: Decimal) -> None:
    assert SPREAD[key] == spread


# ------------------------------------------------------------------------------- the parser refuses what it can't read
ROW = "|   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |"
ROW2 = "|                                                             1     0     0   |"


@pytest.mark.parametrize(("name", "text", "message"), [
    ("x__lgip__1.txt", f"# driver: 1\n{ROW}\n{ROW2}\n| GPU instance profiles (new layout):   |\n",
     "x__lgip__1.txt:4: not a line of an nvidia-smi mig -lgip table: '| GPU instance profiles (new layout):   |'"),
    ("x__lgip__1.txt", f"# driver: 1\n{ROW}\n", "x__lgip__1.txt:2: the last row has no CE/JPEG/OFA line, and the "
     "file is not an excerpt (_partial)"),
    ("x__lgip__1.txt", f"# driver: 1\n{ROW}\n{ROW}\n", "x__lgip__1.txt:3: expected the CE/JPEG/OFA line of the row "
     f"at line 2, found {ROW!r}"),
    ("x__lgip__1.txt", f"# driver: 1\n{ROW2}\n", f"x__lgip__1.txt:2: a CE/JPEG/OFA line without its row: {ROW2!r}"),
    ("x__lgip__1.txt", f"{ROW}\n{ROW2}\n", "x__lgip__1.txt: no '# driver:' line and no driver given for it"),
    ("x__lgip__1.txt", "# driver: 1\n# by hand\n", "x__lgip__1.txt:2: unknown comment line '# by hand'"),
    ("x__lgip_partial__1.txt", "# driver: 1\n+---+\n", "x__lgip_partial__1.txt: no GPU instance profile rows"),
    ("x__lgip__1.txt", f"# driver: 1\n{ROW.replace('No', 'N/A')}\n{ROW2}\n", "x__lgip__1.txt:2: not a line of an "
     f"nvidia-smi mig -lgip table: {ROW.replace('No', 'N/A')!r}"),
])
def test_lgip_parser_refuses_an_unknown_shape(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ListingFormatError) as err:
        parse_lgip(path)
    assert str(err.value) == message


@pytest.mark.parametrize(("text", "message"), [
    ("GPU  0 Profile ID 19 Placements: {0,1}:1\nGPU  0 Profile ID 19 Placements: {0}:1\n",
     "p.txt:2: profile id 19 listed twice"),
    ("GPU  0 Profile ID 19 Placements: {0,1}:1\nGPU  1 Profile ID 20 Placements: {0}:1\n",
     "p.txt: expected the lines of one GPU, found GPUs [0, 1]"),
    ("GPU  0 Profile ID 19 Placements: 0,1:1\n", "p.txt:1: not a line of nvidia-smi mig -lgipp: "
     "'GPU  0 Profile ID 19 Placements: 0,1:1'"),
])
def test_lgipp_parser_refuses_an_unknown_shape(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ListingFormatError) as err:
        parse_lgipp(path)
    assert str(err.value) == message


def test_placements_of_an_unlisted_profile_are_refused(tmp_path: Path) -> None:
    (tmp_path / "l.txt").write_text(f"# driver: 1\n{ROW}\n{ROW2}\n", encoding="utf-8")
    (tmp_path / "p.txt").write_text("GPU  0 Profile ID 9 Placements: {0,4}:4\n", encoding="utf-8")
    with pytest.raises(ListingFormatError) as err:
        load(tmp_path / "l.txt", tmp_path / "p.txt")
    assert str(err.value) == "p.txt: placements of profile ids [9] that l.txt lacks"
