"""A fake PCI sysfs tree for a simulated host, so driver-less GPU detection from PCI works unchanged.

For every GPU of a host's state document (and the NVSwitch bridges of NVSwitch presets) one directory named
by its sysfs bus id holds ``vendor``, ``device``, ``class``, ``subsystem_vendor``, ``subsystem_device``,
``revision``, ``irq``, ``resource`` and a 256-byte ``config`` space, in the formats the kernel writes them, so
that both ``/sys/bus/pci/devices/*/vendor`` readers and ``lspci -nn`` see the simulated hardware. The tree is
bind-mounted read-only over ``/sys/bus/pci/devices`` inside the host.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NVIDIA_VENDOR = 0x10DE
#: PCI class of a data-centre GPU: display controller / 3D controller.
GPU_CLASS = 0x030200
#: PCI class of an NVSwitch: bridge / other.
NVSWITCH_CLASS = 0x068000
#: NVSwitch PCI device ids by GPU architecture (nvmlDeviceArchitecture_t): Ampere gen-2, Hopper gen-3.
NVSWITCH_DEVICE_BY_ARCH: dict[int, int] = {7: 0x1AF1, 9: 0x22A3}
NVSWITCH_DEFAULT_DEVICE = 0x22A3
#: Buses tried, in order, for NVSwitch bridges (the first ones a GPU of the preset does not use).
NVSWITCH_FIRST_BUS = 0x05
RESOURCE_LINES = 17


class PciTreeError(ValueError):
    """The state document cannot be turned into a PCI tree; the message names the GPU and field."""


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """Turn NVML's ``00000000:18:00.0`` into sysfs's ``0000:18:00.0`` (lower case)."""
    parts = nvml_bus_id.strip().lower().split(":")
    if len(parts) != 3 or "." not in parts[2]:
        raise PciTreeError(f"bad PCI bus id {nvml_bus_id!r}: expected DOMAIN:BUS:DEVICE.FUNCTION")
    domain = int(parts[0], 16)
    return f"{domain:04x}:{parts[1]}:{parts[2]}"


def config_space(vendor: int, device: int, pci_class: int, subsystem_vendor: int, subsystem_device: int,
                 revision: int = 0xA1) -> bytes:
    """Return a 256-byte type-0 PCI configuration space header with the given identity."""
    head = struct.pack("<HHHHB3sBBBB", vendor, device, 0x0006, 0x0010, revision,
                       pci_class.to_bytes(3, "little"), 0, 0, 0, 0)
    body = bytearray(256)
    body[: len(head)] = head
    body[0x2C:0x30] = struct.pack("<HH", subsystem_vendor, subsystem_device)
    return bytes(body)


def device_files(vendor: int, device: int, pci_class: int, subsystem_vendor: int,
                 subsystem_device: int, revision: int = 0xA1) -> dict[str, bytes]:
    """Return the sysfs attribute files of one PCI function, name -> content."""
    zero = "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
    return {
        "vendor": f"0x{vendor:04x}\n".encode(),
        "device": f"0x{device:04x}\n".encode(),
        "class": f"0x{pci_class:06x}\n".encode(),
        "subsystem_vendor": f"0x{subsystem_vendor:04x}\n".encode(),
        "subsystem_device": f"0x{subsystem_device:04x}\n".encode(),
        "revision": f"0x{revision:02x}\n".encode(),
        "irq": b"0\n",
        "numa_node": b"-1\n",
        "enable": b"1\n",
        "resource": (zero * RESOURCE_LINES).encode(),
        "config": config_space(vendor, device, pci_class, subsystem_vendor, subsystem_device, revision),
    }


def _gpu_entry(gpu: Mapping[str, Any]) -> tuple[str, dict[str, bytes]]:
    index = gpu.get("index", "?")
    pci = gpu.get("pci")
    if not isinstance(pci, Mapping) or "bus_id" not in pci or "pci_device_id" not in pci:
        raise PciTreeError(f"GPU {index}: state has no pci.bus_id / pci.pci_device_id")
    device_id = int(pci["pci_device_id"])
    subsystem_id = int(pci.get("pci_subsystem_id", device_id))
    files = device_files(
        vendor=device_id & 0xFFFF, device=device_id >> 16, pci_class=int(pci.get("class", GPU_CLASS)),
        subsystem_vendor=subsystem_id & 0xFFFF, subsystem_device=subsystem_id >> 16,
    )
    return sysfs_bus_id(str(pci["bus_id"])), files


def pci_tree(state: Mapping[str, Any]) -> dict[str, dict[str, bytes]]:
    """Return the PCI functions of a simulated host: sysfs bus id -> attribute files.

    GPUs come from ``state["gpus"]``; ``state["nvswitch"]["count"]`` NVSwitch bridges (class 0x068000) are
    placed on the first buses, from 0x05 up, that no GPU uses.
    """
    tree: dict[str, dict[str, bytes]] = {}
    for gpu in state.get("gpus", []):
        bus_id, files = _gpu_entry(gpu)
        if bus_id in tree:
            raise PciTreeError(f"GPU {gpu.get('index', '?')}: PCI bus id {bus_id} is used twice")
        tree[bus_id] = files
    nvswitch = state.get("nvswitch") or {}
    count = int(nvswitch.get("count", 0))
    if count:
        archs = {int(g.get("architecture", 0)) for g in state.get("gpus", [])}
        device = next((NVSWITCH_DEVICE_BY_ARCH[a] for a in sorted(archs) if a in NVSWITCH_DEVICE_BY_ARCH),
                      NVSWITCH_DEFAULT_DEVICE)
        used_buses = {int(bus_id.split(":")[1], 16) for bus_id in tree}
        bus = NVSWITCH_FIRST_BUS
        for _ in range(count):
            while bus in used_buses:
                bus += 1
            if bus > 0xFF:
                raise PciTreeError(f"no free PCI bus left for {count} NVSwitch bridges")
            tree[f"0000:{bus:02x}:00.0"] = device_files(NVIDIA_VENDOR, device, NVSWITCH_CLASS, NVIDIA_VENDOR, 0x1796)
            used_buses.add(bus)
    return dict(sorted(tree.items()))


def write_pci_tree(state: Mapping[str, Any], dest: Path) -> list[str]:
    """Write :func:`pci_tree` under ``dest`` (replacing what was there); return the bus ids written."""
    tree = pci_tree(state)
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)
    for old in dest.iterdir():
        if old.name not in tree and old.is_dir():
            for item in old.iterdir():
                item.unlink()
            old.rmdir()
    for bus_id, files in tree.items():
        folder = dest / bus_id
        folder.mkdir(exist_ok=True)
        folder.chmod(0o755)
        for name, content in files.items():
            path = folder / name
            if path.exists():
                path.chmod(0o644)
            path.write_bytes(content)
            path.chmod(0o444)
    return list(tree)
