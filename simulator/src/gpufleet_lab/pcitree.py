"""A fake PCI sysfs tree for a simulated host, so driver-less GPU detection from PCI works unchanged.

For every GPU of a host's state document (and the NVSwitch bridges of NVSwitch presets) one directory named
by its sysfs bus id holds ``vendor``, ``device``, ``class``, ``subsystem_vendor``, ``subsystem_device``,
``revision``, ``irq``, ``resource`` and a 256-byte ``config`` space, in the formats the kernel writes them, so
that both ``/sys/bus/pci/devices/*/vendor`` readers and ``lspci -nn`` see the simulated hardware. The tree is
bind-mounted read-only over ``/sys/bus/pci/devices`` inside the host.

A state with HCAs (``"rdma"``, gpufleet_sim.infiniband) also places each HCA's PCI function (Mellanox 0x15b3,
class 0x020700) and the PCIe switch it shares with its GPU: a root port (class 0x060400) below a host bridge, the
switch's upstream port and two downstream ports. Then, as in the kernel's tree, the entries of those functions are
links into a hierarchy whose path is the PCIe path (``.devices/pci0000:fe/0000:fe:01.0/0000:fd:00.0/0000:fc:00.0/
0000:18:00.0``; the kernel's links point into ``/sys/devices`` the same way), and ``numa_node`` is the switch's
node, so the PCIe distance between a GPU and a NIC can be read from the tree. The hidden ``.devices`` folder is
skipped by readers that list the folder (pciutils skips names starting with a dot; they have no ``vendor``).
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
MELLANOX_VENDOR = 0x15B3
#: PCI class of a PCI-to-PCI bridge (root ports and PCIe switch ports)
BRIDGE_CLASS = 0x060400
#: INFERRED identities of the bridges (no transcript of our own): an Intel root port, a Broadcom PEX switch's ports
ROOT_PORT_ID = (0x8086, 0x352A)
SWITCH_PORT_ID = (0x1000, 0xC030)
HIERARCHY = ".devices"
#: PCI Express capability (ID 0x10) device/port types (PCIe base spec; linux include/uapi/linux/pci_regs.h
#: PCI_EXP_TYPE_ROOT_PORT 4, PCI_EXP_TYPE_UPSTREAM 5, PCI_EXP_TYPE_DOWNSTREAM 6)
ROOT_PORT, UPSTREAM_PORT, DOWNSTREAM_PORT = 4, 5, 6
#: ACS extended capability (PCI_EXT_CAP_ID_ACS 0x0D; capability register at +4, control at +6; bits SV 0x01, TB 0x02,
#: RR 0x04, CR 0x08, UF 0x10, EC 0x20, DT 0x40). What each kind of port offers is INFERRED (no lspci transcript of
#: our own): a root port SV TB RR CR UF, a PCIe switch's downstream port all seven; the upstream port has none.
ACS_CAP = {ROOT_PORT: 0x001F, DOWNSTREAM_PORT: 0x007F}
EXTENDED_CONFIG = 4096


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


def bridge_config_space(vendor: int, device: int, port_type: int, buses: tuple[int, int, int],
                        acs_ctl: int = 0) -> bytes:
    """A PCIe bridge's 4096-byte configuration space: a type-1 header (``buses``: primary, secondary, subordinate),
    a PCI Express capability at 0x40 naming ``port_type``, and, for the ports that have one (:data:`ACS_CAP`), the
    ACS extended capability at 0x100 with control ``acs_ctl`` - what ``lspci -vvv`` shows as ACSCap/ACSCtl and
    ``setpci ECAP_ACS+6.w`` reads and writes."""
    body = bytearray(config_space(vendor, device, BRIDGE_CLASS, 0, 0, revision=0) + bytes(EXTENDED_CONFIG - 256))
    body[0x0E] = 0x01  # header type 1: PCI-to-PCI bridge
    body[0x18:0x1B] = bytes(buses)
    body[0x2C:0x30] = bytes(4)  # a type-1 header has no subsystem ids there
    body[0x34] = 0x40
    struct.pack_into("<BBH", body, 0x40, 0x10, 0x00, 0x0002 | (port_type << 4))  # PCIe capability, version 2
    if port_type in ACS_CAP:
        struct.pack_into("<IHH", body, 0x100, 0x0D | (1 << 16), ACS_CAP[port_type], acs_ctl & ACS_CAP[port_type])
    return bytes(body)


def device_files(vendor: int, device: int, pci_class: int, subsystem_vendor: int,
                 subsystem_device: int, revision: int = 0xA1, numa_node: int = -1) -> dict[str, bytes]:
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
        "numa_node": f"{numa_node}\n".encode(),
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
    _add_rdma(state, tree)
    return dict(sorted(tree.items()))


def _add_rdma(state: Mapping[str, Any], tree: dict[str, dict[str, bytes]]) -> None:
    """Add the HCAs and the PCIe switches they share with GPUs; GPUs below a switch get its NUMA node."""
    rdma = state.get("rdma") or {}
    for switch in rdma.get("switches", []):
        numa = int(switch.get("numa_node", -1))
        root, up, down = (int(switch[k]) for k in ("root_bus", "upstream_bus", "downstream_bus"))
        acs = int(switch.get("acs_ctl", 0))  # 0: ACS off, as a GPU node tuned for peer-to-peer has it
        # secondary: the bus right below; subordinate: the highest bus below. The GPUs keep their presets' buses,
        # which a real enumeration would have put inside the range: a simulator's layout, read by path, not range
        below = [int(bus_id.split(":")[1], 16) for bus_id in switch["devices"]]
        last = max([up, down, *below])
        bridges = [(f"0000:{root:02x}:01.0", ROOT_PORT_ID, ROOT_PORT, (root, up, last)),
                   (f"0000:{up:02x}:00.0", SWITCH_PORT_ID, UPSTREAM_PORT, (up, down, max([down, *below])))]
        bridges += [(f"0000:{down:02x}:{slot:02x}.0", SWITCH_PORT_ID, DOWNSTREAM_PORT, (down, bus, bus))
                    for slot, bus in enumerate(below)]
        for bus_id, ident, port_type, buses in bridges:
            files = device_files(*ident, BRIDGE_CLASS, *ident, numa_node=numa)
            files["config"] = bridge_config_space(*ident, port_type, buses, acs)
            tree[bus_id] = files
        for bus_id in switch["devices"]:
            if bus_id in tree:
                tree[bus_id]["numa_node"] = f"{numa}\n".encode()
    for hca in rdma.get("hcas", []):
        device, subsystem = int(hca.get("device_id", 0x1021)), int(hca.get("subsystem_id", 0))
        tree[str(hca["pci_bus_id"])] = device_files(MELLANOX_VENDOR, device, 0x020700, MELLANOX_VENDOR, subsystem,
                                                    revision=0, numa_node=int(hca.get("numa_node", -1)))


def pci_paths(state: Mapping[str, Any]) -> dict[str, str]:
    """Return bus id -> its path in the hierarchy for the functions below a PCIe switch (empty without HCAs).

    ``pci0000:RR/0000:RR:01.0/0000:UU:00.0/0000:DD:0S.0/<bus id>``: host bridge, root port, upstream port,
    downstream port ``S`` (the switch's ``devices`` in order), the function.
    """
    paths: dict[str, str] = {}
    for switch in (state.get("rdma") or {}).get("switches", []):
        root, up, down = (int(switch[k]) for k in ("root_bus", "upstream_bus", "downstream_bus"))
        base = [f"pci0000:{root:02x}", f"0000:{root:02x}:01.0", f"0000:{up:02x}:00.0"]
        paths[base[1]] = "/".join(base[:2])
        paths[base[2]] = "/".join(base)
        for slot, bus_id in enumerate(switch["devices"]):
            port = f"0000:{down:02x}:{slot:02x}.0"
            paths[port] = "/".join([*base, port])
            paths[bus_id] = "/".join([*base, port, bus_id])
    return paths


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        for item in path.iterdir():
            _remove(item)
        path.chmod(0o755)
        path.rmdir()


def write_pci_tree(state: Mapping[str, Any], dest: Path) -> list[str]:
    """Write :func:`pci_tree` under ``dest`` (replacing what was there); return the bus ids written."""
    tree = pci_tree(state)
    paths = pci_paths(state)
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)
    for old in dest.iterdir():
        if old.name not in tree or old.is_symlink() != (old.name in paths) or old.name == HIERARCHY:
            _remove(old)
    for bus_id, files in tree.items():
        if bus_id in paths:
            folder = dest / HIERARCHY / paths[bus_id]
            folder.mkdir(parents=True, exist_ok=True)
            link = dest / bus_id
            target = f"{HIERARCHY}/{paths[bus_id]}"
            if link.is_symlink() and str(link.readlink()) != target:
                link.unlink()  # the device moved (a fault placed it elsewhere in the hierarchy)
            if not link.is_symlink():
                link.symlink_to(target)
        else:
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
