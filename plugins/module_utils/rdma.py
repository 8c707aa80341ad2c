# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""RDMA facts from sysfs: HCA ports as the kernel shows them and the PCIe distance between GPUs and NICs.

Pure Python (standard library), shared by the ``rdma_facts`` and ``gpu_health`` modules. Everything is read
from files the kernel writes:

- ``/sys/class/infiniband/<hca>/ports/<n>/{state,phys_state,rate,link_layer,lid,sm_lid,counters/*}``
  (drivers/infiniband/core/sysfs.c: ``state`` "4: ACTIVE", ``phys_state`` "5: LinkUp", ``rate``
  "400 Gb/sec (4X NDR)", counters decimal), and ``<hca>/device``, the link to the HCA's PCI function;
- ``/sys/bus/pci/devices/<bus id>``: links into ``/sys/devices/pci<domain>:<bus>/<bridge>/.../<bus id>`` whose path
  is the PCIe path, and ``numa_node``;
- ``/sys/module/<name>/initstate``: ``live`` while a loadable module is loaded.

The PCIe distance uses ``nvidia-smi topo -m``'s legend (NVIDIA driver documentation)::

    SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
    NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
    PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
    PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
    PIX  = Connection traversing at most a single PCIe bridge

A PCIe switch shows in sysfs as its upstream port and one downstream port per device; the way there and back
through one switch (down port, up port, down port) is counted as the "single PCIe bridge" of PIX, as NCCL's
topology does (a switch is one node), and anything below a shared root port with more than one switch on the way
is PXB.
"""

from __future__ import annotations

import os
import re
from typing import Any

LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
ERROR_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
                  "excessive_buffer_overrun_errors", "local_link_integrity_errors", "port_rcv_remote_physical_errors",
                  "port_xmit_discards")
_RATE = re.compile(r"(?P<gbps>\d+(?:\.\d+)?) Gb/sec \((?P<width>\d+)X(?: (?P<speed>\w+))?\)")
_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")
NVIDIA_VENDOR = "0x10de"
#: PCI_EXT_CAP_ID_ACS (linux include/uapi/linux/pci_regs.h)
ACS_CAP_ID = 0x0D
#: ACS control bits in lspci's words (pci_regs.h PCI_ACS_SV ... PCI_ACS_DT; pciutils ls-ecaps.c)
ACS_BITS = ((0x01, "SrcValid"), (0x02, "TransBlk"), (0x04, "ReqRedir"), (0x08, "CmpltRedir"), (0x10, "UpstreamFwd"),
            (0x20, "EgressCtrl"), (0x40, "DirectTrans"))
#: the bits that redirect (or block) peer-to-peer through a bridge: P2P Request Redirect, P2P Completion Redirect,
#: P2P Egress Control - what linux drivers/pci/p2pdma.c pci_bridge_has_acs_redir tests, and what the kernel's
#: ``pci=disable_acs_redir=`` clears (drivers/pci/pci.c pci_std_disable_acs_redir)
ACS_REDIRECT = 0x04 | 0x08 | 0x20
GPU_CLASSES = ("0x0302", "0x0300")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def parse_numbered(text: str | None) -> tuple[int | None, str | None]:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")``; ``None`` or an unparsable text -> ``(None, None)``."""
    if text is None or ":" not in text:
        return None, None
    number, _, name = text.partition(":")
    try:
        return int(number), name.strip()
    except ValueError:
        return None, None


def parse_rate(text: str | None) -> dict[str, Any]:
    """``"400 Gb/sec (4X NDR)"`` -> ``{"gbps": 400.0, "width": 4, "speed": "NDR"}`` (SDR: speed ``"SDR"``).

    An unparsable or missing text gives ``None`` values.
    """
    match = _RATE.fullmatch(text or "")
    if match is None:
        return {"gbps": None, "width": None, "speed": None}
    return {"gbps": float(match["gbps"]), "width": int(match["width"]), "speed": match["speed"] or "SDR"}


def read_port(port_dir: str) -> dict[str, Any]:
    """One port's facts; a file that cannot be read is ``None`` and named in ``unreadable``."""
    files = {name: _read(os.path.join(port_dir, name))
             for name in ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid")}
    state, state_name = parse_numbered(files["state"])
    phys, phys_name = parse_numbered(files["phys_state"])
    counters: dict[str, int | None] = {}
    counter_dir = os.path.join(port_dir, "counters")
    for name in ERROR_COUNTERS:
        text = _read(os.path.join(counter_dir, name))
        counters[name] = int(text) if text is not None and text.isdigit() else None
    rate = parse_rate(files["rate"])
    unreadable = sorted([k for k, v in files.items() if v is None and k not in ("lid", "sm_lid")]
                        + [f"counters/{k}" for k, v in counters.items() if v is None])
    return {"state": state_name, "state_code": state, "phys_state": phys_name, "phys_state_code": phys,
            "rate": files["rate"], "rate_gbps": rate["gbps"], "width": rate["width"], "speed": rate["speed"],
            "link_layer": files["link_layer"], "lid": files["lid"], "sm_lid": files["sm_lid"],
            "counters": counters, "unreadable": unreadable}


def read_hcas(class_root: str) -> list[dict[str, Any]]:
    """Every HCA under ``class_root`` (``/sys/class/infiniband``) with its ports, sorted by name; [] without."""
    if not os.path.isdir(class_root):
        return []
    hcas = []
    for name in sorted(os.listdir(class_root)):
        folder = os.path.join(class_root, name)
        device = os.path.realpath(os.path.join(folder, "device"))
        ports_dir = os.path.join(folder, "ports")
        ports = []
        if os.path.isdir(ports_dir):
            for port in sorted(os.listdir(ports_dir), key=lambda p: int(p) if p.isdigit() else 0):
                ports.append({"port": int(port) if port.isdigit() else port,
                              **read_port(os.path.join(ports_dir, port))})
        hcas.append({"name": name, "pci_bus_id": os.path.basename(device) if _BDF.fullmatch(os.path.basename(device))
                     else None, "fw_ver": _read(os.path.join(folder, "fw_ver")),
                     "hca_type": _read(os.path.join(folder, "hca_type")),
                     "node_guid": _read(os.path.join(folder, "node_guid")), "ports": ports})
    return hcas


def pcie_chain(path: str) -> list[str]:
    """The PCIe path of a sysfs device path: ``[host bridge, bridge..., device]`` (``[]`` when none is seen).

    ``/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:18:00.0`` -> ``["pci0000:15", "0000:15:01.0",
    "0000:16:00.0", "0000:18:00.0"]``: what follows the last host bridge in the resolved path.
    """
    parts = path.split("/")
    starts = [i for i, part in enumerate(parts) if _HOST_BRIDGE.fullmatch(part)]
    if not starts:
        return []
    chain = parts[starts[-1]:]
    return chain if all(_BDF.fullmatch(p) for p in chain[1:]) and len(chain) > 1 else []


def topo_level(chain_a: list[str], numa_a: int | None, chain_b: list[str], numa_b: int | None) -> str | None:
    """The ``nvidia-smi topo -m`` level between two PCI devices (see the module's description); None: unknown."""
    if not chain_a or not chain_b:
        return None
    if chain_a[0] != chain_b[0]:
        if numa_a is None or numa_b is None or numa_a < 0 or numa_b < 0:
            return None
        return "NODE" if numa_a == numa_b else "SYS"
    common = 0
    for left, right in zip(chain_a[:-1], chain_b[:-1], strict=False):
        if left != right:
            break
        common += 1
    if common <= 1:
        return "PHB"  # only the host bridge is shared
    # bridges below the deepest shared one, on both sides (the devices themselves excluded)
    below = (len(chain_a) - 1 - common) + (len(chain_b) - 1 - common)
    return "PIX" if below <= 2 else "PXB"


def _numa(device_dir: str) -> int | None:
    text = _read(os.path.join(device_dir, "numa_node"))
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def gpu_bus_ids(pci_root: str) -> list[str]:
    """The NVIDIA GPUs under ``pci_root`` (vendor 0x10de, class 0x0302xx / 0x0300xx), in bus order (NVML's)."""
    if not os.path.isdir(pci_root):
        return []
    found = []
    for name in sorted(os.listdir(pci_root)):
        folder = os.path.join(pci_root, name)
        if _read(os.path.join(folder, "vendor")) == NVIDIA_VENDOR and \
                (_read(os.path.join(folder, "class")) or "").startswith(GPU_CLASSES):
            found.append(name)
    return found


def acs_control(config: bytes) -> tuple[int, int] | None:
    """``(capability, control)`` of the ACS extended capability in a configuration space, or None without one.

    The extended capabilities are a list from offset 0x100, each header ``id | version << 16 | next << 20``
    (PCIe base spec; linux include/uapi/linux/pci_regs.h ``PCI_EXT_CAP_ID_ACS`` 0x0D, ``PCI_ACS_CAP`` +4,
    ``PCI_ACS_CTRL`` +6). Raises ValueError for a space too short to hold them (read without root: 64 bytes).
    """
    if len(config) < 0x104:
        raise ValueError(f"{len(config)} bytes of configuration space, no extended capabilities (needs root)")
    offset, seen = 0x100, set()
    while offset >= 0x100 and offset + 8 <= len(config) and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            return (int.from_bytes(config[offset + 4:offset + 6], "little"),
                    int.from_bytes(config[offset + 6:offset + 8], "little"))
        offset = header >> 20
    return None


def acs_flags(control: int) -> str:
    """The control word as ``lspci -vvv`` prints ACSCtl: ``SrcValid+ TransBlk- ReqRedir+ ...``."""
    return " ".join(f"{name}{'+' if control & bit else '-'}" for bit, name in ACS_BITS)


def path_bridges(chain_a: list[str], chain_b: list[str]) -> list[str]:
    """The bridges whose ACS decides whether peer-to-peer between two devices goes straight across: as
    drivers/pci/p2pdma.c walks them (``pci_bridge_has_acs_redir``), each device's upstream bridges up to and including
    the deepest bridge the two share (the host bridge excluded; the devices themselves have no say)."""
    common = 0
    for left, right in zip(chain_a[:-1], chain_b[:-1], strict=False):
        if left != right:
            break
        common += 1
    shared = [chain_a[common - 1]] if common > 1 else []
    return [*chain_a[common:-1], *chain_b[common:-1], *shared]


def read_acs(pci_root: str, bridges: list[str]) -> list[dict[str, Any]]:
    """Per bridge: ``bridge``, ``control`` (None without an ACS capability), ``redirect`` (the bits that send
    peer-to-peer up to the root complex, :data:`ACS_REDIRECT`) and ``error`` (the space could not be read)."""
    out = []
    for bridge in bridges:
        try:
            with open(os.path.join(pci_root, bridge, "config"), "rb") as handle:
                found = acs_control(handle.read())
        except (OSError, ValueError) as exc:
            out.append({"bridge": bridge, "control": None, "redirect": None, "error": str(exc)})
            continue
        control = found[1] if found else None
        out.append({"bridge": bridge, "control": control, "redirect": bool(control & ACS_REDIRECT) if found else False,
                    "error": None})
    return out


def gpu_nic_distances(pci_root: str, hcas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per GPU (bus order), the HCAs sorted by PCIe distance (level order, then name); ``nearest`` the first, with
    the ACS state of the bridges between the GPU and it (``acs``) when it is below the same root port (PIX, PXB)."""
    places = {}
    for name in [*gpu_bus_ids(pci_root), *(h["pci_bus_id"] for h in hcas if h.get("pci_bus_id"))]:
        folder = os.path.join(pci_root, name)
        places[name] = (pcie_chain(os.path.realpath(folder)), _numa(folder))
    buses = {h["name"]: h.get("pci_bus_id") for h in hcas}
    result = []
    for index, gpu in enumerate(gpu_bus_ids(pci_root)):
        nics = []
        for hca in hcas:
            bus = hca.get("pci_bus_id")
            level = topo_level(*places[gpu], *places[bus]) if bus else None
            nics.append({"hca": hca["name"], "level": level})
        nics.sort(key=lambda n: (LEVELS.index(n["level"]) if n["level"] in LEVELS else len(LEVELS), n["hca"]))
        nearest = dict(nics[0]) if nics else None
        if nearest is not None and nearest["level"] in ("PIX", "PXB"):
            nearest["acs"] = read_acs(pci_root, path_bridges(places[gpu][0], places[buses[nearest["hca"]]][0]))
        result.append({"index": index, "pci_bus_id": gpu, "numa_node": places[gpu][1], "nics": nics,
                       "nearest": nearest})
    return result


def module_loaded(sys_module: str, name: str) -> bool | None:
    """Whether kernel module ``name`` is loaded: ``/sys/module/<name>/initstate`` reads ``live``.

    False when its folder or ``initstate`` is missing (not loaded); None when ``sys_module`` itself is missing
    (nothing can be said).
    """
    if not os.path.isdir(sys_module):
        return None
    return _read(os.path.join(sys_module, name, "initstate")) == "live"


def rdma_facts(class_root: str = "/sys/class/infiniband", pci_root: str = "/sys/bus/pci/devices",
               sys_module: str = "/sys/module") -> dict[str, Any]:
    """Everything ``rdma_facts`` returns: HCAs and ports, GPU to NIC distances, nvidia_peermem."""
    hcas = read_hcas(class_root)
    return {"hcas": hcas, "hca_count": len(hcas),
            "port_count": sum(len(h["ports"]) for h in hcas),
            "gpus": gpu_nic_distances(pci_root, hcas) if hcas else [],
            "nvidia_peermem_loaded": module_loaded(sys_module, "nvidia_peermem")}
