"""The GPU model files against NVIDIA's published MIG tables.

Reference rows are transcribed from (see /work/shared/research/mig-mps-facts.md section 3):
- NVIDIA MIG User Guide, "Supported MIG Profiles": A100 (Table 6), H100 (Table 7), H200 (Table 8), A30 tables,
  and its `nvidia-smi mig -lgip` / `-lgipp` listings for A100-SXM4-40GB;
- `nvidia-smi mig -lgip` transcripts: A100-80GB (driver 515, plus 1g.20gb from a later driver), H100 80GB (two
  transcripts), A30 24GB; `nvidia-smi mig -lcip` of an A100-80GB 3g.40gb GPU instance.
Memory is the GiB column nvidia-smi prints (two decimals). None = the source does not give the value.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from gpufleet_sim.models import UnknownModelError, list_models, load_model, pci_ids

# name, enum index, profile id, instances, slices, SMs, memory GiB, CE, DEC, JPEG, OFA, placement starts, size
Row = tuple[str, int, int, int, int, int, str | None, int | None, int | None, int | None, int | None,
            list[int], int]
EIGHT = [0, 1, 2, 3, 4, 5, 6]

REFERENCE: dict[str, list[Row]] = {
    "A100-SXM4-40GB": [
        ("1g.5gb", 0, 19, 7, 1, 14, "4.75", 1, 0, 0, 0, EIGHT, 1),
        ("1g.5gb+me", 7, 20, 1, 1, 14, "4.75", 1, 1, 1, 1, EIGHT, 1),
        ("1g.10gb", 9, 15, 4, 1, 14, "9.62", 1, 1, 0, 0, [0, 2, 4, 6], 2),
        ("2g.10gb", 1, 14, 3, 2, 28, "9.62", 2, 1, 0, 0, [0, 2, 4], 2),
        ("3g.20gb", 2, 9, 2, 3, 42, "19.50", 3, 2, 0, 0, [0, 4], 4),
        ("4g.20gb", 3, 5, 1, 4, 56, "19.50", 4, 2, 0, 0, [0], 4),
        ("7g.40gb", 4, 0, 1, 7, 98, "39.25", 7, 5, 1, 1, [0], 8),
    ],
    "A100-SXM4-80GB": [
        ("1g.10gb", 0, 19, 7, 1, 14, "9.50", None, None, None, None, EIGHT, 1),
        ("1g.10gb+me", 7, 20, 1, 1, 14, "9.50", None, None, None, None, EIGHT, 1),
        ("1g.20gb", 9, 15, 4, 1, 14, "19.50", None, None, None, None, [0, 2, 4, 6], 2),
        ("2g.20gb", 1, 14, 3, 2, 28, "19.50", None, None, None, None, [0, 2, 4], 2),
        ("3g.40gb", 2, 9, 2, 3, 42, "39.25", None, None, None, None, [0, 4], 4),
        ("4g.40gb", 3, 5, 1, 4, 56, "39.25", None, None, None, None, [0], 4),
        ("7g.80gb", 4, 0, 1, 7, 98, "79.00", None, None, None, None, [0], 8),
    ],
    "H100-SXM5-80GB": [
        ("1g.10gb", 0, 19, 7, 1, 16, "9.75", 1, 1, 1, 0, EIGHT, 1),
        ("1g.10gb+me", 7, 20, 1, 1, 16, "9.75", None, None, None, 1, EIGHT, 1),
        ("1g.20gb", 9, 15, 4, 1, 26, "19.62", None, None, None, None, [0, 2, 4, 6], 2),
        ("2g.20gb", 1, 14, 3, 2, 32, "19.62", 2, 2, 2, None, [0, 2, 4], 2),
        ("3g.40gb", 2, 9, 2, 3, 60, "39.50", 3, 3, 3, None, [0, 4], 4),
        ("4g.40gb", 3, 5, 1, 4, 64, "39.50", 4, 4, 4, None, [0], 4),
        ("7g.80gb", 4, 0, 1, 7, 132, "79.25", 8, 7, 7, 1, [0], 8),
    ],
    # H200: every column from a real H200 SXM 141GB, driver 580.159.04 (tests/data/ground-truth/
    # h200-sxm-passthrough-r580/nvidia-smi/mig_lgip.txt and mig_lgipp.txt, 2026-11-28).
    "H200-141GB": [
        ("1g.18gb", 0, 19, 7, 1, 16, "16.00", 1, 1, 1, 0, EIGHT, 1),
        ("1g.18gb+me", 7, 20, 1, 1, 16, "16.00", 1, 1, 1, 1, EIGHT, 1),
        ("1g.35gb", 9, 15, 4, 1, 26, "32.50", 1, 1, 1, 0, [0, 2, 4, 6], 2),
        ("2g.35gb", 1, 14, 3, 2, 32, "32.50", 2, 2, 2, 0, [0, 2, 4], 2),
        ("3g.71gb", 2, 9, 2, 3, 60, "69.75", 3, 3, 3, 0, [0, 4], 4),
        ("4g.71gb", 3, 5, 1, 4, 64, "69.75", 4, 4, 4, 0, [0], 4),
        ("7g.141gb", 4, 0, 1, 7, 132, "140.00", 8, 7, 7, 1, [0], 8),
    ],
    # A30: 1g.6gb has one decoder in every public -lgip of the board (tests/data/ground-truth/public/A30__lgip__1.txt)
    "A30-24GB": [
        ("1g.6gb", 0, 14, 4, 1, 14, "5.81", 1, 1, 0, 0, [0, 1, 2, 3], 1),
        ("1g.6gb+me", 7, 21, 1, 1, 14, "5.81", 1, 1, 1, 1, [0, 1, 2, 3], 1),
        ("2g.12gb", 1, 5, 2, 2, 28, "11.69", 2, 2, 0, 0, [0, 2], 2),
        ("2g.12gb+me", 8, 6, 1, 2, 28, "11.69", 2, 2, 1, 1, [0, 2], 2),
        ("4g.24gb", 3, 0, 1, 4, 56, "23.44", 4, 4, 1, 1, [0], 4),
    ],
}

PCI_DEVICE_IDS = {  # mig-parted config-default.yaml device filters; non-MIG models from NVIDIA's PCI id list
    "A100-SXM4-40GB": 0x20B0, "A100-SXM4-80GB": 0x20B2, "A30-24GB": 0x20B7, "H100-SXM5-80GB": 0x2330,
    "H200-141GB": 0x2335, "L40S": 0x26B9, "T4": 0x1EB8,
    # issue 15 (gpu-operator 0400_configmap.yaml device filters; 0x2BB5 from nvidia-smi in bottlerocket-kernel-kit #300)
    "A100-PCIE-80GB": 0x20B5, "H100-NVL-94GB": 0x2321, "GH200-96GB": 0x2342, "B200-180GB": 0x2901,
    "GB200-186GB": 0x2941, "RTX-PRO-6000-96GB": 0x2BB5, "A100-PCIE-40GB": 0x20F1, "H100-PCIE-80GB": 0x2331,
    "GH200-144GB": 0x2348, "H200-NVL-141GB": 0x233B,
    # issue 15, second slice: gpu-operator 0400 device-filter groups; B300 from gpu-operator v25.3.0 (0x318210DE)
    "A800-SXM4-80GB": 0x20F3, "A800-PCIE-80GB": 0x20F5, "A800-PCIE-40GB": 0x20F6, "H800-80GB": 0x2324,
    "H800-PCIE-80GB": 0x2322, "H20-96GB": 0x2329, "B300-288GB": 0x3182,
}
NAMES = {  # nvmlDeviceGetName (GH200 and RTX PRO 6000: the catalogue's INFERRED names)
    "A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB", "A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB", "A30-24GB": "NVIDIA A30",
    "H100-SXM5-80GB": "NVIDIA H100 80GB HBM3", "H200-141GB": "NVIDIA H200", "L40S": "NVIDIA L40S", "T4": "Tesla T4",
    "A100-PCIE-80GB": "NVIDIA A100 80GB PCIe", "H100-NVL-94GB": "NVIDIA H100 NVL", "GH200-96GB": "NVIDIA GH200 480GB",
    "B200-180GB": "NVIDIA B200", "GB200-186GB": "NVIDIA GB200",
    "RTX-PRO-6000-96GB": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "A100-PCIE-40GB": "NVIDIA A100-PCIE-40GB", "H100-PCIE-80GB": "NVIDIA H100 PCIe",
    "GH200-144GB": "NVIDIA GH200 144G HBM3e", "H200-NVL-141GB": "NVIDIA H200 NVL",
    # the catalogue's INFERRED names of the export variants, the H20 and the B300
    "A800-SXM4-80GB": "NVIDIA A800-SXM4-80GB", "A800-PCIE-80GB": "NVIDIA A800 80GB PCIe",
    "A800-PCIE-40GB": "NVIDIA A800 40GB PCIe", "H800-80GB": "NVIDIA H800", "H800-PCIE-80GB": "NVIDIA H800 PCIe",
    "H20-96GB": "NVIDIA H20", "B300-288GB": "NVIDIA B300",
}
# MIG models whose tables are checked against the sources in tests/unit/test_mig_catalogue_sim.py
CATALOGUE = ["A100-PCIE-80GB", "H100-NVL-94GB", "GH200-96GB", "B200-180GB", "GB200-186GB", "RTX-PRO-6000-96GB",
             "A100-PCIE-40GB", "H100-PCIE-80GB", "GH200-144GB", "H200-NVL-141GB", "A800-SXM4-80GB", "A800-PCIE-80GB",
             "A800-PCIE-40GB", "H800-80GB", "H800-PCIE-80GB", "H20-96GB", "B300-288GB"]
MIG_MODELS = sorted([*REFERENCE, *CATALOGUE])
# valid compute-instance sizes per GPU-instance size (go-nvlib VisitMigProfiles; -lcip of a 3g GI)
CI_SIZES = {1: [1], 2: [1, 2], 3: [1, 2, 3], 4: [1, 2, 4], 7: [1, 2, 3, 4, 7]}


def _profile(model: dict[str, Any], name: str) -> dict[str, Any]:
    matches = [p for p in model["mig"]["gi_profiles"] if p["name"] == name]
    assert len(matches) == 1, name
    return matches[0]


def test_all_models_are_present() -> None:
    assert list_models() == sorted(NAMES)


def test_unknown_model_message() -> None:
    with pytest.raises(UnknownModelError) as info:
        load_model("B300")
    assert str(info.value) == ("unknown GPU model 'B300'; known models: A100-PCIE-40GB, A100-PCIE-80GB, "
                               "A100-SXM4-40GB, A100-SXM4-80GB, A30-24GB, A800-PCIE-40GB, A800-PCIE-80GB, "
                               "A800-SXM4-80GB, B200-180GB, B300-288GB, GB200-186GB, GH200-144GB, GH200-96GB, "
                               "H100-NVL-94GB, H100-PCIE-80GB, H100-SXM5-80GB, H20-96GB, H200-141GB, H200-NVL-141GB, "
                               "H800-80GB, H800-PCIE-80GB, L40S, RTX-PRO-6000-96GB, T4")


@pytest.mark.parametrize("model_name", sorted(NAMES))
def test_identity(model_name: str) -> None:
    model = load_model(model_name)
    assert model["name"] == NAMES[model_name]
    assert pci_ids(model)[0] == PCI_DEVICE_IDS[model_name] << 16 | 0x10DE
    assert model["mig"]["supported"] == (model_name in MIG_MODELS)


@pytest.mark.parametrize(("model_name", "row"), [(m, r) for m, rows in REFERENCE.items() for r in rows],
                         ids=[f"{m}:{r[0]}" for m, rows in REFERENCE.items() for r in rows])
def test_gpu_instance_profile_matches_nvidia(model_name: str, row: Row) -> None:
    name, index, pid, instances, slices, sms, gib, ce, dec, jpeg, ofa, starts, size = row
    p = _profile(load_model(model_name), name)
    assert (p["index"], p["id"], p["instances"], p["slices"]) == (index, pid, instances, slices)
    assert p["placements"] == [[s, size] for s in starts]
    for key, want in (("sms", sms), ("copy_engines", ce), ("decoders", dec), ("jpegs", jpeg), ("ofas", ofa)):
        if want is not None:
            assert p[key] == want, key
    if gib is not None:
        assert f"{p['memory_mib'] / 1024:.2f}" == gib


@pytest.mark.parametrize("model_name", sorted(REFERENCE))
def test_no_profiles_beyond_the_reference(model_name: str) -> None:
    names = [p["name"] for p in load_model(model_name)["mig"]["gi_profiles"]]
    assert sorted(names) == sorted(r[0] for r in REFERENCE[model_name])


def _go_round(x: float) -> int:
    return math.floor(x + 0.5)  # Go's math.Round: half away from zero


@pytest.mark.parametrize("model_name", MIG_MODELS)
def test_profile_names_follow_nvidias_memory_rounding(model_name: str) -> None:
    """go-nvlib getMigMemorySizeGB: GB = round(ceil(mem/total*8)/8 * ceil(total GiB))."""
    model = load_model(model_name)
    total_mib = model["memory"]["total_mib"]
    total_gb = math.ceil(total_mib / 1024)
    for p in model["mig"]["gi_profiles"]:
        fraction = math.ceil(p["memory_mib"] / total_mib * 8) / 8
        base = p["name"].split("+")[0].split("-")[0]  # attributes: +me, +gfx, +me.all, -me
        assert base == f"{p['slices']}g.{_go_round(fraction * total_gb)}gb", p["name"]


@pytest.mark.parametrize("model_name", MIG_MODELS)
def test_compute_instance_tables(model_name: str) -> None:
    mig = load_model(model_name)["mig"]
    gi_sizes = sorted({p["slices"] for p in mig["gi_profiles"]})
    assert sorted(int(k) for k in mig["ci_profiles"]) == gi_sizes
    for g in gi_sizes:
        rows = mig["ci_profiles"][str(g)]
        assert [r["slices"] for r in rows] == CI_SIZES[g]
        for r in rows:
            assert r["index"] == r["id"] == {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[r["slices"]]
            assert r["instances"] == len(r["placements"]) == g // r["slices"]
            assert all(start + size <= g and size == r["slices"] for start, size in r["placements"])


def test_a100_80gb_3g_compute_instances_match_lcip() -> None:
    """`nvidia-smi mig -lcip` on an A100-80GB 3g.40gb GI: 1c x3 14 SMs, 2c x1 28 SMs, 3c x1 42 SMs."""
    rows = load_model("A100-SXM4-80GB")["mig"]["ci_profiles"]["3"]
    assert [(r["id"], r["instances"], r["sms"]) for r in rows] == [(0, 3, 14), (1, 1, 28), (2, 1, 42)]


@pytest.mark.parametrize(("model_name", "reset_required", "slots"), [
    ("A100-SXM4-40GB", True, 8), ("A100-SXM4-80GB", True, 8), ("A30-24GB", True, 4),
    ("H100-SXM5-80GB", False, 8), ("H200-141GB", False, 8),
    ("A100-PCIE-80GB", True, 8), ("H100-NVL-94GB", False, 8), ("GH200-96GB", False, 8), ("B200-180GB", False, 8),
    ("GB200-186GB", False, 8), ("RTX-PRO-6000-96GB", False, 12),  # RTX PRO 6000: 12 units in its -lgipp
    ("A100-PCIE-40GB", True, 8), ("H100-PCIE-80GB", False, 8), ("GH200-144GB", False, 8), ("H200-NVL-141GB", False, 8),
])
def test_mig_mode_semantics(model_name: str, reset_required: bool, slots: int) -> None:
    mig = load_model(model_name)["mig"]
    assert mig["reset_required_for_mode"] is reset_required
    assert mig["memory_slices"] == slots
    assert max(s + z for p in mig["gi_profiles"] for s, z in p["placements"]) == slots


@pytest.mark.parametrize("model_name", ["L40S", "T4"])
def test_non_mig_models_have_no_tables(model_name: str) -> None:
    mig = load_model(model_name)["mig"]
    assert (mig["supported"], mig["gi_profiles"], mig["ci_profiles"]) == (False, [], {})
