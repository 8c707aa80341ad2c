"""Kernel-log XID parsing and matching to GPUs (plugins/module_utils/nvml_health.py), as tables."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_health  # noqa: E402


@pytest.mark.parametrize(("text", "key"), [
    ("00000000:18:00.0", (0, 0x18, 0)),
    ("0000:18:00", (0, 0x18, 0)),
    ("18:00.0", (0, 0x18, 0)),
    ("00000001:DB:00.0", (1, 0xDB, 0)),
    ("0000:db:00", (0, 0xDB, 0)),
    ("not a bus id", None),
])
def test_bus_key(text: str, key: tuple[int, int, int] | None) -> None:
    assert nvml_health.bus_key(text) == key


LOG = """\
1763769000.100000 node7 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', GPU has fallen off the bus.
1763769500.200000 node7 kernel: NVRM: Xid (PCI:0000:db:00): 48, pid=4242, DBE
1763769600.300000 node7 kernel: NVRM: GPU at PCI:0000:18:00: GPU-5b3a6c1e-0000-0000-0000-000000000000
1763769700.400000 node7 kernel: NVRM: Xid (PCI:0000:3a:00.0): 13, pid=11, Graphics Exception
garbage line
"""

PARSE_CASES: list[tuple[str, float, list[tuple[Any, int]]]] = [
    ("all", 0, [((0, 0x18, 0), 79), ((0, 0xDB, 0), 48), ((0, 0x3A, 0), 13)]),
    ("window-drops-old", 1763769400, [((0, 0xDB, 0), 48), ((0, 0x3A, 0), 13)]),
    ("window-at-boundary", 1763769700.4, [((0, 0x3A, 0), 13)]),
    ("window-after-all", 1763769800, []),
]


@pytest.mark.parametrize(("since", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES])
def test_parse_kernel_xids(since: float, expected: list[tuple[Any, int]]) -> None:
    events = nvml_health.parse_kernel_xids(LOG, since)
    assert [(e["bus"], e["code"]) for e in events] == expected
    assert all(e["source"] == "kernel" for e in events)


def test_merge_kernel_xids_matches_by_bus_and_skips_lost_and_unknown() -> None:
    meas = {"gpus": [
        {"index": 0, "pci_bus_id": "00000000:18:00.0", "lost": False, "values": {"xid": []}, "errors": {}},
        {"index": 1, "pci_bus_id": "00000000:DB:00.0", "lost": True, "values": {}, "errors": {}},
        {"index": 2, "pci_bus_id": "00000000:3A:00.0", "lost": False, "values": {}, "errors": {"xid": "boom"}},
    ]}
    nvml_health.merge_kernel_xids(meas, nvml_health.parse_kernel_xids(LOG + LOG.replace("18:00", "99:00"), 0))
    assert [e["code"] for e in meas["gpus"][0]["values"]["xid"]] == [79]
    assert meas["gpus"][0]["values"]["xid"][0] == {"code": 79, "time": 1763769000.1, "source": "kernel",
                                                   "text": "pid='<unknown>', GPU has fallen off the bus."}
    assert "xid" not in meas["gpus"][1]["values"]
    assert "xid" not in meas["gpus"][2]["values"]
