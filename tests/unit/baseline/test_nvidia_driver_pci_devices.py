"""gpufleet.nvidia.pci_devices: GPUs and NVSwitches from a PCI sysfs tree, with no driver."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _load_module():
    spec = importlib.util.spec_from_file_location("pci_devices", REPO / "plugins" / "modules" / "pci_devices.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


pci = _load_module()


def _function(root: Path, bus_id: str, vendor: str, device: str, pci_class: str, sub: bool = True) -> None:
    folder = root / bus_id
    folder.mkdir(parents=True)
    files = {"vendor": vendor, "device": device, "class": pci_class}
    if sub:
        files |= {"subsystem_vendor": "0x10de", "subsystem_device": "0x16c1"}
    for name, value in files.items():
        (folder / name).write_text(value + "\n", encoding="ascii")


@pytest.mark.parametrize(
    ("pci_class", "kind"),
    [(0x030200, "gpu"), (0x030000, "gpu"), (0x068000, "nvswitch"), (0x040300, "other"), (0x0C0330, "other"),
     (0x030100, "other")],
)
def test_classify(pci_class: int, kind: str) -> None:
    assert pci.classify(pci_class) == kind


@pytest.mark.parametrize(("text", "value"), [("0x10de\n", 0x10DE), ("0x030200", 0x030200), (" 0X22a3 \n", 0x22A3)])
def test_parse_hex(text: str, value: int) -> None:
    assert pci.parse_hex(text) == value


@pytest.mark.parametrize("text", ["10de", "", "0xzz"])
def test_parse_hex_rejects(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message is int()'s or ours
        pci.parse_hex(text)


def test_scan_mixed_tree(tmp_path: Path) -> None:
    _function(tmp_path, "0000:18:00.0", "0x10de", "0x2330", "0x030200")
    _function(tmp_path, "0000:05:00.0", "0x10de", "0x22a3", "0x068000")
    _function(tmp_path, "0000:18:00.1", "0x10de", "0x22ba", "0x040300", sub=False)
    _function(tmp_path, "0000:00:1f.0", "0x8086", "0x1234", "0x030000")
    (tmp_path / "0000:00:00.0").mkdir()  # an entry without attributes
    result = pci.scan(str(tmp_path))
    assert result["gpu_count"] == 1
    assert result["nvswitch_count"] == 1
    assert [d["bus_id"] for d in result["devices"]] == ["0000:05:00.0", "0000:18:00.0", "0000:18:00.1"]
    assert result["gpus"] == [{
        "bus_id": "0000:18:00.0", "vendor_id": "0x10de", "device_id": "0x2330", "pci_device_id": "0x233010DE",
        "class": "0x030200", "subsystem_vendor_id": "0x10de", "subsystem_device_id": "0x16c1", "kind": "gpu",
    }]
    assert result["nvswitches"][0]["device_id"] == "0x22a3"
    assert result["devices"][2]["subsystem_vendor_id"] is None
    assert result["sysfs_root"] == str(tmp_path)


def test_scan_of_the_lab_tree_matches_the_preset(tmp_path: Path) -> None:
    """The lab's fake PCI tree (what the test hosts bind-mount) is read the way the state document says."""
    sys.path.insert(0, str(REPO / "src"))
    try:
        from gpufleet_lab.pcitree import write_pci_tree
    finally:
        sys.path.remove(str(REPO / "src"))
    state = {"gpus": [{"index": i, "architecture": 9,
                       "pci": {"bus_id": f"00000000:{0x18 + i:02X}:00.0", "pci_device_id": 0x233010DE}}
                      for i in range(8)],
             "nvswitch": {"count": 4}}
    write_pci_tree(state, tmp_path)
    result = pci.scan(str(tmp_path))
    assert (result["gpu_count"], result["nvswitch_count"]) == (8, 4)
    assert {g["pci_device_id"] for g in result["gpus"]} == {"0x233010DE"}


def test_scan_missing_root(tmp_path: Path) -> None:
    with pytest.raises(pci.PciReadError, match=r"does not exist or is not a directory; point sysfs_root at"):
        pci.scan(str(tmp_path / "nope"))


def test_scan_broken_nvidia_entry(tmp_path: Path) -> None:
    _function(tmp_path, "0000:18:00.0", "0x10de", "garbage", "0x030200")
    with pytest.raises(pci.PciReadError, match=r"cannot read PCI function .*0000:18:00.0: not a hexadecimal"):
        pci.scan(str(tmp_path))
