"""XIDs judged by NVIDIA's catalogue (plugins/module_utils/xid.py, xid_catalogue.py), as the issue's fault matrix.

Expected levels and actions are NVIDIA's immediate-action buckets of the Ampere+ catalogue mapped onto the ladder
none < restart_app < drain < reset_gpu < reboot < rma: RESTART_BM is a reboot, RESET_GPU a GPU reset, RESTART_APP
restarting the application, IGNORE nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_checks as hc  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import kernel_log, xid  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import xid_catalogue as cat  # noqa: E402

RLW_NONFATAL = "RLW_REMAP Nonfatal XC0 i0 Link 04 (0x004505c6 0x00000000 0x00000000 0x00000000)"
RLW_FATAL = "RLW_SRC_TRACK Fatal XC0 i0 Link 04 (0x004505c6 0x00000001 0x00000000 0x00000000)"

MATRIX: list[tuple[str, dict[str, Any], str, str, str | None]] = [
    ("79-fallen-off-the-bus", {"code": 79}, "CRITICAL", "reboot", None),
    ("94-contained-ecc", {"code": 94}, "WARNING", "restart_app", None),
    ("95-uncontained-ecc", {"code": 95}, "CRITICAL", "reset_gpu", None),
    ("119-gsp-rpc-timeout", {"code": 119}, "CRITICAL", "reset_gpu", None),
    ("48-dbe", {"code": 48}, "CRITICAL", "reset_gpu", None),
    ("45-preemptive-cleanup", {"code": 45}, "INFO", "none", None),
    ("13-graphics-exception", {"code": 13}, "WARNING", "restart_app", None),
    ("145-nonfatal", {"code": 145, "text": RLW_NONFATAL}, "INFO", "none", "RLW_REMAP Nonfatal"),
    ("145-fatal", {"code": 145, "text": RLW_FATAL}, "CRITICAL", "reset_gpu", "RLW_SRC_TRACK Fatal"),
    ("145-no-text", {"code": 145}, "WARNING", "drain", None),
    ("154-reboot", {"code": 154, "text": "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"},
     "CRITICAL", "reboot", "node reboot required"),
    ("154-reset", {"code": 154, "text": "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"},
     "CRITICAL", "reset_gpu", "gpu reset required"),
    ("unknown-code", {"code": 4242}, "WARNING", "none", None),
]


@pytest.mark.parametrize(("event", "level", "action", "subcode"), [c[1:] for c in MATRIX], ids=[c[0] for c in MATRIX])
def test_fault_matrix(event: dict[str, Any], level: str, action: str, subcode: str | None) -> None:
    got = xid.classify(event)
    assert (got["code"], got["level"], got["action"], got["subcode"]) == (event["code"], level, action, subcode)


def test_ten_thousand_xid_95_are_one_entry_with_a_count() -> None:
    events = [{"code": 95, "time": 1000.0 + i, "source": "kernel", "text": "pid=7, Uncontained"} for i in range(10000)]
    entries = xid.aggregate(events)
    assert len(entries) == 1
    assert {k: entries[0][k] for k in ("code", "count", "first", "last", "sources", "level", "action")} == {
        "code": 95, "count": 10000, "first": 1000.0, "last": 10999.0, "sources": ["kernel"], "level": "CRITICAL",
        "action": "reset_gpu"}


def test_two_subcodes_of_145_are_two_entries_most_severe_first() -> None:
    events = [{"code": 145, "text": RLW_NONFATAL}] * 3 + [{"code": 145, "text": RLW_FATAL}]
    entries = xid.aggregate(events)
    assert [(e["subcode"], e["count"], e["level"]) for e in entries] == [
        ("RLW_SRC_TRACK Fatal", 1, "CRITICAL"), ("RLW_REMAP Nonfatal", 3, "INFO")]


def _th(**over: Any) -> dict[str, Any]:
    return {"xid_critical": [], "xid_ignore": [], "xid_window_s": 7200, **over}


def _gpu(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"index": 0, "uuid": "GPU-0", "pci_bus_id": "00000000:18:00.0", "values": {"xid": events},
            "unsupported": [], "errors": {}}


def test_the_check_reports_the_worst_entry_with_its_action_and_counts() -> None:
    got = hc.check_xid(_gpu([{"code": 95}] * 10000 + [{"code": 94}]), _th())
    assert (got["status"], got["level"], got["action"], got["value"]) == ("fail", "CRITICAL", "reset_gpu", [94, 95])
    assert [(e["code"], e["count"]) for e in got["evidence"]] == [(95, 10000), (94, 1)]
    assert got["message"] == ("XID 95 (Uncontained ECC error) x10000: reset_gpu; XID 94 (Contained ECC error): "
                              "restart_app in the last 7200 s (NVIDIA's XID catalogue)")


def test_xid_critical_raises_a_code_and_xid_ignore_drops_one() -> None:
    got = hc.check_xid(_gpu([{"code": 13}, {"code": 94}]), _th(xid_critical=[13], xid_ignore=[94]))
    assert (got["status"], got["level"], got["action"], got["value"]) == ("fail", "CRITICAL", "reset_gpu", [13])


def test_info_only_is_ok_but_not_silent() -> None:
    got = hc.check_xid(_gpu([{"code": 45}]), _th())
    assert (got["status"], got["level"], got["value"]) == ("ok", "INFO", [45])


def test_catalogue_names_its_source_and_only_known_buckets() -> None:
    assert cat.SOURCE["url"].startswith("https://docs.nvidia.com/deploy/xid-errors/")
    assert cat.SOURCE["version"]
    special = {"WORKFLOW_NVLINK5_ERR", "XID_154_EVAL"}
    assert {row[2] for row in cat.CATALOGUE.values()} <= set(cat.BUCKETS) | special
    assert all(action in cat.ACTIONS for _level, action in cat.BUCKETS.values())


def test_kernel_line_of_an_nvlink5_xid_keeps_its_subcode() -> None:
    line = f"1763769000.5 node kernel: NVRM: Xid (PCI:0000:03:00): 145, {RLW_FATAL}\n"
    events = kernel_log.parse_journal(line, 0)
    assert [(e["code"], e["text"]) for e in events] == [(145, RLW_FATAL)]
    assert xid.classify(events[0])["level"] == "CRITICAL"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({"code": st.integers(min_value=0, max_value=300)},
                                      optional={"text": st.one_of(st.none(), st.text(max_size=40)),
                                                "time": st.floats(allow_nan=False, allow_infinity=False),
                                                "source": st.sampled_from(["kernel", "nvml"])}), max_size=30))
def test_aggregate_never_loses_or_invents_events(events: list[dict[str, Any]]) -> None:
    entries = xid.aggregate(events)
    assert sum(e["count"] for e in entries) == len(events)
    assert {e["code"] for e in entries} == {e["code"] for e in events}
    for entry in entries:
        assert entry["level"] in xid.LEVELS
        assert entry["action"] in cat.ACTIONS
