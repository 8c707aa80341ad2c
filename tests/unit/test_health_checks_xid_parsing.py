"""Kernel-log XID parsing and matching to GPUs (plugins/module_utils/kernel_log.py), as tables: the journal's,
/dev/kmsg's and dmesg's line formats, the order the sources are tried in, and what a failed source says."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import kernel_log  # noqa: E402


@pytest.mark.parametrize(("text", "key"), [
    ("00000000:18:00.0", (0, 0x18, 0)),
    ("0000:18:00", (0, 0x18, 0)),
    ("18:00.0", (0, 0x18, 0)),
    ("00000001:DB:00.0", (1, 0xDB, 0)),
    ("0000:db:00", (0, 0xDB, 0)),
    ("not a bus id", None),
])
def test_bus_key(text: str, key: tuple[int, int, int] | None) -> None:
    assert kernel_log.bus_key(text) == key


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
    events = kernel_log.parse_journal(LOG, since)
    assert [(e["bus"], e["code"]) for e in events] == expected
    assert all(e["source"] == "kernel" for e in events)


def test_merge_kernel_xids_matches_by_bus_and_skips_lost_and_unknown() -> None:
    meas = {"gpus": [
        {"index": 0, "pci_bus_id": "00000000:18:00.0", "lost": False, "values": {"xid": []}, "errors": {}},
        {"index": 1, "pci_bus_id": "00000000:DB:00.0", "lost": True, "values": {}, "errors": {}},
        {"index": 2, "pci_bus_id": "00000000:3A:00.0", "lost": False, "values": {}, "errors": {"xid": "boom"}},
    ]}
    kernel_log.merge_kernel_xids(meas, kernel_log.parse_journal(LOG + LOG.replace("18:00", "99:00"), 0))
    assert [e["code"] for e in meas["gpus"][0]["values"]["xid"]] == [79]
    assert meas["gpus"][0]["values"]["xid"][0] == {"code": 79, "time": 1763769000.1, "source": "kernel",
                                                   "text": "pid='<unknown>', GPU has fallen off the bus."}
    assert "xid" not in meas["gpus"][1]["values"]
    # NVML's event wait failed on GPU 2: what the kernel log read for it is kept (issue 27), not dropped
    assert [e["code"] for e in meas["gpus"][2]["values"]["xid"]] == [13, 13]  # LOG is given twice


BOOT = 1763700000.0
#: /dev/kmsg records as the kernel gives them (Documentation/ABI/testing/dev-kmsg: priority,seq,usec,flags;text),
#: with a continuation line (SUBSYSTEM=...) that is not a record
KMSG = """4,1201,69000100000,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', GPU has fallen off the bus.
 SUBSYSTEM=pci
6,1202,69500200000,-;nvidia-nvswitch0: something else
4,1203,69700400000,c;NVRM: Xid (PCI:0000:3a:00.0): 13, pid=11, Graphics Exception
"""
#: dmesg's default output ([seconds since boot] text); a line without a time is left out
DMESG = """[69000.100000] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', GPU has fallen off the bus.
[69700.400000] NVRM: Xid (PCI:0000:3a:00.0): 13, pid=11, Graphics Exception
NVRM: Xid (PCI:0000:db:00): 48, pid=4242, DBE
"""


@pytest.mark.parametrize(("lines", "since", "expected"), [
    (kernel_log.kmsg_lines(KMSG, BOOT), 0, [(79, BOOT + 69000.1), (13, BOOT + 69700.4)]),
    (kernel_log.kmsg_lines(KMSG, BOOT), BOOT + 69500, [(13, BOOT + 69700.4)]),
    (kernel_log.dmesg_lines(DMESG, BOOT), 0, [(79, BOOT + 69000.1), (13, BOOT + 69700.4)]),
    (kernel_log.dmesg_lines(DMESG, BOOT), BOOT + 69701, []),
], ids=["kmsg-all", "kmsg-window", "dmesg-all", "dmesg-window"])
def test_ring_buffer_lines_are_placed_in_wall_time(lines: list, since: float, expected: list) -> None:
    events = kernel_log.xids_in(lines, since, "kernel")
    assert [(e["code"], pytest.approx(e["time"])) for e in events] == expected


def _runner(answers: dict[str, tuple[int, str, str]]) -> Any:
    """A command runner that answers by the command's basename and the first argument that is not the binary."""
    def run(argv: list[str]) -> tuple[int, str, str]:
        key = " ".join([Path(argv[0]).name, *argv[1:3]])
        return answers.get(key, (127, "", f"{key}: not answered"))
    return run


def _which(names: set[str]) -> Any:
    return lambda name: f"/usr/bin/{name}" if name in names else None


def test_a_journal_without_kernel_messages_is_passed_over_for_kmsg(tmp_path: Path) -> None:
    """journald in a container answers an empty kernel log with success: that is not "no XID" (a false green)."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(KMSG.replace("69000100000", "1"), encoding="utf-8")
    run = _runner({"journalctl -k -b": (0, "", "")})
    events, source = kernel_log.kernel_xids(run, _which({"journalctl", "dmesg"}), 10**10, list(kernel_log.SOURCES),
                                            kmsg_path=str(kmsg))
    assert (source["read_from"], source["error"]) == ("kmsg", None)
    assert source["tried"] == {"journal": "the journal holds no kernel message of this boot (journald does not "
                                          "read the kernel log here)"}
    assert [e["code"] for e in events] == [79, 13]


def test_no_readable_source_names_each_reason(tmp_path: Path) -> None:
    run = _runner({"dmesg": (1, "", "dmesg: read kernel buffer failed: Operation not permitted")})
    events, source = kernel_log.kernel_xids(run, _which({"dmesg"}), 7200, list(kernel_log.SOURCES),
                                            kmsg_path=str(tmp_path / "absent"))
    assert events == []
    assert source["read_from"] is None
    assert source["error"] == ("journal: journalctl not found; kmsg: " + str(tmp_path / "absent") + ": No such file "
                               "or directory; dmesg: dmesg failed (rc 1): dmesg: read kernel buffer failed: "
                               "Operation not permitted")


def test_the_journal_is_read_first_when_it_holds_the_kernel_log() -> None:
    now = int(time.time())
    log = f"{now - 5}.000001 node7 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=1, DBE\n"
    run = _runner({"journalctl -k -b": (0, "Nov 28 node7 kernel: Linux version 6.1\n", ""),
                   "journalctl -k -q": (0, log, "")})
    events, source = kernel_log.kernel_xids(run, _which({"journalctl"}), 7200, list(kernel_log.SOURCES),
                                            kmsg_path="/nonexistent")
    assert (source["read_from"], source["tried"]) == ("journal", {})
    assert [(e["code"], e["bus"]) for e in events] == [(48, (0, 0x18, 0))]
