"""The background lane's files (tests/suite_lanes.py) may run beside any other test file: each must own its lab
hosts' loopback addresses. A file that shares one with another test could meet it on a fixed port."""

from __future__ import annotations

import re
from pathlib import Path

import suite_lanes

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = re.compile(r"127\.0\.(\d{1,3})\.\d{1,3}")
#: Molecule's blocks (tests/molecule/conftest.py: 101 up, 10 per scenario) and the prepared images' builders
#: (molecule/_shared/lab_hosts.py: 230 up) - numbers, not literals, so they are checked as ranges.
MOLECULE, BUILDERS = range(101, 201), range(230, 255)
#: Where a lane file's addresses may also be written: the lane's own list, and the repository server's address.
ALLOWED = {"tests/suite_lanes.py"}


def _numbers(text: str) -> set[int]:
    return {int(n) for n in LOOPBACK.findall(text) if n != "0"}


def _sources() -> dict[str, str]:
    roots = [REPO / "tests", REPO / "molecule", REPO / "simulator" / "src"]
    return {str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for root in roots for p in root.rglob("*.py")}


def test_every_lane_file_exists_and_starts_hosts_on_loopbacks_of_its_own() -> None:
    sources = _sources()
    for name in suite_lanes.BACKGROUND_FILES:
        assert name in sources, f"{name} is in BACKGROUND_FILES but does not exist"
        mine = _numbers(sources[name])
        assert mine, f"{name} names no loopback address of its own: it cannot be shown to share none"
        assert not mine & set(MOLECULE), f"{name} uses Molecule's loopback blocks: {sorted(mine & set(MOLECULE))}"
        assert not mine & set(BUILDERS), f"{name} uses the image builders' loopbacks: {sorted(mine & set(BUILDERS))}"
        for other, text in sources.items():
            if other == name or other in ALLOWED:
                continue
            shared = mine & _numbers(text)
            assert not shared, f"{name} and {other} both use 127.0.N.1 for N in {sorted(shared)}"


def test_no_lane_file_starts_a_numbered_fleet() -> None:
    """A synthetic or inventory fleet numbers its hosts from 127.0.1.1 up, as the main thread's fleets do."""
    for name in suite_lanes.BACKGROUND_FILES:
        text = (REPO / name).read_text(encoding="utf-8")
        for call in ("synthetic_specs(", "fleet_up(", "specs_from_inventory("):
            assert call not in text, f"{name} calls {call}: its hosts would number from 127.0.1.1 like others'"
