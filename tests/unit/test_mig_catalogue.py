"""The MIG catalogue (issue 15) against the sources it cites, and NVIDIA's gpu-operator default MIG config run
through the validator on every catalogue model.

Every expected value here is transcribed from a source, never computed by the code under test:
- ``OFFERED``: profile names, instance counts, memory slices and compute slices per model, from the MIG User
  Guide, the ``nvidia-smi mig -lgip/-lgipp`` listings quoted in NVIDIA/mig-parted #120, #139, #166, #187, #227,
  gpu-operator #1303, bigstack-oss/cubecos #312, container-engine-accelerators #564, and mig-parted's
  config-default.yaml (names of the rows no listing shows); ``ALIASES``: the names an earlier GB200 driver printed.
- The verdict of each gpu-operator label on each model follows from the label's device filters and mig-devices
  and ``OFFERED`` alone (``expected_verdict``).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO / "collections") not in sys.path:
    sys.path.insert(0, str(_REPO / "collections"))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_parted as mpp  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_planner as mpl  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_profiles as mp  # noqa: E402

GPU_OPERATOR = _REPO / "tests" / "data" / "gpu-operator" / "0400_configmap.yaml"


def _table(g1: str, g1x2: str, g2: str, g3: str, g4: str, g7: str) -> dict[str, tuple[int, int, int]]:
    """name -> (instances, memory slices, compute slices) of a 7-compute / 8-memory-slice board (MIG User Guide:
    1g 1/8 memory x7, 1g+me x1, 1g with 2/8 memory x4, 2g 2/8 x3, 3g 4/8 x2, 4g 4/8 x1, 7g 8/8 x1)."""
    return {g1: (7, 1, 1), f"{g1}+me": (1, 1, 1), g1x2: (4, 2, 1), g2: (3, 2, 2), g3: (2, 4, 3), g4: (1, 4, 4),
            g7: (1, 8, 7)}


A100_40 = _table("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
A100_80 = _table("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
H200 = _table("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")
OFFERED: dict[str, dict[str, tuple[int, int, int]]] = {
    "A100-SXM4-40GB": A100_40,
    "A100-PCIE-40GB": A100_40,
    "A100-SXM4-80GB": A100_80,
    "A100-PCIE-80GB": A100_80,
    "H100-SXM5-80GB": A100_80,
    "H100-PCIE-80GB": A100_80,
    "A30-24GB": {"1g.6gb": (4, 1, 1), "1g.6gb+me": (1, 1, 1), "2g.12gb": (2, 2, 2), "2g.12gb+me": (1, 2, 2),
                 "4g.24gb": (1, 4, 4)},
    "H100-NVL-94GB": _table("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "GH200-96GB": _table("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    "GH200-144GB": _table("1g.18gb", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"),
    "H200-141GB": H200,
    "H200-NVL-141GB": H200,
    "B200-180GB": _table("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    "GB200-186GB": _table("1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"),
    # A800 / H800 / H20: the tables of their gpu-operator device-filter groups (A100 80GB / 40GB, H100 80GB, 96GB)
    "A800-SXM4-80GB": A100_80,
    "A800-PCIE-80GB": A100_80,
    "A800-PCIE-40GB": A100_40,
    "H800-80GB": A100_80,
    "H800-PCIE-80GB": A100_80,
    "H20-96GB": _table("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    # gpu-operator v25.3.0 for 0x318210DE (aws/sagemaker-hyperpod-cli #403): 1g.34gb x7, 1g.67gb x4, 2g.67gb x3,
    # 3g.135gb x2, 4g.135gb x1, 7g.269gb x1 (+me x1 as on every 8-slot board, INFERRED in the catalogue)
    "B300-288GB": _table("1g.34gb", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"),
    # cubecos #312 -lgip (counts) + one -lgipp (12 memory units: 1g 3, 2g 6, 4g 12); 4 compute slices
    "RTX-PRO-6000-96GB": {
        "1g.24gb": (4, 3, 1), "1g.24gb+me": (1, 3, 1), "1g.24gb+gfx": (4, 3, 1), "1g.24gb+me.all": (1, 3, 1),
        "1g.24gb-me": (4, 3, 1), "2g.48gb": (2, 6, 2), "2g.48gb+gfx": (2, 6, 2), "2g.48gb+me.all": (1, 6, 2),
        "2g.48gb-me": (2, 6, 2), "4g.96gb": (1, 12, 4), "4g.96gb+gfx": (1, 12, 4)},
}
SLOTS = {m: 4 if m == "A30-24GB" else 12 if m == "RTX-PRO-6000-96GB" else 8 for m in OFFERED}
COMPUTE = {m: 4 if m in ("A30-24GB", "RTX-PRO-6000-96GB") else 7 for m in OFFERED}
# gpu-operator #1303 (early GB200 boards) printed 1g.24gb / 1g.24gb+me where production boards print 1g.23gb
# (mig-parted #227/#228); 3g.95gb/4g.95gb/7g.189gb are the same boards' 189 GB names (INFERRED in the catalogue).
ALIASES = {"GB200-186GB": {"1g.24gb": "1g.23gb", "1g.24gb+me": "1g.23gb+me", "3g.95gb": "3g.93gb",
                           "4g.95gb": "4g.93gb", "7g.189gb": "7g.186gb"}}

# PCI device id (mig-parted/gpu-operator device filters; 0x2BB5 from nvidia-smi in bottlerocket-kernel-kit #300)
# and the name NVML reports where a transcript shows it.
IDENTITY = {
    "A100-PCIE-40GB": (0x20F110DE, "NVIDIA A100-PCIE-40GB"),
    "A100-PCIE-80GB": (0x20B510DE, "NVIDIA A100 80GB PCIe"),
    "H100-PCIE-80GB": (0x233110DE, "NVIDIA H100 PCIe"),
    "H100-NVL-94GB": (0x232110DE, "NVIDIA H100 NVL"),
    "GH200-96GB": (0x234210DE, None),
    "GH200-144GB": (0x234810DE, None),
    "H200-NVL-141GB": (0x233B10DE, "NVIDIA H200 NVL"),
    "B200-180GB": (0x290110DE, "NVIDIA B200"),
    "GB200-186GB": (0x294110DE, "NVIDIA GB200"),
    "RTX-PRO-6000-96GB": (0x2BB510DE, None),
    "A800-SXM4-80GB": (0x20F310DE, None),
    "A800-PCIE-80GB": (0x20F510DE, None),
    "A800-PCIE-40GB": (0x20F610DE, None),
    "H800-80GB": (0x232410DE, None),
    "H800-PCIE-80GB": (0x232210DE, None),
    "H20-96GB": (0x232910DE, None),
    "B300-288GB": (0x318210DE, None),
}
# profile ids from the -lgip listings (name -> id); the rows no listing shows are left out
LISTED_IDS = {
    "H100-NVL-94GB": {"1g.12gb": 19, "1g.12gb+me": 20, "1g.24gb": 15, "2g.24gb": 14, "3g.47gb": 9, "4g.47gb": 5,
                      "7g.94gb": 0},
    "H200-NVL-141GB": {"1g.18gb": 19, "1g.18gb+me": 20, "1g.35gb": 15, "2g.35gb": 14, "3g.71gb": 9, "4g.71gb": 5,
                       "7g.141gb": 0},
    "GH200-144GB": {"1g.18gb": 19, "1g.18gb+me": 20, "1g.36gb": 15, "2g.36gb": 14},
    "B200-180GB": {"1g.23gb": 19, "1g.23gb+me": 20, "1g.45gb": 15, "2g.45gb": 14},
    "GB200-186GB": {"1g.23gb": 19, "1g.23gb+me": 20, "1g.47gb": 15, "2g.47gb": 14},
    "RTX-PRO-6000-96GB": {"1g.24gb": 14, "1g.24gb+me": 21, "1g.24gb+gfx": 47, "1g.24gb+me.all": 65,
                          "1g.24gb-me": 67, "2g.48gb": 5, "2g.48gb+gfx": 35, "2g.48gb+me.all": 64, "2g.48gb-me": 66},
}


def _config() -> dict[str, Any]:
    doc = yaml.safe_load(GPU_OPERATOR.read_text(encoding="utf-8"))
    config: dict[str, Any] = yaml.safe_load(doc["data"]["config.yaml"])
    return config


CONFIG = _config()
LABELS = sorted(CONFIG["mig-configs"])


def host(model: str) -> list[dict[str, Any]]:
    """One GPU of ``model`` as gpu_facts describes it (model key and PCI id)."""
    return [{"index": 0, "model": model, "pci_device_id": mp.get_model(model).pci_device_ids[0]}]


def expected_verdict(label: str, model: str) -> bool:
    """Accepted iff exactly one entry's device filter matches the model's PCI id and every profile it asks for
    (through ALIASES) is offered in that number and the whole set fits the model's memory and compute slices."""
    pci = IDENTITY.get(model, (None,))[0] or mp.get_model(model).pci_device_ids[0]
    matched = []
    for entry in CONFIG["mig-configs"][label]:
        filters = entry.get("device-filter")
        filters = [] if filters is None else filters if isinstance(filters, list) else [filters]
        if not filters or pci in [int(f, 16) for f in filters]:
            matched.append(entry)
    if len(matched) != 1:
        return False
    entry = matched[0]
    if not entry["mig-enabled"]:
        return True
    wanted: Counter[str] = Counter()
    for name, count in (entry.get("mig-devices") or {}).items():
        wanted[ALIASES.get(model, {}).get(name, name)] += count
    offered = OFFERED[model]
    if any(name not in offered or count > offered[name][0] for name, count in wanted.items()):
        return False
    memory = sum(offered[n][1] * c for n, c in wanted.items())
    compute = sum(offered[n][2] * c for n, c in wanted.items())
    return memory <= SLOTS[model] and compute <= COMPUTE[model]


def test_gpu_operator_copy_is_the_one_noted_in_source() -> None:
    source = (GPU_OPERATOR.parent / "SOURCE.md").read_text(encoding="utf-8")
    assert "0b0b6b154bdd7ed54102f3efe0239108b0c4a433" in source
    assert len(GPU_OPERATOR.read_bytes()) == 11638  # total_chars of the stored upstream file
    assert CONFIG["version"] == "v1"
    assert len(LABELS) == 68


def test_every_label_imports() -> None:
    layouts = mpp.from_mig_parted(CONFIG)
    assert isinstance(layouts, dict)
    assert sorted(layouts) == LABELS


@pytest.mark.parametrize("model", sorted(OFFERED))
@pytest.mark.parametrize("label", LABELS)
def test_label_verdict_matches_the_catalogue(label: str, model: str) -> None:
    entries = mpp.from_mig_parted(CONFIG, label)
    want = expected_verdict(label, model)
    if not want:
        with pytest.raises(ml.LayoutError):
            ml.validate(entries, host(model))
        return
    configs = ml.validate(entries, host(model))
    # what is accepted means the same slices: the planned instances are the requested (canonical) profiles
    requested: Counter[str] = Counter()
    matched = [e for e in entries if not e.get("device_filter")
               or mp.get_model(model).pci_device_ids[0] in
               [int(f, 16) for f in (e["device_filter"] if isinstance(e["device_filter"], list)
                                     else [e["device_filter"]])]]
    for name, count in (matched[0].get("gpu_instances") or {}).items():
        requested[ALIASES.get(model, {}).get(name, name)] += count
    assert Counter(gi.profile for gi in configs[0].gpu_instances) == requested


def test_the_verdict_table_is_not_trivial() -> None:
    """Guard against a table that accepts or refuses everything: counts transcribed from the sources."""
    accepted = {m: sum(expected_verdict(label, m) for label in LABELS) for m in OFFERED}
    # disabled, enabled, balanced + 1g.23gb, .me, 1g.47gb, 2g.47gb, 3g/4g/7g.93/186 + aliases 1g.24gb(.me), 95/189
    assert accepted["GB200-186GB"] == 15
    # disabled, enabled, balanced + 1g.24gb(.gfx, .me, .me.all, -me), 2g.48gb(.gfx, .me.all, -me), 4g.96gb(.gfx)
    assert accepted["RTX-PRO-6000-96GB"] == 14
    assert accepted["H100-NVL-94GB"] == 10
    assert accepted["A30-24GB"] == 8
    # gpu-operator's all-balanced has a device filter for every board in the catalogue but the B300, whose labels
    # came after the copied commit (tests/data/gpu-operator/SOURCE.md)
    assert [m for m in sorted(OFFERED) if not expected_verdict("all-balanced", m)] == ["B300-288GB"]


@pytest.mark.parametrize("model", sorted(OFFERED))
def test_catalogue_offers_exactly_the_cited_profiles(model: str) -> None:
    gpu = mp.get_model(model)
    got = {p.name: (p.instance_count, p.memory_slices, p.compute_slices) for p in gpu.gi_profiles}
    assert got == OFFERED[model]
    assert (gpu.memory_slots, gpu.compute_slices) == (SLOTS[model], COMPUTE[model])
    assert dict(gpu.profile_aliases) == ALIASES.get(model, {})


@pytest.mark.parametrize(("model", "ids"), sorted(LISTED_IDS.items()))
def test_profile_ids_from_the_listings(model: str, ids: dict[str, int]) -> None:
    gpu = mp.get_model(model)
    assert {name: getattr(gpu.profile(name), "profile_id", None) for name in ids} == ids


@pytest.mark.parametrize(("model", "identity"), sorted(IDENTITY.items()))
def test_found_by_pci_id_and_driver_name(model: str, identity: tuple[int, str | None]) -> None:
    pci, name = identity
    assert mp.get_model(pci_device_id=pci).name == model
    assert mp.get_model(pci_device_id=f"0x{pci:08X}").name == model
    if name is not None:
        assert mp.get_model(name=name).name == model


@pytest.mark.parametrize("model", sorted(OFFERED))
def test_every_model_cites_sources(model: str) -> None:
    gpu = mp.get_model(model)
    assert gpu.sources, model
    assert all(isinstance(text, str) and text for text in gpu.sources + gpu.inferred)


@pytest.mark.parametrize(("model", "reset"), [
    # MIG User Guide "GPU Reset on Hopper+ GPUs" / "... Ampere": a mode change resets Ampere only
    ("A100-PCIE-40GB", True), ("A100-PCIE-80GB", True), ("H100-PCIE-80GB", False), ("H100-NVL-94GB", False),
    ("GH200-96GB", False), ("GH200-144GB", False), ("H200-NVL-141GB", False), ("B200-180GB", False),
    ("GB200-186GB", False), ("RTX-PRO-6000-96GB", False),
])
def test_mode_change_reset(model: str, reset: bool) -> None:
    assert mp.get_model(model).mode_change_requires_reset is reset


# ------------------------------------------------------------------------------------------- driver name variants
GB200 = [{"index": 0, "name": "NVIDIA GB200", "pci_device_id": "0x294110DE"}]


def _gis(configs: list[ml.GpuConfig]) -> list[tuple[str, int, int, int]]:
    return [(gi.profile, gi.profile_id, gi.start, gi.size) for gi in configs[0].gpu_instances]


@pytest.mark.parametrize(("early", "production"), [
    ({"1g.24gb": 7}, {"1g.23gb": 7}),
    ({"1g.24gb+me": 1, "1g.24gb": 6}, {"1g.23gb+me": 1, "1g.23gb": 6}),
    ({"3g.95gb": 1, "4g.95gb": 1}, {"3g.93gb": 1, "4g.93gb": 1}),
    ({"7g.189gb": 1}, {"7g.186gb": 1}),
])
def test_early_gb200_names_mean_the_same_slices(early: dict[str, int], production: dict[str, int]) -> None:
    a = ml.validate([{"devices": "all", "gpu_instances": early}], GB200)
    b = ml.validate([{"devices": "all", "gpu_instances": production}], GB200)
    assert _gis(a) == _gis(b)
    assert {gi.profile for gi in a[0].gpu_instances} <= set(production)


def test_alias_and_name_count_together() -> None:
    with pytest.raises(ml.LayoutError) as err:
        ml.validate([{"devices": "all", "gpu_instances": {"1g.24gb": 4, "1g.23gb": 4}}], GB200)
    assert err.value.problems == [
        "GPU 0 (GB200-186GB): 1g.24gb x4 + 1g.23gb x4 need 8 compute slices; GB200-186GB has 7"]


def test_alias_keeps_its_compute_instances() -> None:
    configs = ml.validate([{"devices": "all", "gpu_instances": {"3g.95gb": 1},
                            "compute_instances": {"3g.95gb": ["1c.3g.93gb", "1c.3g.93gb", "1c.3g.93gb"]}}], GB200)
    assert [(ci.profile, ci.start) for ci in configs[0].gpu_instances[0].compute_instances] == [
        ("1c.3g.93gb", 0), ("1c.3g.93gb", 1), ("1c.3g.93gb", 2)]


def test_compute_instances_may_use_the_alias_name_too() -> None:
    early = ml.validate([{"devices": "all", "gpu_instances": {"3g.95gb": 2},
                          "compute_instances": {"3g.95gb": ["1c.3g.95gb", "2c.3g.95gb"]}}], GB200)
    production = ml.validate([{"devices": "all", "gpu_instances": {"3g.93gb": 2},
                               "compute_instances": {"3g.93gb": ["1c.3g.93gb", "2c.3g.93gb"]}}], GB200)
    assert early[0].gpu_instances == production[0].gpu_instances
    assert (early[0].profile_names, production[0].profile_names) == ({"3g.95gb": "3g.93gb"}, {})
    assert [ci.profile for ci in early[0].gpu_instances[0].compute_instances] == ["2c.3g.93gb", "1c.3g.93gb"]


@pytest.mark.parametrize(("text", "expected"), [
    ("1c.3g.95gb", "1c.3g.93gb"), ("3c.3g.95gb", "3g.93gb"), ("1g.24gb+me", "1g.23gb+me"), ("1c.4g.93gb", "1c.4g.93gb"),
    ("2c.7g.189gb", "2c.7g.186gb"),
])
def test_canonical_ci_name(text: str, expected: str) -> None:
    assert mp.get_model("GB200-186GB").canonical_ci_name(text) == expected


def test_alias_is_only_an_alias_on_its_model() -> None:
    b200 = [{"index": 0, "name": "NVIDIA B200", "pci_device_id": "0x290110DE"}]
    with pytest.raises(ml.LayoutError) as err:
        ml.validate([{"devices": "all", "gpu_instances": {"1g.24gb": 1}}], b200)
    assert err.value.problems == [
        "GPU 0 (B200-180GB): profile '1g.24gb' is not offered by B200-180GB; valid profiles: 1g.23gb, 1g.23gb+me, "
        "1g.45gb, 2g.45gb, 3g.90gb, 4g.90gb, 7g.180gb"]


def test_planner_reads_an_early_driver_name_as_the_same_instance() -> None:
    """An early GB200 driver reports its instances as 1g.24gb: a layout of 1g.23gb is already applied."""
    desired = ml.validate([{"devices": "all", "gpu_instances": {"1g.23gb": 7}}], GB200)
    current = [{**GB200[0], "mig": {"supported": True, "current": 1, "pending": 1},
                "gpu_instances": [{"id": 7 + s, "profile_name": "1g.24gb", "profile_id": 19, "start": s, "size": 1,
                                   "compute_instances": [{"id": 0, "profile_id": 0, "name": "1g.24gb"}]}
                                  for s in range(7)]}]
    plans = mpl.plan(current, desired)
    assert [p.actions for p in plans] == [[]]


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=24), model=st.sampled_from(sorted(OFFERED)))
def test_profile_lookup_never_raises(name: str, model: str) -> None:
    gpu = mp.get_model(model)
    found = gpu.profile(name)
    assert found is None or found in gpu.gi_profiles
    assert isinstance(gpu.canonical_profile_name(name), str)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=24), st.from_regex(r"[1-7]c\.[1-7]g\.[0-9]{1,3}gb(\+me|-me|\+gfx)?",
                                                           fullmatch=True)))
def test_canonical_ci_name_is_a_name_or_the_documented_error(text: str) -> None:
    gpu = mp.get_model("GB200-186GB")
    try:
        parsed = mp.parse_profile_name(text)
    except mp.ProfileSyntaxError:
        with pytest.raises(mp.ProfileSyntaxError, match=r"^malformed MIG profile"):
            gpu.canonical_ci_name(text)
        return
    assert mp.parse_profile_name(gpu.canonical_ci_name(text)).compute_slices == parsed.compute_slices
