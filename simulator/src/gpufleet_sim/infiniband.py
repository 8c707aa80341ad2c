"""Simulated InfiniBand HCAs and the ``nvidia_peermem`` module: the state, its faults, and the files the kernel shows.

A host's state document may hold an ``"rdma"`` object (presets with HCAs: ``8xH100-NVSwitch``,
``8xB200-NVSwitch``; docs/simulator.md, "InfiniBand HCAs and nvidia_peermem")::

    "rdma": {
      "peermem": {"loaded": true},
      "hcas": [{"name": "mlx5_0", "pci_bus_id": "0000:fd:00.0", "gpu": 0, "numa_node": 0, "device_id": 4129,
                "hca_type": "MT4129", "fw_ver": "28.39.1002", "board_id": "MT_0000000838", "hw_rev": "0",
                "node_guid": "946d:ae03:0012:3400",
                "ports": [{"port": 1, "state": 4, "phys_state": 5, "width": 4, "speed": "NDR",
                           "link_layer": "InfiniBand", "lid": 1, "sm_lid": 1, "lmc": 0, "sm_sl": 0,
                           "cap_mask": 2807162952, "counters": {"symbol_error": 0, ...}}]}],
      "switches": [{"root_bus": 254, "upstream_bus": 253, "downstream_bus": 252, "numa_node": 0,
                    "devices": ["0000:18:00.0", "0000:fd:00.0"]}],
      "faults": {"ib-port-down:mlx5_0": {"saved": {...}}}
    }

:func:`render` writes what the kernel would show from it: ``<root>/infiniband/<hca>/...`` (the tree that lab hosts
see at ``/sys/class/infiniband``) and ``<root>/module/`` (``/sys/module``). The formats are the kernel's
(``drivers/infiniband/core/sysfs.c``: ``state`` "%d: %s", ``phys_state`` "%u: %s", ``rate`` "%d%s Gb/sec
(%dX%s)", GUIDs "%04x:%04x:%04x:%04x", ``lid``/``sm_lid`` "0x%x", ``cap_mask`` "0x%08x", counters decimal;
``mlx5_ib``: ``hca_type`` "MT%d" of the PCI device id, ``fw_ver`` "%d.%d.%04d"), so that Debian's unmodified
``ibstat``/``ibstatus`` (infiniband-diags, reading through libibumad) read them. Files are rewritten in place
(never renamed over). ``<root>/module/<name>/initstate`` is ``/sys/module/<name>/initstate`` of the simulated
modules (``mlx5_core``, ``ib_core``, ``ib_uverbs``, ``mlx5_ib``, ``nvidia_peermem``): ``live`` while loaded.

Standard library only: the driver packages ship this file beside ``hardware.py``, whose callers (the tests' fault
injection on a host) change the state and call :func:`render` on ``KERNEL_DIR`` when the host has one.
"""

from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path
from typing import Any, cast

from . import store

State = dict[str, Any]

#: Where a lab host sees the simulated kernel's files read-write (the same folder is mounted read-only at
#: /sys/class/infiniband, and its ``modules`` file bound over /proc/modules, by the lab).
KERNEL_DIR = Path("/var/lib/nvidia-sim/kernel")
MELLANOX_VENDOR = 0x15B3
#: ConnectX-7 (PCI 15b3:1021; mlx5_ib's hca_type "MT4129")
CONNECTX7_DEVICE = 0x1021
#: PCI class of an InfiniBand controller (network controller / InfiniBand), as ConnectX VPI cards in IB mode show
IB_CLASS = 0x020700
#: a ConnectX-7 of an HGX H100 node: firmware and board id as leptonai/gpud's sysfs capture (components/accelerator/
#: nvidia/infiniband/class/testdata/sys-class-infiniband-h100.0) shows them; the subsystem id is INFERRED
CONNECTX7_FW = "28.41.1000"
CONNECTX7_BOARD_ID = "MT_0000000838"
CONNECTX7_SUBSYSTEM = 0x0041
#: Capability mask of a ConnectX-7 CA port as public ``ibstat`` transcripts print it (INFERRED from those)
CA_CAP_MASK = 0xA751E848

#: ib_port_state names, drivers/infiniband/core/sysfs.c state_show
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
#: phys_state names, drivers/infiniband/core/sysfs.c phys_state_to_str
PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp",
               6: "LinkErrorRecovery", 7: "Phy Test"}
#: per-lane rate in units of 0.1 Gb/s and the name rate_show prints (SDR prints no name)
SPEEDS = {"SDR": (25, ""), "DDR": (50, " DDR"), "QDR": (100, " QDR"), "FDR10": (100, " FDR10"),
          "FDR": (140, " FDR"), "EDR": (250, " EDR"), "HDR": (500, " HDR"), "NDR": (1000, " NDR"),
          "XDR": (2000, " XDR")}
#: the per-port PMA counters under ports/N/counters (the error counters the health anchors read come first)
COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
            "excessive_buffer_overrun_errors", "local_link_integrity_errors", "port_rcv_remote_physical_errors",
            "port_rcv_switch_relay_errors", "port_rcv_constraint_errors", "port_xmit_constraint_errors",
            "port_xmit_discards", "VL15_dropped", "port_xmit_wait", "port_rcv_data", "port_xmit_data",
            "port_rcv_packets", "port_xmit_packets", "unicast_rcv_packets", "unicast_xmit_packets",
            "multicast_rcv_packets", "multicast_xmit_packets")
#: the simulated RDMA stack's kernel modules and the modules each depends on (its users' refcnt counts them)
MODULES = (("mlx5_core", ""), ("ib_core", ""), ("ib_uverbs", "ib_core"), ("mlx5_ib", "ib_uverbs,ib_core,mlx5_core"))
PEERMEM = ("nvidia_peermem", "ib_core")
FAULTS = ("ib-port-down", "ib-rate-degraded", "ib-counter", "peermem-unloaded", "nic-wrong-socket", "acs-enabled",
          "ib-link-layer")
#: ACS control an IOMMU-enabled Linux kernel writes on each port that offers the bits (drivers/pci/pci.c
#: pci_std_enable_acs: Source Validation, P2P Request Redirect, P2P Completion Redirect, Upstream Forwarding)
KERNEL_ACS_CTL = 0x0001 | 0x0004 | 0x0008 | 0x0010


class InfinibandError(Exception):
    """An RDMA fault or state names something that does not exist; the message says what."""


# ------------------------------------------------------------------------------------------------ state


def _guid(host_seed: str, index: int) -> str:
    digest = hashlib.sha256(f"gpufleet-sim/{host_seed}/hca/{index}".encode()).digest()
    # a Mellanox OUI (94:6d:ae) in the top 24 bits, as ConnectX GUIDs carry
    value = (0x946DAE << 40) | int.from_bytes(digest[:5], "big")
    text = f"{value:016x}"
    return ":".join(text[i:i + 4] for i in range(0, 16, 4))


def _free_buses(used: set[int], count: int) -> list[int]:
    """``count`` PCI bus numbers no device uses, from 0xfe down (the NVSwitch bridges take the low ones)."""
    buses = [bus for bus in range(0xFE, 0x20, -1) if bus not in used][:count]
    if len(buses) < count:
        raise InfinibandError(f"no {count} free PCI buses left for the HCAs and their PCIe switches")
    return buses


def build_rdma(gpus: list[dict[str, Any]], host_seed: str, speed: str = "NDR", width: int = 4) -> State:
    """Return the ``"rdma"`` object of an HGX-like host: one single-port ConnectX-7 per GPU on the GPU's PCIe switch.

    Each GPU and its HCA sit below the two downstream ports of one PCIe switch, each switch below its own root port
    and host bridge; the first half of the GPUs (and their HCAs) on NUMA node 0, the rest on node 1 (as DGX H100's
    ``nvidia-smi topo -m`` shows GPU i and NIC i at PIX, other NICs of the socket at NODE, the other socket's at
    SYS).
    """
    used = {int(g["pci"]["bus"]) for g in gpus}
    free = _free_buses(used, 4 * len(gpus))
    hcas, switches = [], []
    half = max(1, (len(gpus) + 1) // 2)
    for i, gpu in enumerate(gpus):
        root, upstream, downstream, nic = free[4 * i: 4 * i + 4]
        numa = 0 if i < half else 1
        gpu_bdf = f"{int(gpu['pci']['domain']):04x}:{int(gpu['pci']['bus']):02x}:00.0"
        nic_bdf = f"0000:{nic:02x}:00.0"
        switches.append({"root_bus": root, "upstream_bus": upstream, "downstream_bus": downstream,
                         "numa_node": numa, "devices": [gpu_bdf, nic_bdf]})
        hcas.append({
            "name": f"mlx5_{i}", "pci_bus_id": nic_bdf, "gpu": int(gpu["index"]), "numa_node": numa,
            "device_id": CONNECTX7_DEVICE, "subsystem_id": CONNECTX7_SUBSYSTEM,
            "hca_type": f"MT{CONNECTX7_DEVICE}", "fw_ver": CONNECTX7_FW, "board_id": CONNECTX7_BOARD_ID,
            "hw_rev": "0", "node_guid": _guid(host_seed, i),
            "ports": [{"port": 1, "state": 4, "phys_state": 5, "width": width, "speed": speed,
                       "link_layer": "InfiniBand", "lid": i + 1, "sm_lid": 1, "lmc": 0, "sm_sl": 0,
                       "cap_mask": CA_CAP_MASK, "counters": dict.fromkeys(COUNTERS, 0)}],
        })
    return {"peermem": {"loaded": True}, "hcas": hcas, "switches": switches}


def rate_text(port: dict[str, Any]) -> str:
    """The ``rate`` file: ``"400 Gb/sec (4X NDR)"``, as rate_show prints it (SDR: ``"10 Gb/sec (4X)"``)."""
    lane, name = SPEEDS[str(port["speed"])]
    width = int(port["width"])
    rate = lane * width
    return f"{rate // 10}{'.5' if rate % 10 else ''} Gb/sec ({width}X{name})"


def rate_gbps(port: dict[str, Any]) -> float:
    """The port's rate in Gb/s (what ``ibstat`` prints as ``Rate``)."""
    lane, _ = SPEEDS[str(port["speed"])]
    return lane * int(port["width"]) / 10


# ------------------------------------------------------------------------------------------------ files


def hca_files(hca: dict[str, Any]) -> dict[str, str]:
    """The files of one HCA under /sys/class/infiniband/<name>, relative path -> content (``device`` excluded)."""
    guid = str(hca["node_guid"])
    files = {"node_type": "1: CA\n", "node_guid": guid + "\n", "sys_image_guid": guid + "\n",
             "fw_ver": f"{hca['fw_ver']}\n", "hca_type": f"{hca['hca_type']}\n", "hw_rev": f"{hca['hw_rev']}\n",
             "board_id": f"{hca['board_id']}\n", "node_desc": f"{hca.get('node_desc', hca['name'])}\n"}
    for port in hca["ports"]:
        base = f"ports/{int(port['port'])}"
        state, phys = int(port["state"]), int(port["phys_state"])
        files.update({
            f"{base}/state": f"{state}: {PORT_STATES.get(state, 'UNKNOWN')}\n",
            f"{base}/phys_state": f"{phys}: {PHYS_STATES.get(phys, '<unknown>')}\n",
            f"{base}/rate": rate_text(port) + "\n",
            f"{base}/link_layer": f"{port['link_layer']}\n",
            f"{base}/lid": f"0x{int(port['lid']):x}\n",
            f"{base}/sm_lid": f"0x{int(port['sm_lid']):x}\n",
            f"{base}/lid_mask_count": f"{int(port['lmc'])}\n",
            f"{base}/sm_sl": f"{int(port['sm_sl'])}\n",
            f"{base}/cap_mask": f"0x{int(port['cap_mask']):08x}\n",
            f"{base}/gids/0": "fe80:0000:0000:0000:" + guid + "\n",
            f"{base}/pkeys/0": "0xffff\n",
        })
        for name, value in port["counters"].items():
            files[f"{base}/counters/{name}"] = f"{int(value)}\n"
    return files


def module_files(rdma: State | None) -> dict[str, dict[str, str]]:
    """``/sys/module/<name>`` of the simulated RDMA modules: name -> files (``initstate``, ``refcnt``).

    A loaded module's folder holds ``initstate`` ``live`` (kernel/module/main.c show_initstate); the folder of a
    module that is not loaded is left empty (on a real kernel it is gone; a lab host's mount point cannot go).
    """
    loaded = dict(MODULES)
    if rdma and (rdma.get("peermem") or {}).get("loaded"):
        loaded[PEERMEM[0]] = PEERMEM[1]
    files: dict[str, dict[str, str]] = {}
    for name, _deps in (*MODULES, PEERMEM):
        users = [m for m, deps in loaded.items() if name in deps.split(",")]
        files[name] = {"initstate": "live\n", "refcnt": f"{len(users)}\n"} if name in loaded else {}
    return files


def _write(path: Path, text: str) -> None:
    """Write ``text`` in place (truncate, no rename), mode 0444."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    if path.exists():
        path.chmod(0o644)
    with path.open("w", encoding="utf-8") as out:
        out.write(text)
    path.chmod(0o444)


def render(doc: State, root: Path, pci_root: str = "/sys/bus/pci/devices") -> list[str]:
    """Write the simulated kernel's files under ``root``: ``infiniband/<hca>/...`` and ``module/<name>/...``.

    ``device`` in each HCA folder is a link to its PCI function under ``pci_root``. Returns the HCA names.
    """
    rdma = doc.get("rdma") or {}
    tree = root / "infiniband"
    tree.mkdir(parents=True, exist_ok=True)
    names = []
    for hca in rdma.get("hcas", []):
        folder = tree / str(hca["name"])
        for rel, text in hca_files(hca).items():
            _write(folder / rel, text)
        link = folder / "device"
        target = f"{pci_root}/{hca['pci_bus_id']}"
        if not link.is_symlink() or os.readlink(link) != target:
            link.unlink(missing_ok=True)
            link.symlink_to(target)
        names.append(str(hca["name"]))
    if names:
        for module, files in module_files(rdma).items():
            folder = root / "module" / module
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.iterdir():
                if old.name not in files:
                    old.unlink()
            for name, text in files.items():
                _write(folder / name, text)
    return names


# ------------------------------------------------------------------------------------------------ faults


def find_port(doc: State, hca_name: str, port: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (hca, port) named ``hca_name`` / ``port``."""
    hcas = (doc.get("rdma") or {}).get("hcas", [])
    for hca in hcas:
        if hca["name"] == hca_name:
            for item in hca["ports"]:
                if int(item["port"]) == port:
                    return hca, item
            raise InfinibandError(f"{hca_name} has no port {port}")
    known = ", ".join(h["name"] for h in hcas) or "none"
    raise InfinibandError(f"no HCA {hca_name!r} in the state (HCAs: {known})")


def inject_in(doc: State, fault: str, args: dict[str, Any]) -> str:
    """Inject an RDMA fault (one of :data:`FAULTS`); record what it changed; return a one-line description."""
    rdma = doc.get("rdma")
    if not rdma or not rdma.get("hcas"):
        raise InfinibandError("the state has no HCAs (no \"rdma\" object): use a preset with HCAs")
    faults = rdma.setdefault("faults", {})
    if fault == "peermem-unloaded":
        faults.setdefault(fault, {"saved": copy.deepcopy(rdma["peermem"])})
        rdma["peermem"]["loaded"] = False
        return "nvidia_peermem not loaded"
    if fault == "nic-wrong-socket":
        return _move_to_other_socket(doc, str(args["hca"]))
    if fault == "acs-enabled":
        return _enable_acs(doc, str(args["hca"]))
    hca_name, port_no = str(args["hca"]), int(args.get("port") or 1)
    _, port = find_port(doc, hca_name, port_no)
    key = f"{fault}:{hca_name}:{port_no}"
    if fault not in FAULTS:
        raise InfinibandError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    faults.setdefault(key, {"saved": copy.deepcopy(port)})
    if fault == "ib-port-down":
        # the cable pulled: the port goes Down, the physical link back to Polling, and link_downed counts it
        port["state"], port["phys_state"] = 1, 2
        port["counters"]["link_downed"] = int(port["counters"]["link_downed"]) + 1
        return f"{hca_name} port {port_no} down (Polling)"
    if fault == "ib-link-layer":
        # a VPI port set to the other protocol (mlxconfig LINK_TYPE_P<n>): the kernel shows the port's link layer
        port["link_layer"] = str(args.get("link_layer") or "Ethernet")
        if port["link_layer"] not in ("InfiniBand", "Ethernet"):
            raise InfinibandError(f"link layer {port['link_layer']!r}: InfiniBand or Ethernet")
        return f"{hca_name} port {port_no} link layer {port['link_layer']}"
    if fault == "ib-rate-degraded":
        port["speed"] = str(args.get("speed") or port["speed"])
        port["width"] = int(args.get("width") or 1)
        if port["speed"] not in SPEEDS:
            raise InfinibandError(f"unknown speed {port['speed']!r}; known: {', '.join(SPEEDS)}")
        return f"{hca_name} port {port_no} at {rate_text(port)}"
    counter = str(args["counter"])
    if counter not in port["counters"]:
        raise InfinibandError(f"{hca_name} port {port_no} has no counter {counter!r}")
    # a rising counter: each read of the fault's clock adds ``per_second`` (the file shows the value at render time)
    port["counters"][counter] = int(port["counters"][counter]) + int(args.get("add") or 1)
    faults[key]["rising"] = {"counter": counter, "per_second": int(args.get("per_second") or 0)}
    return f"{hca_name} port {port_no} {counter} = {port['counters'][counter]}"


def _hca(rdma: State, hca_name: str) -> dict[str, Any]:
    """The HCA named ``hca_name``, or an error that lists the ones there are."""
    for hca in rdma["hcas"]:
        if hca["name"] == hca_name:
            return cast(dict[str, Any], hca)
    known = ", ".join(h["name"] for h in rdma["hcas"])
    raise InfinibandError(f"no HCA {hca_name!r} in the state (HCAs: {known})")


def _move_to_other_socket(doc: State, hca_name: str) -> str:
    """``nic-wrong-socket``: the HCA cabled into a slot of the other CPU socket (a riser or slot mix-up).

    It leaves its GPU's PCIe switch for a root port of its own below a host bridge of the other NUMA node, so its
    GPU's nearest NIC is another one of the GPU's socket (``topo -m`` NODE) and it is SYS from its GPU. The PCI
    tree that shows the move is the lab's (gpufleet_lab.pcitree, rewritten from this state).
    """
    rdma = doc["rdma"]
    hca = _hca(rdma, hca_name)
    key = f"nic-wrong-socket:{hca_name}"
    faults = rdma.setdefault("faults", {})
    if key not in faults:
        faults[key] = {"saved": {"hca": copy.deepcopy(hca), "switches": copy.deepcopy(rdma.get("switches", []))}}
        used = {int(g["pci"]["bus"]) for g in doc.get("gpus", [])}
        used |= {int(h["pci_bus_id"].split(":")[1], 16) for h in rdma["hcas"]}
        used |= {int(sw[k]) for sw in rdma.get("switches", []) for k in ("root_bus", "upstream_bus", "downstream_bus")}
        root, upstream, downstream = _free_buses(used, 3)
        numa = 1 if int(hca.get("numa_node", 0)) == 0 else 0
        for switch in rdma.get("switches", []):
            switch["devices"] = [d for d in switch["devices"] if d != hca["pci_bus_id"]]
        rdma.setdefault("switches", []).append({"root_bus": root, "upstream_bus": upstream,
                                                "downstream_bus": downstream, "numa_node": numa,
                                                "devices": [hca["pci_bus_id"]]})
        hca["numa_node"] = numa
    return f"{hca_name} on NUMA node {hca['numa_node']}, away from GPU {hca.get('gpu')}"


def _enable_acs(doc: State, hca_name: str) -> str:
    """``acs-enabled``: ACS redirect on the ports of the PCIe switch the HCA shares with its GPU, as a kernel booted
    with the IOMMU on leaves them (:data:`KERNEL_ACS_CTL`); peer-to-peer between the two goes up to the root
    complex. The ports' configuration space that shows it is the lab's (gpufleet_lab.pcitree)."""
    rdma = doc["rdma"]
    hca = _hca(rdma, hca_name)
    switch = next((sw for sw in rdma.get("switches", []) if hca["pci_bus_id"] in sw["devices"]), None)
    if switch is None:
        raise InfinibandError(f"{hca_name} is below no PCIe switch in the state (nic-wrong-socket moved it?)")
    faults = rdma.setdefault("faults", {})
    faults.setdefault(f"acs-enabled:{hca_name}", {"saved": int(switch.get("acs_ctl", 0))})
    switch["acs_ctl"] = KERNEL_ACS_CTL
    return f"ACS control 0x{KERNEL_ACS_CTL:04x} on the ports of {hca_name}'s PCIe switch"


def clear_in(doc: State, fault: str | None = None) -> list[str]:
    """Clear one RDMA fault kind (or all) and put the saved values back; return what was cleared."""
    rdma = doc.get("rdma") or {}
    cleared = []
    for key in list(rdma.get("faults", {})):
        name = key.split(":", 1)[0]
        if fault is not None and name != fault:
            continue
        saved = rdma["faults"].pop(key)["saved"]
        if name == "peermem-unloaded":
            rdma["peermem"] = saved
        elif name == "acs-enabled":
            hca = next(h for h in rdma["hcas"] if h["name"] == key.split(":", 1)[1])
            for switch in rdma.get("switches", []):
                if hca["pci_bus_id"] in switch["devices"]:
                    switch["acs_ctl"] = saved
        elif name == "nic-wrong-socket":
            rdma["switches"] = saved["switches"]
            rdma["hcas"] = [saved["hca"] if h["name"] == saved["hca"]["name"] else h for h in rdma["hcas"]]
        else:
            _, hca_name, port_no = key.split(":")
            hca, _port = find_port(doc, hca_name, int(port_no))
            hca["ports"] = [saved if int(p["port"]) == int(port_no) else p for p in hca["ports"]]
        cleared.append(key)
    if not rdma.get("faults"):
        rdma.pop("faults", None)
    return cleared


def tick_in(doc: State, seconds: float) -> None:
    """Let ``seconds`` pass for the rising counters of ``ib-counter`` faults (called before each render)."""
    for key, rec in ((doc.get("rdma") or {}).get("faults") or {}).items():
        rising = rec.get("rising")
        if rising and rising.get("per_second"):
            _, hca_name, port_no = key.split(":")
            _, port = find_port(doc, hca_name, int(port_no))
            port["counters"][rising["counter"]] += int(rising["per_second"] * seconds)


def _render_host(doc: State, kernel_dir: Path | None) -> None:
    target = KERNEL_DIR if kernel_dir is None else kernel_dir
    if target.is_dir() and (doc.get("rdma") or {}).get("hcas"):
        render(doc, target)


def inject(fault: str, args: dict[str, Any], path: Path | str | None = None,
           kernel_dir: Path | None = None) -> str:
    """Inject an RDMA fault in the state file, then rewrite the host's kernel files (when it has ``KERNEL_DIR``)."""
    with store.transaction(path) as doc:
        line = inject_in(doc, fault, args)
        _render_host(doc, kernel_dir)
        return line


def clear(fault: str | None = None, path: Path | str | None = None, kernel_dir: Path | None = None) -> list[str]:
    """Clear RDMA faults in the state file, then rewrite the host's kernel files."""
    with store.transaction(path) as doc:
        cleared = clear_in(doc, fault)
        _render_host(doc, kernel_dir)
        return cleared


def rising_loop(duration: float, step: float = 0.5, path: Path | str | None = None,
                kernel_dir: Path | None = None) -> None:
    """Be the hardware for ``duration`` seconds: every ``step`` the rising counters count and the files show it."""
    import time

    end = time.monotonic() + duration
    while time.monotonic() < end:
        time.sleep(step)
        with store.transaction(path) as doc:
            tick_in(doc, step)
            _render_host(doc, kernel_dir)


def port_view(doc: State) -> list[dict[str, Any]]:
    """One row per HCA port (name, port, state, rate) for ``gpusim show``."""
    rows = []
    for hca in (doc.get("rdma") or {}).get("hcas", []):
        for port in hca["ports"]:
            rows.append({"hca": hca["name"], "port": port["port"], "gpu": hca.get("gpu"),
                         "state": PORT_STATES.get(int(port["state"]), "?"), "rate": rate_text(port)})
    return cast(list[dict[str, Any]], rows)
