"""gpufleet's MIG profile table (plugins/module_utils/mig_profiles.py) against NVIDIA's published figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_profiles as mp  # noqa: E402

# (model, profile, NVML enum, profile id, compute slices, memory slices, instances, starts)
# Source: MIG User Guide "Supported MIG Profiles" tables + `nvidia-smi mig -lgip` / `-lgipp` transcripts
# (A100-SXM4-40GB in the guide; A100 80GB, H100, A30 transcripts), research file section 3.1-3.3.
PROFILE_TABLE = [
    ("A100-SXM4-40GB", "1g.5gb", 0, 19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    ("A100-SXM4-40GB", "1g.5gb+me", 7, 20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    ("A100-SXM4-40GB", "1g.10gb", 9, 15, 1, 2, 4, (0, 2, 4, 6)),
    ("A100-SXM4-40GB", "2g.10gb", 1, 14, 2, 2, 3, (0, 2, 4)),
    ("A100-SXM4-40GB", "3g.20gb", 2, 9, 3, 4, 2, (0, 4)),
    ("A100-SXM4-40GB", "4g.20gb", 3, 5, 4, 4, 1, (0,)),
    ("A100-SXM4-40GB", "7g.40gb", 4, 0, 7, 8, 1, (0,)),
    ("A100-SXM4-80GB", "1g.10gb", 0, 19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    ("A100-SXM4-80GB", "1g.20gb", 9, 15, 1, 2, 4, (0, 2, 4, 6)),
    ("A100-SXM4-80GB", "3g.40gb", 2, 9, 3, 4, 2, (0, 4)),
    ("A100-SXM4-80GB", "7g.80gb", 4, 0, 7, 8, 1, (0,)),
    ("A30-24GB", "1g.6gb", 0, 14, 1, 1, 4, (0, 1, 2, 3)),
    ("A30-24GB", "1g.6gb+me", 7, 21, 1, 1, 1, (0, 1, 2, 3)),
    ("A30-24GB", "2g.12gb", 1, 5, 2, 2, 2, (0, 2)),
    ("A30-24GB", "2g.12gb+me", 8, 6, 2, 2, 1, (0, 2)),
    ("A30-24GB", "4g.24gb", 3, 0, 4, 4, 1, (0,)),
    ("H100-SXM5-80GB", "1g.10gb", 0, 19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    ("H100-SXM5-80GB", "1g.10gb+me", 7, 20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    ("H100-SXM5-80GB", "1g.20gb", 9, 15, 1, 2, 4, (0, 2, 4, 6)),
    ("H100-SXM5-80GB", "2g.20gb", 1, 14, 2, 2, 3, (0, 2, 4)),
    ("H100-SXM5-80GB", "4g.40gb", 3, 5, 4, 4, 1, (0,)),
    ("H200-141GB", "1g.18gb", 0, 19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    ("H200-141GB", "1g.35gb", 9, 15, 1, 2, 4, (0, 2, 4, 6)),
    ("H200-141GB", "2g.35gb", 1, 14, 2, 2, 3, (0, 2, 4)),
    ("H200-141GB", "3g.71gb", 2, 9, 3, 4, 2, (0, 4)),
    ("H200-141GB", "7g.141gb", 4, 0, 7, 8, 1, (0,)),
]


@pytest.mark.parametrize(("model", "name", "enum", "pid", "cslices", "mslices", "count", "starts"), PROFILE_TABLE)
def test_profile_table(model: str, name: str, enum: int, pid: int, cslices: int, mslices: int, count: int,
                       starts: tuple[int, ...]) -> None:
    profile = mp.get_model(model).profile(name)
    assert profile is not None
    assert (profile.nvml_enum, profile.profile_id, profile.compute_slices, profile.memory_slices,
            profile.instance_count, profile.starts) == (enum, pid, cslices, mslices, count, starts)
    assert profile.placements == [(s, mslices) for s in starts]


@pytest.mark.parametrize(("model", "slots", "compute", "reset", "names"), [
    # Sources: MIG User Guide (8 memory slices / 7 compute slices; A30 4/4); "GPU Reset on Hopper+ GPUs".
    ("A100-SXM4-40GB", 8, 7, True, ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]),
    ("A100-SXM4-80GB", 8, 7, True,
     ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("A30-24GB", 4, 4, True, ["1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"]),
    ("H100-SXM5-80GB", 8, 7, False,
     ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("H200-141GB", 8, 7, False,
     ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]),
])
def test_model_shape(model: str, slots: int, compute: int, reset: bool, names: list[str]) -> None:
    gpu = mp.get_model(model)
    assert (gpu.memory_slots, gpu.compute_slices, gpu.mode_change_requires_reset) == (slots, compute, reset)
    assert gpu.profile_names == names


@pytest.mark.parametrize("model", [m.name for m in mp.MODELS])
def test_names_follow_nvidia_rounding(model: str) -> None:
    """The GB in every name is go-nvlib's getMigMemorySizeGB of the profile's memory (names derive from memory)."""
    gpu = mp.get_model(model)
    for profile in gpu.gi_profiles:
        gb = int(profile.name.split(".")[1].split("gb")[0])
        assert mp.mig_memory_gb(gpu.memory_mib, profile.memory_mib) == gb, profile.name


@pytest.mark.parametrize(("total_mib", "profile_mib", "expected"), [
    (184320, 23040, 23),   # B200-like 1/8 of 180 GB = 22.5 -> 23 (Go rounds half away from zero)
    (143771, 65536, 71),   # H200 4/8 * 141 = 70.5 -> 71
    (40536, 4864, 5),      # A100-40GB 1g.5gb
])
def test_mig_memory_gb_rounds_half_away_from_zero(total_mib: int, profile_mib: int, expected: int) -> None:
    assert mp.mig_memory_gb(total_mib, profile_mib) == expected


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"model": "A100-SXM4-40GB"}, "A100-SXM4-40GB"),
    ({"model": "a100-sxm4-80gb"}, "A100-SXM4-80GB"),
    ({"pci_device_id": 0x20B010DE}, "A100-SXM4-40GB"),
    ({"pci_device_id": "0x20B210DE"}, "A100-SXM4-80GB"),
    ({"pci_device_id": "20b710de"}, "A30-24GB"),
    ({"pci_device_id": 590352606}, "H100-SXM5-80GB"),       # 0x233010DE as a plain int (NVML pciDeviceId)
    ({"name": "NVIDIA H100 80GB HBM3"}, "H100-SXM5-80GB"),
    ({"name": "NVIDIA A30"}, "A30-24GB"),
    ({"name": "NVIDIA H200"}, "H200-141GB"),
    ({"model": "Tesla T4", "pci_device_id": "0x233510DE"}, "H200-141GB"),
    ({"model": "Tesla T4", "name": "NVIDIA A100-SXM4-40GB"}, "A100-SXM4-40GB"),
])
def test_find_model(kwargs: dict[str, object], expected: str) -> None:
    found = mp.find_model(**kwargs)  # type: ignore[arg-type]
    assert found is not None
    assert found.name == expected


def test_get_model_unknown_message() -> None:
    with pytest.raises(mp.UnknownModelError) as err:
        mp.get_model(model="Tesla T4", pci_device_id=0x1EB810DE)
    assert str(err.value) == ("unknown GPU model 'Tesla T4' (pci_device_id 0x1EB810DE); known: A100-PCIE-40GB, "
                              "A100-PCIE-80GB, A100-SXM4-40GB, A100-SXM4-80GB, A30-24GB, A800-PCIE-40GB, "
                              "A800-PCIE-80GB, A800-SXM4-80GB, B200-180GB, B300-288GB, GB200-186GB, GH200-144GB, "
                              "GH200-96GB, H100-NVL-94GB, H100-PCIE-80GB, H100-SXM5-80GB, H20-96GB, H200-141GB, "
                              "H200-NVL-141GB, H800-80GB, H800-PCIE-80GB, RTX-PRO-6000-96GB")


@pytest.mark.parametrize(("text", "name", "gi_name", "c", "g"), [
    ("3g.40gb", "3g.40gb", "3g.40gb", 3, 3),
    ("1c.3g.40gb", "1c.3g.40gb", "3g.40gb", 1, 3),
    ("3c.3g.40gb", "3g.40gb", "3g.40gb", 3, 3),        # a CI filling its GI carries the GI's name
    ("1g.10gb+me", "1g.10gb+me", "1g.10gb+me", 1, 1),
    ("1g.24gb-me", "1g.24gb-me", "1g.24gb-me", 1, 1),
    ("1g.24gb+me.all", "1g.24gb+me.all", "1g.24gb+me.all", 1, 1),
])
def test_parse_profile_name(text: str, name: str, gi_name: str, c: int, g: int) -> None:
    parsed = mp.parse_profile_name(text)
    assert (parsed.name, parsed.gi_name, parsed.compute_slices, parsed.gi_slices) == (name, gi_name, c, g)


@pytest.mark.parametrize(("text", "message"), [
    ("3g40gb", "malformed MIG profile '3g40gb'; expected [<C>c.]<G>g.<GB>gb[+attr], e.g. 3g.40gb or 1c.3g.40gb"),
    ("4c.3g.40gb", "malformed MIG profile '4c.3g.40gb'; need 1 <= C <= G"),
    ("3g.40gb+", "malformed MIG profile '3g.40gb+'; expected [<C>c.]<G>g.<GB>gb[+attr], e.g. 3g.40gb or 1c.3g.40gb"),
    ("1g.5gb+1me", "malformed MIG profile '1g.5gb+1me'; expected [<C>c.]<G>g.<GB>gb[+attr], e.g. 3g.40gb or "
                   "1c.3g.40gb"),
    ("1g.5gb+me.", "malformed MIG profile '1g.5gb+me.'; attributes must not end with '.'"),
])
def test_parse_profile_name_rejects(text: str, message: str) -> None:
    with pytest.raises(mp.ProfileSyntaxError) as err:
        mp.parse_profile_name(text)
    assert str(err.value) == message


@pytest.mark.parametrize(("model", "gi", "expected"), [
    # go-nvlib VisitMigProfiles heuristic; A100 `-lcip` on a 3g.40gb GI: 1c x3, 2c x1, 3g x1.
    ("A100-SXM4-80GB", "3g.40gb", [("1c.3g.40gb", 0, 3), ("2c.3g.40gb", 1, 1), ("3g.40gb", 2, 1)]),
    ("A100-SXM4-80GB", "7g.80gb", [("1c.7g.80gb", 0, 7), ("2c.7g.80gb", 1, 3), ("3c.7g.80gb", 2, 2),
                                   ("4c.7g.80gb", 3, 1), ("7g.80gb", 4, 1)]),
    ("A100-SXM4-40GB", "4g.20gb", [("1c.4g.20gb", 0, 4), ("2c.4g.20gb", 1, 2), ("4g.20gb", 3, 1)]),
    ("A30-24GB", "2g.12gb", [("1c.2g.12gb", 0, 2), ("2g.12gb", 1, 1)]),
    ("H100-SXM5-80GB", "1g.10gb", [("1g.10gb", 0, 1)]),
])
def test_ci_profiles(model: str, gi: str, expected: list[tuple[str, int, int]]) -> None:
    gpu = mp.get_model(model)
    profile = gpu.profile(gi)
    assert profile is not None
    assert [(c.name, c.profile_id, c.instance_count) for c in gpu.ci_profiles(profile)] == expected


@pytest.mark.parametrize(("gi", "starts"), [
    # The simulator's CI placement table (simulator/src/gpufleet_sim/models/*.json); unverified on hardware.
    ("7g.80gb", [(0, 1, 2, 3, 4, 5, 6), (0, 2, 4), (0, 4), (0,), (0,)]),
    ("4g.40gb", [(0, 1, 2, 3), (0, 2), (0,)]),
    ("3g.40gb", [(0, 1, 2), (0,), (0,)]),
    ("2g.20gb", [(0, 1), (0,)]),
])
def test_ci_placements(gi: str, starts: list[tuple[int, ...]]) -> None:
    gpu = mp.get_model("A100-SXM4-80GB")
    profile = gpu.profile(gi)
    assert profile is not None
    assert [c.starts for c in gpu.ci_profiles(profile)] == starts


@pytest.mark.parametrize(("gi", "cis", "expected"), [
    ("7g.80gb", [4, 3], [0, 4]),
    ("7g.80gb", [3, 2, 2], [4, 0, 2]),          # 3c at 0 would block both 2c starts 0 and 2
    ("7g.80gb", [4, 4], None),
    ("4g.40gb", [2, 1, 1], [0, 2, 3]),
    ("3g.40gb", [2, 1], [0, 2]),
])
def test_pack_compute_instances(gi: str, cis: list[int], expected: list[int] | None) -> None:
    gpu = mp.get_model("A100-SXM4-80GB")
    profile = gpu.profile(gi)
    assert profile is not None
    by_slices = {c.compute_slices: c for c in gpu.ci_profiles(profile)}
    assert gpu.pack_compute_instances(profile, [by_slices[c] for c in cis]) == expected


@pytest.mark.parametrize(("value", "expected"), [(0x20B010DE, "0x20B010DE"), (0x233510DE, "0x233510DE")])
def test_format_pci_id(value: int, expected: str) -> None:
    assert mp.format_pci_id(value) == expected
    assert mp.parse_pci_id(expected) == value


def test_parse_pci_id_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="PCI device id 'zz' is not hexadecimal like 0x20B010DE"):
        mp.parse_pci_id("zz")
