"""The fake PCI sysfs tree written for simulated hosts."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from gpufleet_lab.pcitree import (
    GPU_CLASS,
    NVSWITCH_CLASS,
    PciTreeError,
    config_space,
    pci_tree,
    sysfs_bus_id,
    write_pci_tree,
)


def _gpu(index: int, bus: int, device_id: int = 0x233010DE, subsystem_id: int = 0x16C110DE,
         arch: int = 9) -> dict[str, Any]:
    return {"index": index, "architecture": arch,
            "pci": {"bus_id": f"00000000:{bus:02X}:00.0", "pci_device_id": device_id,
                    "pci_subsystem_id": subsystem_id}}


@pytest.mark.parametrize(("nvml", "sysfs"), [
    ("00000000:18:00.0", "0000:18:00.0"),
    ("00000000:AB:00.0", "0000:ab:00.0"),
    ("00000001:04:1F.3", "0001:04:1f.3"),
    (" 00000000:c1:00.0 ", "0000:c1:00.0"),
])
def test_sysfs_bus_id(nvml: str, sysfs: str) -> None:
    assert sysfs_bus_id(nvml) == sysfs


@pytest.mark.parametrize("bad", ["", "18:00.0", "0000:18:00", "a:b:c:d"])
def test_sysfs_bus_id_rejects(bad: str) -> None:
    with pytest.raises(PciTreeError) as err:
        sysfs_bus_id(bad)
    assert str(err.value) == f"bad PCI bus id {bad!r}: expected DOMAIN:BUS:DEVICE.FUNCTION"


@pytest.mark.parametrize(("state", "expected"), [
    ({"gpus": []}, {}),
    ({"gpus": [_gpu(0, 0x18)]}, {"0000:18:00.0": ("0x10de", "0x2330", f"0x{GPU_CLASS:06x}", "0x10de", "0x16c1")}),
    ({"gpus": [_gpu(0, 0x3B, 0x20B510DE, 0x153310DE, 7)]},
     {"0000:3b:00.0": ("0x10de", "0x20b5", "0x030200", "0x10de", "0x1533")}),
])
def test_gpu_identity_files(state: dict[str, Any], expected: dict[str, tuple[str, ...]]) -> None:
    tree = pci_tree(state)
    assert set(tree) == set(expected)
    for bus_id, (vendor, device, klass, sub_vendor, sub_device) in expected.items():
        files = tree[bus_id]
        assert [files[k].decode().strip() for k in ("vendor", "device", "class", "subsystem_vendor",
                                                   "subsystem_device")] == [vendor, device, klass, sub_vendor,
                                                                           sub_device]


@pytest.mark.parametrize(("gpu_buses", "arch", "count", "switch_buses", "device"), [
    ([0x18, 0x2A], 9, 4, [0x05, 0x06, 0x07, 0x08], "0x22a3"),
    ([0x05, 0x07], 7, 3, [0x06, 0x08, 0x09], "0x1af1"),
    ([0x18], 9, 0, [], None),
])
def test_nvswitch_bridges(gpu_buses: list[int], arch: int, count: int, switch_buses: list[int],
                          device: str | None) -> None:
    state = {"gpus": [_gpu(i, b, arch=arch) for i, b in enumerate(gpu_buses)], "nvswitch": {"count": count}}
    tree = pci_tree(state)
    bridges = {k: v for k, v in tree.items() if v["class"].strip() == f"0x{NVSWITCH_CLASS:06x}".encode()}
    assert sorted(bridges) == [f"0000:{b:02x}:00.0" for b in switch_buses]
    for files in bridges.values():
        assert files["device"].decode().strip() == device
    assert len(tree) == len(gpu_buses) + count


def test_duplicate_bus_id_is_refused() -> None:
    with pytest.raises(PciTreeError) as err:
        pci_tree({"gpus": [_gpu(0, 0x18), _gpu(1, 0x18)]})
    assert str(err.value) == "GPU 1: PCI bus id 0000:18:00.0 is used twice"


def test_gpu_without_pci_is_refused() -> None:
    with pytest.raises(PciTreeError, match=r"^GPU 3: state has no pci.bus_id / pci.pci_device_id$"):
        pci_tree({"gpus": [{"index": 3}]})


def test_config_space_header() -> None:
    raw = config_space(0x10DE, 0x2330, 0x030200, 0x10DE, 0x16C1, revision=0xA1)
    assert len(raw) == 256
    assert struct.unpack_from("<HH", raw, 0) == (0x10DE, 0x2330)
    assert raw[8] == 0xA1
    assert int.from_bytes(raw[9:12], "little") == 0x030200
    assert struct.unpack_from("<HH", raw, 0x2C) == (0x10DE, 0x16C1)


def test_write_pci_tree_replaces_stale_devices(tmp_path: Path) -> None:
    dest = tmp_path / "pci"
    write_pci_tree({"gpus": [_gpu(0, 0x18), _gpu(1, 0x2A)]}, dest)
    written = write_pci_tree({"gpus": [_gpu(0, 0x18)]}, dest)
    assert written == ["0000:18:00.0"]
    assert sorted(p.name for p in dest.iterdir()) == ["0000:18:00.0"]
    vendor = dest / "0000:18:00.0" / "vendor"
    assert vendor.read_text() == "0x10de\n"
    assert vendor.stat().st_mode & 0o777 == 0o444
