"""gpu_health's ``nvlink`` check (plugins/module_utils/health_nvlink.py) as a table of (GPU reading, verdict), and the
NVLink table (plugins/module_utils/nvlink_models.py) against the numbers NVIDIA publishes.

The expected link counts and speeds are written here from NVIDIA's published numbers (per-GPU bandwidth / 50 GB/s
per link; ``nvidia-smi nvlink -s`` transcripts), not read from the table under test. The simulator's model files are
cross-checked against the table through pynvml in tests/sim/test_nvlink_models_sim.py; the whole path on a
simulated host in tests/integration/test_gpu_health_faults.py.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

_HERE = Path(__file__).resolve().parent
for _path in (_HERE, _HERE.parents[1] / "collections"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_checks as hc  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_nvlink as hn  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvlink_models as nm  # noqa: E402
from test_health_checks import HEALTHY_GPU, th  # noqa: E402

H100 = ("0x233010DE", "NVIDIA H100 80GB HBM3")
H100_PCIE = ("0x233110DE", "NVIDIA H100 PCIe")
GH200 = ("0x234210DE", "NVIDIA GH200 480GB")
B200 = ("0x290110DE", "NVIDIA B200")
L40S = ("0x26B910DE", "NVIDIA L40S")
UNKNOWN_BOARD = ("0x999910DE", "NVIDIA Future GPU")


def gpu(board: tuple[str, str], links: Any, speeds: Any = "auto", *, unsupported: tuple[str, ...] = (),
        errors: dict[str, str] | None = None, by_name_only: bool = False) -> dict[str, Any]:
    """A GPU reading: ``links`` the NVLink states, ``speeds`` the per-link MB/s ("auto": the nominal one on up
    links, None on down ones; absent when the key is to be missing)."""
    doc = copy.deepcopy(HEALTHY_GPU)
    doc["pci_device_id"] = None if by_name_only else board[0]
    doc["values"]["name"] = board[1]
    doc["unsupported"] = list(unsupported)
    doc["errors"] = dict(errors or {})
    doc["values"].pop("nvlink", None)
    doc["values"].pop("nvlink_speed", None)
    if links is not None:
        doc["values"]["nvlink"] = links
    if speeds == "auto" and isinstance(links, list):
        nominal = {"0x233010DE": 26562, "0x233110DE": 26562, "0x234210DE": 26562, "0x290110DE": 53125}.get(board[0])
        speeds = [nominal if up else None for up in links]
    if speeds is not None and speeds != "auto":
        doc["values"]["nvlink_speed"] = speeds
    return doc


def down(links: int, *off: int) -> list[int]:
    return [0 if i in off else 1 for i in range(links)]


CASES = [
    # (id, reading, status, level, message)
    ("h100-all-up", gpu(H100, [1] * 18), "ok", "PASS", "18 of 18 NVLinks up at 26562 MB/s (NVLink 4)"),
    ("h100-by-name", gpu(H100, [1] * 18, by_name_only=True), "ok", "PASS",
     "18 of 18 NVLinks up at 26562 MB/s (NVLink 4)"),
    ("b200-all-up", gpu(B200, [1] * 18), "ok", "PASS", "18 of 18 NVLinks up at 53125 MB/s (NVLink 5)"),
    ("h100-link-3-down", gpu(H100, down(18, 3)), "fail", "CRITICAL",
     "NVLink 3 down (17/18 up): NCCL falls back to slower paths; drain and check the baseboard"),
    ("h100-two-down", gpu(H100, down(18, 0, 17)), "fail", "CRITICAL",
     "NVLinks 0, 17 down (16/18 up): NCCL falls back to slower paths; drain and check the baseboard"),
    ("h100-only-12-enumerated", gpu(H100, [1] * 12), "fail", "CRITICAL",
     "only 12 NVLinks reported (12/18 up): NCCL falls back to slower paths; drain and check the baseboard"),
    ("h100-slow-link", gpu(H100, [1] * 18, [26562] * 4 + [13281] + [26562] * 13), "warn", "WARNING",
     "NVLink 4 at 13281 MB/s, expected 26562 MB/s (H100-SXM5-80GB, NVLink 4): trained down, or a reduced NVLink "
     "bandwidth mode"),
    ("h100-down-and-slow", gpu(H100, down(18, 2), [26562, 26562, None, 13281] + [26562] * 14), "fail", "CRITICAL",
     "NVLink 2 down (17/18 up): NCCL falls back to slower paths; drain and check the baseboard; NVLink 3 at 13281 "
     "MB/s, expected 26562 MB/s (H100-SXM5-80GB, NVLink 4): trained down, or a reduced NVLink bandwidth mode"),
    ("h100-nvml-error", gpu(H100, None, None, errors={"nvlink": "nvmlDeviceGetNvLinkState failed: Unknown Error"}),
     "fail", "UNKNOWN", "could not read nvlink: nvmlDeviceGetNvLinkState failed: Unknown Error"),
    ("h100-not-read", gpu(H100, None, None), "fail", "UNKNOWN", "nvlink was not read; cannot check it"),
    ("h100-speed-error", gpu(H100, [1] * 18, None, errors={"nvlink_speed": "the speed of NVLink 0 could not be read"}),
     "fail", "UNKNOWN", "could not read the NVLink speeds: the speed of NVLink 0 could not be read"),
    ("h100-speed-not-read", gpu(H100, [1] * 18, None), "fail", "UNKNOWN",
     "the NVLink speeds were not read; cannot check them"),
    ("h100-speed-unsupported", gpu(H100, [1] * 18, None, unsupported=("nvlink_speed",)), "warn", "WARNING",
     "the driver does not report NVLink speeds (field 164), so they are not checked"),
    ("h100-link-down-speed-error", gpu(H100, down(18, 5), None, errors={"nvlink_speed": "boom"}), "fail",
     "CRITICAL", "NVLink 5 down (17/18 up): NCCL falls back to slower paths; drain and check the baseboard; "
     "could not read the NVLink speeds: boom"),
    ("h100-nvml-says-no-nvlink", gpu(H100, [], []), "fail", "CRITICAL",
     "NVML reports no NVLink on a H100-SXM5-80GB, which has 18: check the driver"),
    ("pcie-no-bridge", gpu(H100_PCIE, [0] * 12), "ok", "PASS",
     "no NVLink bridge connected: all 12 NVLinks of the H100-PCIE-80GB inactive; not applicable (if one is fitted, "
     "reseat it)"),
    ("pcie-bridge-all-up", gpu(H100_PCIE, [1] * 12), "ok", "PASS", "12 of 12 NVLinks up at 26562 MB/s (NVLink 4)"),
    ("pcie-partial-bridge", gpu(H100_PCIE, down(12, 8, 9, 10, 11)), "warn", "WARNING",
     "NVLinks 8, 9, 10, 11 down (8/12 up): a bridge missing or loose; the pair runs at part of its NVLink bandwidth"),
    ("gh200-alone", gpu(GH200, [0] * 18), "ok", "PASS",
     "no NVLink switch system connected: all 18 NVLinks of the GH200-96GB inactive; not applicable (if one is "
     "fitted, reseat it)"),
    ("l40s-no-nvlink", gpu(L40S, None, None, unsupported=("nvlink",)), "ok", "PASS",
     "the L40S has no NVLink; not applicable"),
    ("l40s-empty", gpu(L40S, [], []), "ok", "PASS", "the L40S has no NVLink; not applicable"),
    ("l40s-with-links", gpu(L40S, [1, 1], [1, 1]), "warn", "WARNING",
     "NVML reports 2 NVLinks on a L40S, which gpufleet's table says has none: check the table "
     "(plugins/module_utils/nvlink_models.py)"),
    ("unknown-board", gpu(UNKNOWN_BOARD, [1] * 18, [1] * 18), "warn", "WARNING",
     "NVIDIA Future GPU (PCI device id 0x999910DE) is not in gpufleet's NVLink table (18/18 links up), so its link "
     "count and speed cannot be checked; add the board to plugins/module_utils/nvlink_models.py"),
    ("unknown-board-partial", gpu(UNKNOWN_BOARD, [1, 0, 1], [1, None, 1]), "fail", "CRITICAL",
     "NVLink 1 down (2/3 up) on NVIDIA Future GPU (PCI device id 0x999910DE), a board gpufleet's NVLink table does "
     "not know: some links up and some down is never normal"),
]


@pytest.mark.parametrize(("reading", "status", "level", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_nvlink_verdict(reading: dict[str, Any], status: str, level: str, message: str) -> None:
    result = hn.check_nvlink(reading, th())
    assert (result["name"], result["status"], result["level"], result["message"]) == ("nvlink", status, level, message)
    assert result["gpu"] == {"index": 3, "uuid": HEALTHY_GPU["uuid"], "pci_bus_id": HEALTHY_GPU["pci_bus_id"]}
    assert result["action"] == ("drain" if level == "CRITICAL" else "none")


def test_bridges_expected_makes_a_missing_bridge_a_failure() -> None:
    missing = hn.check_nvlink(gpu(H100_PCIE, [0] * 12), th(nvlink_bridges_expected=True))
    assert (missing["status"], missing["level"], missing["message"]) == (
        "fail", "CRITICAL", "all 12 NVLinks of the H100-PCIE-80GB inactive, and NVLink bridges are expected "
        "(nvlink_bridges_expected): fit or reseat the bridge")
    partial = hn.check_nvlink(gpu(H100_PCIE, down(12, 0)), th(nvlink_bridges_expected=True))
    assert (partial["status"], partial["level"]) == ("fail", "CRITICAL")
    # GH200's links need an NVLink switch system, not a bridge: the option does not make a lone GH200 fail
    assert hn.check_nvlink(gpu(GH200, [0] * 18), th(nvlink_bridges_expected=True))["status"] == "ok"


def test_the_failing_value_names_the_links() -> None:
    result = hn.check_nvlink(gpu(H100, down(18, 3), [26562] * 3 + [None] + [26562] * 9 + [13281] + [26562] * 4),
                             th())
    assert result["value"] == {"links": 18, "up": 17, "down": [3], "slow": {13: 13281}}
    assert result["threshold"] == {"links": 18, "speed_mbps": 26562, "wiring": "switch", "model": "H100-SXM5-80GB"}


def test_check_gpu_runs_the_nvlink_check_once() -> None:
    checks = hc.check_gpu(gpu(H100, down(18, 7)), th(), None)
    assert [(c["name"], c["status"]) for c in checks if c["name"] == "nvlink"] == [("nvlink", "fail")]


# NVIDIA's numbers: bandwidth per GPU (bidirectional, GB/s) and NVLink generation, written from the product pages
# and transcripts docs/health.md cites; 50 GB/s per link for NVLink 3 and 4, 100 GB/s for NVLink 5.
PUBLISHED = {
    "A100-SXM4-40GB": (600, 3), "A100-SXM4-80GB": (600, 3), "A100-PCIE-40GB": (600, 3), "A100-PCIE-80GB": (600, 3),
    "A800-SXM4-80GB": (400, 3), "A800-PCIE-80GB": (400, 3), "A800-PCIE-40GB": (400, 3), "A30-24GB": (200, 3),
    "H100-SXM5-80GB": (900, 4), "H100-PCIE-80GB": (600, 4), "H100-NVL-94GB": (600, 4), "H800-80GB": (400, 4),
    "H800-PCIE-80GB": (400, 4), "H20-96GB": (900, 4), "H200-141GB": (900, 4), "H200-NVL-141GB": (900, 4),
    "GH200-96GB": (900, 4), "GH200-144GB": (900, 4), "B200-180GB": (1800, 5), "B300-288GB": (1800, 5),
    "GB200-186GB": (1800, 5), "L40S": (0, 0), "T4": (0, 0), "RTX-PRO-6000-96GB": (0, 0),
}
# `nvidia-smi nvlink -s` per link: A100 25 GB/s (NVIDIA/nccl #1054), GB200 53.125 GB/s (NVIDIA/k8s-test-infra #371)
LINE_RATE = {0: None, 3: 25000, 4: 26562, 5: 53125}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_table_matches_published_bandwidth(model: str) -> None:
    row = next(m for m in nm.MODELS if m.model == model)
    bandwidth, generation = PUBLISHED[model]
    per_link = 100 if generation == 5 else 50
    assert (row.links, row.generation, row.speed_mbps) == (bandwidth // per_link, generation, LINE_RATE[generation])
    assert row.source
    assert (row.wiring == nm.NONE) == (bandwidth == 0)


def test_table_covers_every_model_and_no_more() -> None:
    assert nm.known_models() == sorted(PUBLISHED)


def test_lookup_by_pci_id_wins_over_the_name() -> None:
    # an H800 (0x2324) whose name reads like an H100's is an H800: the PCI id identifies the board
    assert nm.find("0x232410DE", "NVIDIA H100 80GB HBM3").model == "H800-80GB"
    assert nm.find(0x233010DE).model == "H100-SXM5-80GB"
    assert nm.find("garbage", "nvidia h200").model == "H200-141GB"
    assert nm.find(None, "NVIDIA Future GPU") is None


def test_docs_table_is_the_code_table() -> None:
    """docs/health.md repeats the table for operators; it must say what the code says."""
    text = (_HERE.parents[1] / "docs" / "health.md").read_text(encoding="utf-8")
    start = text.index("| model | PCI device id | links | NVLink | MB/s per link | wiring | INFERRED |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    none = "\u2013"  # the docs' en dash for "none"
    expected = [[m.model, f"`0x{m.pci_device_id:08X}`", str(m.links), str(m.generation or none),
                 str(m.speed_mbps or none), m.wiring, m.inferred or none] for m in nm.MODELS]
    assert rows == expected
