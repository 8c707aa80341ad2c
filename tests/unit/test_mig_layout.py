"""The offline MIG layout validator (plugins/module_utils/mig_layout.py): tables of documented combinations."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import get_model  # noqa: E402


def gpus(model: str, count: int = 1) -> list[dict[str, Any]]:
    return [{"index": i, "model": model} for i in range(count)]


def layout(counts: dict[str, int], **extra: Any) -> list[dict[str, Any]]:
    return [{"devices": "all", "mig_enabled": True, "gpu_instances": counts, **extra}]


def assert_valid_packing(config: ml.GpuConfig) -> None:
    """Independent check: starts offered by the table, no overlap, compute within the GPU."""
    model = get_model(config.model)
    used = 0
    for gi in config.gpu_instances:
        profile = model.profile(gi.profile)
        assert profile is not None
        assert gi.start in profile.starts
        assert gi.size == profile.memory_slices
        bits = ((1 << gi.size) - 1) << gi.start
        assert not used & bits, f"overlap at {gi.profile}@{gi.start}"
        used |= bits
    assert sum(gi.compute_slices for gi in config.gpu_instances) <= model.compute_slices


VALID = [
    # (model, requested instances, source)
    ("A100-SXM4-40GB", {"1g.5gb": 7}, "mig-parted README all-1g.5gb"),
    ("A100-SXM4-40GB", {"2g.10gb": 3}, "mig-parted README all-2g.10gb"),
    ("A100-SXM4-40GB", {"3g.20gb": 2}, "mig-parted README all-3g.20gb"),
    ("A100-SXM4-40GB", {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}, "mig-parted README all-balanced"),
    ("A100-SXM4-40GB", {"7g.40gb": 1}, "MIG User Guide A100 profiles: 7g.40gb"),
    ("A100-SXM4-40GB", {"4g.20gb": 1, "3g.20gb": 1}, "MIG User Guide Partitioning: 4g.20gb + 3g.20gb valid"),
    ("A100-SXM4-40GB", {"1g.10gb": 4}, "mig-parted config-default all-1g.10gb: 4 on 0x20B010DE"),
    ("A100-SXM4-40GB", {"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}, "MIG User Guide: nvidia-smi mig -cgi 19,14,5"),
    ("A100-SXM4-40GB", {"2g.10gb": 1, "1g.5gb": 5}, "MIG User Guide: -cgi 14,19,19,19,19,19"),
    ("A100-SXM4-40GB", {"1g.5gb+me": 1, "1g.5gb": 6}, "MIG User Guide: one 1g.5gb+me per GPU"),
    ("A100-SXM4-80GB", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, "mig-parted config-default all-balanced 80GB"),
    ("A100-SXM4-80GB", {"1g.10gb": 7}, "mig-parted config-default all-1g.10gb: 7 on 0x20B210DE"),
    ("A100-SXM4-80GB", {"1g.20gb": 4}, "A100 80GB -lgip transcript: 1g.20gb x4"),
    ("A100-SXM4-80GB", {"4g.40gb": 1, "3g.40gb": 1}, "MIG User Guide Partitioning (80GB names)"),
    ("A30-24GB", {"1g.6gb": 2, "2g.12gb": 1}, "mig-parted config-default all-balanced A30"),
    ("A30-24GB", {"1g.6gb": 4}, "MIG User Guide A30 profiles: 1g.6gb x4"),
    ("A30-24GB", {"2g.12gb": 2}, "MIG User Guide A30 profiles: 2g.12gb x2"),
    ("A30-24GB", {"4g.24gb": 1}, "MIG User Guide A30 profiles: 4g.24gb"),
    ("H100-SXM5-80GB", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, "mig-parted config-default all-balanced H100"),
    ("H100-SXM5-80GB", {"1g.10gb": 7}, "H100 transcript: nvidia-smi mig -cgi 19 x7"),
    ("H100-SXM5-80GB", {"1g.20gb": 4}, "MIG User Guide H100 profiles: 1g.20gb x4"),
    ("H100-SXM5-80GB", {"7g.80gb": 1}, "MIG User Guide H100 profiles: 7g.80gb"),
    ("H200-141GB", {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}, "mig-parted config-default all-balanced H200"),
    ("H200-141GB", {"1g.18gb": 7}, "MIG User Guide H200 profiles: 1g.18gb x7"),
    ("H200-141GB", {"7g.141gb": 1}, "MIG User Guide H200 profiles: 7g.141gb"),
]


@pytest.mark.parametrize(("model", "counts", "source"), VALID, ids=[f"{m}:{s}" for m, _, s in VALID])
def test_valid_layouts(model: str, counts: dict[str, int], source: str) -> None:
    configs = ml.validate(layout(counts), gpus(model, 2))
    assert [c.index for c in configs] == [0, 1]
    for config in configs:
        assert config.mig_enabled
        assert config.model == model
        assert Counter(gi.profile for gi in config.gpu_instances) == Counter(counts), source
        assert_valid_packing(config)


INVALID = [
    # (model, requested, exact message for GPU 0, source)
    ("A100-SXM4-40GB", {"3g.20gb": 2, "1g.5gb": 1},
     "GPU 0 (A100-SXM4-40GB): 3g.20gb x2 + 1g.5gb x1 cannot be placed together: they need 9 of the 8 memory slices",
     "research 3.6: 3g x2 + 1g invalid"),
    ("A100-SXM4-40GB", {"1g.10gb": 4, "1g.5gb": 1},
     "GPU 0 (A100-SXM4-40GB): 1g.10gb x4 + 1g.5gb x1 cannot be placed together: they need 9 of the 8 memory slices",
     "research 3.6: 1g.10gb x4 leaves no room for 1g.5gb"),
    ("A100-SXM4-40GB", {"1g.5gb": 8},
     "GPU 0 (A100-SXM4-40GB): 8 x 1g.5gb requested, but A100-SXM4-40GB offers at most 7 x 1g.5gb",
     "MIG User Guide -lgip: 1g.5gb instances 7"),
    ("A100-SXM4-40GB", {"1g.5gb+me": 2},
     "GPU 0 (A100-SXM4-40GB): 2 x 1g.5gb+me requested, but A100-SXM4-40GB offers at most 1 x 1g.5gb+me",
     "MIG User Guide: one +me instance per GPU"),
    ("A100-SXM4-40GB", {"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1},
     "GPU 0 (A100-SXM4-40GB): 4g.20gb x1 + 3g.20gb x1 + 1g.5gb x1 need 8 compute slices; A100-SXM4-40GB has 7",
     "MIG User Guide: 7 compute slices"),
    ("A100-SXM4-80GB", {"1g.5gb": 1},
     "GPU 0 (A100-SXM4-80GB): profile '1g.5gb' is not offered by A100-SXM4-80GB; valid profiles: 1g.10gb, "
     "1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb",
     "names depend on memory (go-nvlib)"),
    ("A30-24GB", {"3g.12gb": 1},
     "GPU 0 (A30-24GB): profile '3g.12gb' is not offered by A30-24GB; valid profiles: 1g.6gb, 1g.6gb+me, 2g.12gb, "
     "2g.12gb+me, 4g.24gb",
     "MIG User Guide A30: no 3g profile"),
    ("A30-24GB", {"2g.12gb": 2, "1g.6gb": 1},
     "GPU 0 (A30-24GB): 2g.12gb x2 + 1g.6gb x1 need 5 compute slices; A30-24GB has 4",
     "MIG User Guide A30: 4 compute slices"),
    ("A30-24GB", {"1g.6gb": 5},
     "GPU 0 (A30-24GB): 5 x 1g.6gb requested, but A30-24GB offers at most 4 x 1g.6gb",
     "A30 -lgip: 1g.6gb instances 4"),
    ("H100-SXM5-80GB", {"3g.40gb": 2, "1g.10gb": 1},
     "GPU 0 (H100-SXM5-80GB): 3g.40gb x2 + 1g.10gb x1 cannot be placed together: they need 9 of the 8 memory slices",
     "H100 -lgipp: 3g size 4"),
    ("H200-141GB", {"7g.141gb": 1, "1g.18gb": 1},
     "GPU 0 (H200-141GB): 7g.141gb x1 + 1g.18gb x1 need 8 compute slices; H200-141GB has 7",
     "MIG User Guide H200: 7 compute slices"),
]


@pytest.mark.parametrize(("model", "counts", "message", "source"), INVALID, ids=[f"{r[0]}:{r[3]}" for r in INVALID])
def test_invalid_layouts(model: str, counts: dict[str, int], message: str, source: str) -> None:
    with pytest.raises(ml.LayoutError) as err:
        ml.validate(layout(counts), gpus(model))
    assert message in err.value.problems, source


def problems_of(entries: Any, host: list[dict[str, Any]], **kwargs: Any) -> list[str]:
    with pytest.raises(ml.LayoutError) as err:
        ml.validate(entries, host, **kwargs)
    return err.value.problems


A100 = "A100-SXM4-80GB"

MESSAGES = [
    ("unknown model", layout({"1g.5gb": 1}), [{"index": 0, "model": "Tesla T4", "pci_device_id": "0x1EB810DE"}],
     ["GPU 0: unknown GPU model 'Tesla T4' (pci_device_id 0x1EB810DE); known: A100-PCIE-40GB, A100-PCIE-80GB, "
      "A100-SXM4-40GB, A100-SXM4-80GB, A30-24GB, A800-PCIE-40GB, A800-PCIE-80GB, A800-SXM4-80GB, B200-180GB, "
      "B300-288GB, GB200-186GB, GH200-144GB, GH200-96GB, H100-NVL-94GB, H100-PCIE-80GB, H100-SXM5-80GB, H20-96GB, "
      "H200-141GB, H200-NVL-141GB, H800-80GB, H800-PCIE-80GB, RTX-PRO-6000-96GB"]),
    ("placement not offered", layout({"3g.40gb": 1}, placements=[{"profile": "3g.40gb", "start": 2}]), gpus(A100),
     ["GPU 0 (A100-SXM4-80GB): 3g.40gb cannot start at memory slice 2 on A100-SXM4-80GB; offered starts: 0, 4"]),
    ("placements overlap",
     layout({"3g.40gb": 1, "2g.20gb": 1}, placements=[{"profile": "3g.40gb", "start": 0},
                                                      {"profile": "2g.20gb", "start": 2}]), gpus(A100),
     ["GPU 0 (A100-SXM4-80GB): explicit placements overlap: 3g.40gb at slices 0-3 and 2g.20gb at slices 2-3"]),
    ("no packing around pins", layout({"4g.40gb": 1, "3g.40gb": 1}, placements=[{"profile": "3g.40gb", "start": 0}]),
     gpus(A100),
     ["GPU 0 (A100-SXM4-80GB): 4g.40gb x1 + 3g.40gb x1 cannot be placed together: no non-overlapping placement "
      "exists on the 8 memory slices around the explicit placements 3g.40gb@0 (4g.40gb starts 0 size 4; 3g.40gb "
      "starts 0,4 size 4)"]),
    ("more pins than requested", layout({"1g.10gb": 1}, placements=[{"profile": "1g.10gb", "start": 0},
                                                                    {"profile": "1g.10gb", "start": 1}]), gpus(A100),
     ["GPU 0 (A100-SXM4-80GB): 2 placements given for 1g.10gb but only 1 requested"]),
    ("CIs do not fit", layout({"3g.40gb": 1}, compute_instances={"3g.40gb": ["2c.3g.40gb", "1c.3g.40gb",
                                                                              "1c.3g.40gb"]}), gpus(A100),
     ["GPU 0 (A100-SXM4-80GB): compute_instances for 3g.40gb: compute instances 2c.3g.40gb x1 + 1c.3g.40gb x2 do "
      "not fit a 3g.40gb GPU instance: they need 4 compute slices, it has 3"]),
    ("CI count", layout({"7g.80gb": 1}, compute_instances={"7g.80gb": ["4c.7g.80gb", "4c.7g.80gb"]}), gpus(A100),
     ["GPU 0 (A100-SXM4-80GB): compute_instances for 7g.80gb: 2 x 4c.7g.80gb requested but a 7g.80gb GPU instance "
      "holds at most 1"]),
    ("CI not offered", layout({"7g.80gb": 1}, compute_instances={"7g.80gb": ["5c.7g.80gb"]}), gpus(A100),
     ["GPU 0 (A100-SXM4-80GB): compute_instances for 7g.80gb: compute instance '5c.7g.80gb' is not offered inside a "
      "7g.80gb GPU instance; valid: 1c.7g.80gb, 2c.7g.80gb, 3c.7g.80gb, 4c.7g.80gb, 7g.80gb"]),
    ("CI for unrequested GI", layout({"7g.80gb": 1}, compute_instances={"3g.40gb": ["1c.3g.40gb"]}), gpus(A100),
     ["GPU 0 (A100-SXM4-80GB): compute_instances for 3g.40gb: layout entry[0] does not request 3g.40gb GPU "
      "instances"]),
    ("unmatched GPU", [{"devices": [0], "mig_enabled": False}], gpus(A100, 2),
     ["GPU 1 (A100-SXM4-80GB): no layout entry matches it; add an entry for it or use devices: all"]),
    ("duplicate match", [{"devices": "all", "mig_enabled": False}, {"devices": [1], "mig_enabled": False}],
     gpus(A100, 2),
     ["GPU 1 (A100-SXM4-80GB): matched by more than one layout entry (entry[0], entry[1]); each GPU must be "
      "matched by exactly one"]),
    ("index the host lacks", [{"devices": "all", "mig_enabled": False}, {"devices": [5], "mig_enabled": False}],
     gpus(A100, 2), ["layout entry[1]: names GPU 5, which the host does not have (GPUs: 0, 1)"]),
    ("not MIG-capable, named", layout({"1g.10gb": 1}, devices=[0]),
     [{"index": 0, "name": "NVIDIA L40S", "mig_capable": False}],
     ["GPU 0 (NVIDIA L40S): not MIG-capable, but layout entry[0] enables MIG on it; remove it from devices"]),
]


@pytest.mark.parametrize(("case", "entries", "host", "expected"), MESSAGES, ids=[m[0] for m in MESSAGES])
def test_messages(case: str, entries: Any, host: list[dict[str, Any]], expected: list[str]) -> None:
    assert problems_of(entries, host) == expected


SYNTAX = [
    ("mig_enabled false with instances", [{"devices": "all", "mig_enabled": False, "gpu_instances": {"1g.10gb": 2}}],
     ["layout entry[0]: mig_enabled is false but GPU instances are requested (1g.10gb x2); remove them or set "
      "mig_enabled: true"]),
    ("CI name as GI", layout({"1c.3g.40gb": 1}),
     ["layout entry[0]: gpu_instances: '1c.3g.40gb' names a compute instance; request the GPU instance '3g.40gb' "
      "and list '1c.3g.40gb' under compute_instances"]),
    ("bad count", layout({"3g.40gb": -1}),
     ["layout entry[0]: gpu_instances count for 3g.40gb must be an integer >= 0, got -1"]),
    ("unknown key", [{"devices": "all", "mig_enabled": False, "mig-devices": {}}],
     ["layout entry[0]: unknown key(s) mig-devices; allowed: devices, model, device_filter, mig_enabled, "
      "gpu_instances, placements, compute_instances"]),
    ("devices", [{"devices": "some", "mig_enabled": False}],
     ["layout entry[0]: devices must be 'all' or a non-empty list of GPU indexes, got 'some'"]),
    ("mig_enabled missing", [{"devices": "all"}],
     ["layout entry[0]: mig_enabled is required and must be true or false, got None"]),
    ("not a list", {"devices": "all"}, ["a MIG layout must be a non-empty list of entries, got {'devices': 'all'}"]),
]


@pytest.mark.parametrize(("case", "entries", "expected"), SYNTAX, ids=[s[0] for s in SYNTAX])
def test_syntax_messages(case: str, entries: Any, expected: list[str]) -> None:
    assert problems_of(entries, gpus(A100)) == expected


def test_all_problems_reported_at_once() -> None:
    host = [*gpus(A100, 2), {"index": 2, "model": "A30-24GB"}]
    with pytest.raises(ml.LayoutError) as err:
        ml.validate(layout({"3g.40gb": 3}), host)
    assert len(err.value.problems) == 5  # count + compute on two A100s, profile unknown on the A30
    assert str(err.value).startswith("5 problems in the MIG layout:\n- GPU 0 (A100-SXM4-80GB): 3 x 3g.40gb")


def test_placement_search_is_deterministic_largest_first() -> None:
    configs = ml.validate(layout({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}), gpus(A100))
    # 3g at 0 leaves 4-7, where a 1g cannot sit at 7: the search backtracks to 3g at 4.
    assert ml.placements_for(configs[0]) == [(9, 4), (14, 0), (19, 2), (19, 3)]
    assert ml.placements_for(configs[0].to_dict()) == [(9, 4), (14, 0), (19, 2), (19, 3)]


@pytest.mark.parametrize(("counts", "pins", "expected"), [
    ({"3g.40gb": 1, "2g.20gb": 1}, [{"profile": "3g.40gb", "start": 0}], [(9, 0, True), (14, 4, False)]),
    ({"1g.10gb": 3}, [{"profile": "1g.10gb", "start": 6}], [(19, 0, False), (19, 1, False), (19, 6, True)]),
    ({}, [{"profile": "7g.80gb", "start": 0}], [(0, 0, True)]),   # counts derived from placements
])
def test_explicit_placements(counts: dict[str, int], pins: list[dict[str, Any]],
                             expected: list[tuple[int, int, bool]]) -> None:
    entries = [{"devices": "all", "mig_enabled": True, "placements": pins, **({"gpu_instances": counts}
                                                                              if counts else {})}]
    config = ml.validate(entries, gpus(A100))[0]
    assert [(gi.profile_id, gi.start, gi.pinned) for gi in config.gpu_instances] == expected


@pytest.mark.parametrize(("cis", "expected"), [
    # Placements inside a GI: starts at multiples of the next power of two of the CI size (simulator's table).
    (["3c.7g.80gb", "2c.7g.80gb", "2c.7g.80gb"], [("3c.7g.80gb", 4), ("2c.7g.80gb", 0), ("2c.7g.80gb", 2)]),
    (["1c.7g.80gb", "4c.7g.80gb", "2c.7g.80gb"], [("4c.7g.80gb", 0), ("2c.7g.80gb", 4), ("1c.7g.80gb", 6)]),
    (["3c.7g.80gb", "3c.7g.80gb", "1c.7g.80gb"], [("3c.7g.80gb", 0), ("3c.7g.80gb", 4), ("1c.7g.80gb", 3)]),
])
def test_compute_instance_placements(cis: list[str], expected: list[tuple[str, int]]) -> None:
    config = ml.validate(layout({"7g.80gb": 1}, compute_instances={"7g.80gb": cis}), gpus(A100))[0]
    assert [(ci.profile, ci.start) for ci in config.gpu_instances[0].compute_instances] == expected


@pytest.mark.parametrize(("value", "expected"), [
    (["1c.3g.40gb", "2c.3g.40gb"], [("2c.3g.40gb", "1c.3g.40gb"), ("2c.3g.40gb", "1c.3g.40gb")]),
    ([["3g.40gb"], ["1c.3g.40gb", "1c.3g.40gb", "1c.3g.40gb"]],
     [("3g.40gb",), ("1c.3g.40gb", "1c.3g.40gb", "1c.3g.40gb")]),
    ([], [(), ()]),
])
def test_compute_instances(value: Any, expected: list[tuple[str, ...]]) -> None:
    config = ml.validate(layout({"3g.40gb": 2}, compute_instances={"3g.40gb": value}), gpus(A100))[0]
    assert [tuple(ci.profile for ci in gi.compute_instances) for gi in config.gpu_instances] == expected


def test_default_compute_instance_fills_the_gi() -> None:
    gi = ml.validate(layout({"3g.40gb": 1}), gpus(A100))[0].gpu_instances[0]
    assert [(ci.profile, ci.profile_id, ci.slices) for ci in gi.compute_instances] == [("3g.40gb", 2, 3)]


def test_selectors_model_filter_and_devices() -> None:
    host = [{"index": 0, "pci_device_id": "0x20B010DE"}, {"index": 1, "pci_device_id": 0x20B210DE},
            {"index": 2, "name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x233010DE"},
            {"index": 3, "name": "NVIDIA L40S", "pci_device_id": "0x26B510DE", "mig_capable": False}]
    entries = [
        {"device_filter": ["0x20B010DE"], "mig_enabled": True, "gpu_instances": {"1g.10gb": 4}},
        {"devices": [1], "device_filter": "0x20B210DE", "gpu_instances": {"1g.10gb": 7}},
        {"model": "H100-SXM5-80GB", "gpu_instances": {"7g.80gb": 1}},
        {"model": "NVIDIA L40S", "mig_enabled": False},
    ]
    configs = ml.validate(entries, host)
    assert [(c.index, c.model, c.entry, c.mig_capable, len(c.gpu_instances)) for c in configs] == [
        (0, "A100-SXM4-40GB", 0, True, 4), (1, "A100-SXM4-80GB", 1, True, 7), (2, "H100-SXM5-80GB", 2, True, 1),
        (3, "NVIDIA L40S", 3, False, 0)]


def test_devices_all_skips_gpu_that_is_not_mig_capable() -> None:
    host = [*gpus(A100), {"index": 1, "name": "NVIDIA L40S", "mig_capable": False}]
    configs = ml.validate(layout({"7g.80gb": 1}), host)
    assert [(c.index, c.mig_enabled, c.mig_capable) for c in configs] == [(0, True, True), (1, False, False)]


def test_mig_disabled_needs_no_profile_table() -> None:
    configs = ml.validate([{"devices": "all", "mig_enabled": False}], [{"index": 0, "name": "NVIDIA Z100"}])
    assert configs[0].to_dict() == {"index": 0, "model": "NVIDIA Z100", "mig_enabled": False, "entry": 0,
                                    "mig_capable": True, "mode_change_requires_reset": True, "gpu_instances": [],
                                    "profile_names": {}}


def test_unmatched_ignore_leaves_gpu_out() -> None:
    configs = ml.validate([{"devices": [1], "mig_enabled": False}], gpus(A100, 2), unmatched="ignore")
    assert [c.index for c in configs] == [1]


def test_subsystem_filter_must_match_all_four_ids() -> None:
    host = [{"index": 0, "pci_device_id": "0x20B010DE", "pci_subsystem_id": "0x134F10DE"},
            {"index": 1, "pci_device_id": "0x20B010DE", "pci_subsystem_id": "0x145F10DE"}]
    entries = [{"device_filter": "0x20B010DE:0x134F10DE", "mig_enabled": False},
               {"device_filter": "0x20B010DE:0x145F10DE", "gpu_instances": {"7g.40gb": 1}}]
    configs = ml.validate(entries, host)
    assert [(c.index, c.entry) for c in configs] == [(0, 0), (1, 1)]


def test_round_trip_to_dict() -> None:
    config = ml.validate(layout({"3g.40gb": 1}, compute_instances={"3g.40gb": ["1c.3g.40gb"]}), gpus(A100))[0]
    assert ml.GpuConfig.from_dict(config.to_dict()) == config
