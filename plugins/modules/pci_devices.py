#!/usr/bin/python
# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Ansible module gpufleet.nvidia.pci_devices: NVIDIA GPUs and NVSwitches from PCI sysfs, before any driver."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pci_devices
short_description: Find NVIDIA GPUs and NVSwitch bridges on the PCI bus, with no driver needed
version_added: "0.1.0"
description:
  - Reads the PCI functions the kernel lists under O(sysfs_root) (C(/sys/bus/pci/devices)) and returns those of
    vendor C(0x10de) (NVIDIA) split by PCI class - GPUs (class C(0x0302xx) 3D controller or C(0x0300xx) VGA
    controller) and NVSwitch bridges (class C(0x0680xx)).
  - Works before any NVIDIA driver is installed or loaded, so a play can decide whether a host needs the driver
    and the fabric manager at all (the same information C(lspci -d 10de:) shows).
  - Read-only; never changes anything on the host. Needs only the Python standard library.
author:
  - gpufleet contributors
options:
  sysfs_root:
    description:
      - The directory that holds one entry per PCI function, named by its bus id (C(0000:18:00.0)), each with
        the C(vendor), C(device), C(class), C(subsystem_vendor) and C(subsystem_device) attribute files.
      - A missing directory is an error (the host has no PCI sysfs, or the path is wrong).
    type: path
    default: /sys/bus/pci/devices
extends_documentation_fragment:
  - gpufleet.nvidia.attributes.read_only
notes:
  - Other NVIDIA functions of a GPU board (its HD-audio or USB controller, class C(0x04xxxx) / C(0x0cxxxx)) are
    listed in RV(devices) but counted neither as GPUs nor as NVSwitches.
  - C(pci_device_id) uses NVML's and mig-parted's spelling C(0xDDDDVVVV) (device id then vendor id, upper-case
    hex), so it can be compared with what M(gpufleet.nvidia.gpu_facts) reports once the driver is loaded.
seealso:
  - module: gpufleet.nvidia.gpu_facts
"""

EXAMPLES = r"""
- name: Find NVIDIA GPUs and NVSwitches on the PCI bus
  gpufleet.nvidia.pci_devices:
  register: __pci

- name: Skip hosts without an NVIDIA GPU
  ansible.builtin.debug:
    msg: "{{ __pci.gpu_count }} GPUs, {{ __pci.nvswitch_count }} NVSwitches"

- name: Read a tree captured elsewhere (tests, a bind-mounted simulation)
  gpufleet.nvidia.pci_devices:
    sysfs_root: /srv/pci-capture/devices
"""

RETURN = r"""
gpus:
  description: NVIDIA GPUs (class C(0x0302xx) or C(0x0300xx)), sorted by bus id.
  returned: always
  type: list
  elements: dict
  contains:
    bus_id: {description: PCI bus id as sysfs names it., type: str, sample: "0000:18:00.0"}
    vendor_id: {description: Vendor id., type: str, sample: "0x10de"}
    device_id: {description: Device id., type: str, sample: "0x2330"}
    pci_device_id: {description: Device and vendor id as NVML spells it (0xDDDDVVVV)., type: str,
                    sample: "0x233010DE"}
    class: {description: PCI class code (base, sub-class, programming interface)., type: str, sample: "0x030200"}
    subsystem_vendor_id: {description: Subsystem vendor id (null when not readable)., type: str, sample: "0x10de"}
    subsystem_device_id: {description: Subsystem device id (null when not readable)., type: str, sample: "0x16c1"}
    kind: {description: "C(gpu), C(nvswitch) or C(other).", type: str, sample: gpu}
nvswitches:
  description: NVSwitch bridges (class C(0x0680xx)), sorted by bus id; same keys as RV(gpus).
  returned: always
  type: list
  elements: dict
devices:
  description: Every NVIDIA PCI function found (GPUs, NVSwitches and others), sorted by bus id.
  returned: always
  type: list
  elements: dict
gpu_count:
  description: Number of GPUs.
  returned: always
  type: int
  sample: 8
nvswitch_count:
  description: Number of NVSwitch bridges.
  returned: always
  type: int
  sample: 4
sysfs_root:
  description: The directory read.
  returned: always
  type: str
  sample: /sys/bus/pci/devices
"""

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule

NVIDIA_VENDOR = 0x10DE
#: PCI base class / sub-class pairs (upper 16 bits of the 24-bit class code).
GPU_CLASSES = frozenset({0x0302, 0x0300})
NVSWITCH_CLASSES = frozenset({0x0680})


class PciReadError(Exception):
    """The PCI sysfs tree cannot be read; the message says what and what to do."""


def parse_hex(text: str) -> int:
    """Parse a sysfs attribute such as ``0x10de\\n``; raise ValueError on anything else."""
    value = text.strip()
    if not value.lower().startswith("0x"):
        raise ValueError(f"not a hexadecimal sysfs value: {value!r}")
    return int(value, 16)


def classify(pci_class: int) -> str:
    """Return ``gpu``, ``nvswitch`` or ``other`` for a 24-bit PCI class code."""
    base_sub = pci_class >> 8
    if base_sub in GPU_CLASSES:
        return "gpu"
    if base_sub in NVSWITCH_CLASSES:
        return "nvswitch"
    return "other"


def describe(bus_id: str, attrs: dict[str, str]) -> dict[str, Any] | None:
    """Describe one PCI function from its attribute texts; None when it is not an NVIDIA function.

    Args:
        bus_id: the sysfs entry name (``0000:18:00.0``).
        attrs: attribute name -> file text; ``vendor``, ``device`` and ``class`` are required, the
            ``subsystem_*`` ones optional.
    """
    vendor = parse_hex(attrs["vendor"])
    if vendor != NVIDIA_VENDOR:
        return None
    device = parse_hex(attrs["device"])
    pci_class = parse_hex(attrs["class"])
    sub_vendor = attrs.get("subsystem_vendor")
    sub_device = attrs.get("subsystem_device")
    return {
        "bus_id": bus_id,
        "vendor_id": f"0x{vendor:04x}",
        "device_id": f"0x{device:04x}",
        "pci_device_id": f"0x{device:04X}{vendor:04X}",
        "class": f"0x{pci_class:06x}",
        "subsystem_vendor_id": f"0x{parse_hex(sub_vendor):04x}" if sub_vendor else None,
        "subsystem_device_id": f"0x{parse_hex(sub_device):04x}" if sub_device else None,
        "kind": classify(pci_class),
    }


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def scan(sysfs_root: str) -> dict[str, Any]:
    """Read every PCI function under ``sysfs_root``; return the module's result keys.

    Raises:
        PciReadError: the directory is missing or an NVIDIA entry has unreadable attributes.
    """
    if not os.path.isdir(sysfs_root):
        raise PciReadError(
            f"{sysfs_root} does not exist or is not a directory; "
            "point sysfs_root at the PCI device directory of the host (normally /sys/bus/pci/devices)")
    devices: list[dict[str, Any]] = []
    for bus_id in sorted(os.listdir(sysfs_root)):
        folder = os.path.join(sysfs_root, bus_id)
        attrs: dict[str, str] = {}
        for name in ("vendor", "device", "class", "subsystem_vendor", "subsystem_device"):
            text = _read(os.path.join(folder, name))
            if text is not None:
                attrs[name] = text
        if "vendor" not in attrs:
            continue
        try:
            if parse_hex(attrs["vendor"]) != NVIDIA_VENDOR:
                continue
            if "device" not in attrs or "class" not in attrs:
                raise ValueError("the device or class attribute is missing")
            entry = describe(bus_id, attrs)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PciReadError(f"cannot read PCI function {folder}: {exc}; check the sysfs tree") from exc
        if entry is not None:
            devices.append(entry)
    gpus = [dev for dev in devices if dev["kind"] == "gpu"]
    nvswitches = [dev for dev in devices if dev["kind"] == "nvswitch"]
    return {
        "devices": devices,
        "gpus": gpus,
        "nvswitches": nvswitches,
        "gpu_count": len(gpus),
        "nvswitch_count": len(nvswitches),
        "sysfs_root": sysfs_root,
    }


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(
        argument_spec={"sysfs_root": {"type": "path", "default": "/sys/bus/pci/devices"}},
        supports_check_mode=True,
    )
    try:
        result = scan(module.params["sysfs_root"])
    except PciReadError as exc:
        module.fail_json(msg=str(exc), sysfs_root=module.params["sysfs_root"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
