# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""GPUDirect RDMA health: nvidia_peermem, HCA port state and rate, error counters rising, GPU-NIC distance.

Pure evaluation over two reads of :func:`rdma.rdma_facts` taken ``rdma_counter_interval_s`` apart; the checks
join gpu_health's report with its statuses and levels (docs/health.md, "GPUDirect RDMA and the fabric ports",
gives each threshold its source). A host with no HCA where RDMA is not expected gets no RDMA check at all; a
reading that cannot be taken is UNKNOWN, never ok.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils import rdma
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import (
    FAIL,
    OK,
    UNKNOWN,
    WARN,
    check,
    virtualization_mode,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.xid import worst_level

#: check names (gpu_health's skip_checks takes them)
NAMES = ("rdma_peermem", "rdma_port_state", "rdma_port_link_layer", "rdma_port_rate", "rdma_port_errors",
         "rdma_gpu_nic_distance", "rdma_acs")


def measure(th: dict[str, Any], read: Callable[[], dict[str, Any]] = rdma.rdma_facts,
            sleep: Callable[[float], None] = time.sleep) -> dict[str, Any] | None:
    """Two reads ``rdma_counter_interval_s`` apart; None when there is no HCA and RDMA is not expected."""
    first = read()
    expected = th.get("rdma_expected")
    if not first["hcas"] and not expected:
        return None
    interval = int(th.get("rdma_counter_interval_s") or 0)
    second = first
    if first["hcas"] and interval > 0:
        sleep(interval)
        second = read()
    return {"first": first, "second": second, "interval_s": interval,
            "expected": bool(expected) if expected is not None else bool(first["hcas"])}


def _port_name(hca: dict[str, Any], port: dict[str, Any]) -> str:
    return f"{hca['name']} port {port['port']}"


def _gpu_identity(bus_id: str, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """The NVML GPU with sysfs bus id ``bus_id`` (``0000:18:00.0`` vs NVML's ``00000000:18:00.0``)."""
    for gpu in gpus:
        nvml_bus = str(gpu.get("pci_bus_id") or "").lower()
        if nvml_bus.endswith(bus_id.split(":", 1)[1]):
            return gpu
    return {"index": None, "uuid": None, "pci_bus_id": bus_id}


def check_peermem(meas: dict[str, Any]) -> dict[str, Any]:
    loaded = meas["second"]["nvidia_peermem_loaded"]
    where = "/sys/module/nvidia_peermem/initstate"
    if loaded is None:
        return check("rdma_peermem", None, FAIL, None, "loaded", "cannot tell whether nvidia_peermem is loaded "
                     "(no /sys/module); cannot check GPUDirect RDMA", level=UNKNOWN)
    if loaded:
        return check("rdma_peermem", None, OK, "loaded", "loaded", f"nvidia_peermem is loaded ({where}: live)")
    return check("rdma_peermem", None, FAIL, "not loaded", "loaded",
                 f"nvidia_peermem is not loaded ({where} not live) on a host with "
                 f"{meas['second']['hca_count']} HCA(s): GPUDirect RDMA cannot work; modprobe nvidia_peermem "
                 "(the gpu_rdma role loads and persists it)")


def check_ports(meas: dict[str, Any], th: dict[str, Any]) -> list[dict[str, Any]]:
    """State, rate and error counters of every port."""
    hcas = meas["second"]["hcas"]
    if not hcas:
        return [check("rdma_port_state", None, FAIL, 0, ">= 1 HCA", "RDMA is expected and the host shows no HCA "
                      "under /sys/class/infiniband; check the NICs and their driver (mlx5_ib)")]
    out: list[dict[str, Any]] = []
    expected_rate = th.get("rdma_expected_rate_gbps")
    before = {(h["name"], p["port"]): p for h in meas["first"]["hcas"] for p in h["ports"]}
    for hca in hcas:
        for port in hca["ports"]:
            name = _port_name(hca, port)
            evidence = {"hca": hca["name"], "port": port["port"], "rate": port["rate"]}
            if port["state"] is None or port["phys_state"] is None:
                out.append(check("rdma_port_state", None, FAIL, None, "ACTIVE / LinkUp", f"{name}: cannot read its "
                                 f"state ({', '.join(port['unreadable'])})", level=UNKNOWN, evidence=evidence))
            elif port["state"] != "ACTIVE" or port["phys_state"] != "LinkUp":
                out.append(check("rdma_port_state", None, FAIL, f"{port['state']} / {port['phys_state']}",
                                 "ACTIVE / LinkUp", f"{name} is {port['state']} (physical state {port['phys_state']})"
                                 f"; expected ACTIVE / LinkUp: check the cable, the switch port and the subnet "
                                 "manager", evidence=evidence))
            else:
                out.append(check("rdma_port_state", None, OK, "ACTIVE / LinkUp", "ACTIVE / LinkUp",
                                 f"{name} is ACTIVE / LinkUp", evidence=evidence))
            if th.get("rdma_expected_link_layer"):
                out.append(_link_layer(name, port, str(th["rdma_expected_link_layer"]), evidence))
            out.append(_rate(name, port, expected_rate, hcas, evidence))
            out.append(_errors(name, port, before.get((hca["name"], port["port"])), meas["interval_s"], evidence))
    return out


def _link_layer(name: str, port: dict[str, Any], expected: str, evidence: dict[str, Any]) -> dict[str, Any]:
    if port["link_layer"] is None:
        return check("rdma_port_link_layer", None, FAIL, None, expected, f"{name}: cannot read its link layer",
                     level=UNKNOWN, evidence=evidence)
    if port["link_layer"] != expected:
        return check("rdma_port_link_layer", None, WARN, port["link_layer"], expected,
                     f"{name} runs {port['link_layer']}, expected {expected} (rdma_expected_link_layer): a VPI port "
                     "set to the other protocol (mlxconfig LINK_TYPE_P<n>) cannot join this fabric", evidence=evidence)
    return check("rdma_port_link_layer", None, OK, port["link_layer"], expected, f"{name} runs {expected}",
                 evidence=evidence)


def _rate(name: str, port: dict[str, Any], expected: int | None, hcas: list[dict[str, Any]],
          evidence: dict[str, Any]) -> dict[str, Any]:
    if port["rate_gbps"] is None:
        return check("rdma_port_rate", None, FAIL, None, expected, f"{name}: cannot read its rate "
                     f"({port['rate']!r})", level=UNKNOWN, evidence=evidence)
    if expected is None:
        # no expected rate set: the fastest port of the same link layer on the host is the reference
        peers = [p["rate_gbps"] for h in hcas for p in h["ports"]
                 if p["link_layer"] == port["link_layer"] and p["rate_gbps"] is not None]
        expected_value, source = max(peers), "the fastest port of the host"
    else:
        expected_value, source = float(expected), "rdma_expected_rate_gbps"
    if port["rate_gbps"] < expected_value:
        return check("rdma_port_rate", None, WARN, port["rate_gbps"], expected_value,
                     f"{name} runs at {port['rate']}, below the expected {expected_value:g} Gb/s ({source}): "
                     "a degraded link (lanes or speed); reseat or replace the cable or transceiver", evidence=evidence)
    return check("rdma_port_rate", None, OK, port["rate_gbps"], expected_value, f"{name} at {port['rate']}",
                 evidence=evidence)


def _errors(name: str, port: dict[str, Any], before: dict[str, Any] | None, interval: int,
            evidence: dict[str, Any]) -> dict[str, Any]:
    now = port["counters"]
    then = before["counters"] if before else {}
    unreadable = sorted(k for k in rdma.ERROR_COUNTERS if now.get(k) is None or then.get(k) is None)
    if unreadable:
        return check("rdma_port_errors", None, FAIL, None, "not rising", f"{name}: cannot read "
                     f"{', '.join(unreadable)}; cannot tell whether errors rise", level=UNKNOWN, evidence=evidence)
    rising = {k: [then[k], now[k]] for k in rdma.ERROR_COUNTERS if now[k] > then[k]}
    if rising:
        text = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in rising.items())
        return check("rdma_port_errors", None, WARN, rising, "not rising",
                     f"{name} error counters rose in {interval} s: {text}", evidence=evidence)
    return check("rdma_port_errors", None, OK, {}, "not rising", f"{name}: no error counter rose in {interval} s",
                 evidence=evidence)


def _pairing(meas: dict[str, Any], th: dict[str, Any]) -> bool:
    facts = meas["second"]
    pairing = th.get("rdma_pairing_expected")
    if pairing is None:
        pairing = bool(facts["gpus"]) and facts["hca_count"] >= len(facts["gpus"])
    return bool(pairing)


#: the virtualization modes of a GPU seen from inside a virtual machine (nvidia-smi's words)
GUEST_MODES = ("Pass-Through", "VGPU")


def _guest(gpus: list[dict[str, Any]]) -> str | None:
    """The GPUs' mode when this host is a virtual machine (its PCIe tree is the hypervisor's drawing), else None."""
    modes = sorted({m for m in (virtualization_mode(g) for g in gpus) if m in GUEST_MODES})
    return ", ".join(modes) or None


def _not_judged_in_a_vm(name: str, meas: dict[str, Any], gpus: list[dict[str, Any]], mode: str,
                        what: str) -> list[dict[str, Any]]:
    return [check(name, _gpu_identity(gpu["pci_bus_id"], gpus), OK, None, None,
                  f"GPU {_gpu_identity(gpu['pci_bus_id'], gpus).get('index')}: {what} not judged: the GPUs are in a "
                  f"virtual machine ({mode}), whose PCIe tree is the hypervisor's, not the machine's; not applicable")
            for gpu in meas["second"]["gpus"]]


def check_acs(meas: dict[str, Any], th: dict[str, Any], gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """No ACS redirect on the bridges between each GPU and its nearest NIC below the same root port."""
    if not _pairing(meas, th):
        return []
    mode = _guest(gpus)
    if mode:
        return _not_judged_in_a_vm("rdma_acs", meas, gpus, mode, "the ACS of the bridges to its NIC")
    out = []
    for gpu in meas["second"]["gpus"]:
        nearest = gpu["nearest"] or {}
        if "acs" not in nearest:
            continue  # no NIC below the GPU's root port: rdma_gpu_nic_distance says so
        ident = _gpu_identity(gpu["pci_bus_id"], gpus)
        where = f"GPU {ident.get('index')} ({gpu['pci_bus_id']})"
        unreadable = [a for a in nearest["acs"] if a["error"]]
        redirecting = [a for a in nearest["acs"] if a["redirect"]]
        if unreadable:
            out.append(check("rdma_acs", ident, FAIL, None, "no redirect", f"{where}: cannot read the ACS control "
                             f"of {', '.join(a['bridge'] + ' (' + a['error'] + ')' for a in unreadable)}",
                             level=UNKNOWN))
        elif redirecting:
            text = "; ".join(f"{a['bridge']} ACSCtl {rdma.acs_flags(a['control'])}" for a in redirecting)
            bridges = " ".join(a["bridge"] for a in redirecting)
            out.append(check("rdma_acs", ident, WARN, {a["bridge"]: f"0x{a['control']:04x}" for a in redirecting},
                             "no redirect", f"{where}: ACS redirects peer-to-peer to {nearest['hca']} through the "
                             f"root complex ({text}); GPUDirect RDMA loses bandwidth or hangs. Clear the redirect "
                             f"bits (gpu_rdma_acs_redirect: disabled; setpci -s BDF ECAP_ACS+6.w=0000:002c for "
                             f"{bridges}) or turn ACS off in the BIOS"))
        else:
            out.append(check("rdma_acs", ident, OK, {}, "no redirect", f"{where}: no ACS redirect on the "
                             f"{len(nearest['acs'])} bridge(s) to {nearest['hca']}"))
    return out


def check_distance(meas: dict[str, Any], th: dict[str, Any], gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each GPU's nearest NIC no farther than ``rdma_nic_max_level``, on hosts that pair GPUs and NICs."""
    facts = meas["second"]
    if not _pairing(meas, th):
        return []
    mode = _guest(gpus)
    if mode:
        return _not_judged_in_a_vm("rdma_gpu_nic_distance", meas, gpus, mode, "the PCIe distance to its nearest NIC")
    limit = str(th.get("rdma_nic_max_level") or "PXB")
    out = []
    for gpu in facts["gpus"]:
        ident = _gpu_identity(gpu["pci_bus_id"], gpus)
        nearest = gpu["nearest"] or {}
        level = nearest.get("level")
        if level is None:
            out.append(check("rdma_gpu_nic_distance", ident, FAIL, None, limit, f"GPU {ident.get('index')} "
                             f"({gpu['pci_bus_id']}): cannot place it or its NICs in the PCIe tree", level=UNKNOWN))
        elif rdma.LEVELS.index(level) > rdma.LEVELS.index(limit):
            out.append(check("rdma_gpu_nic_distance", ident, WARN, level, limit, f"GPU {ident.get('index')} "
                             f"({gpu['pci_bus_id']}): nearest NIC {nearest['hca']} is at {level}, farther than "
                             f"{limit}: GPUDirect RDMA crosses the host bridge; check the slot or NCCL's NIC map"))
        else:
            out.append(check("rdma_gpu_nic_distance", ident, OK, level, limit,
                             f"GPU {ident.get('index')}: nearest NIC {nearest['hca']} at {level}"))
    return out


def evaluate(meas: dict[str, Any] | None, th: dict[str, Any], gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every RDMA check ([] for a host without HCA where RDMA is not expected)."""
    if meas is None:
        return []
    peermem = [check_peermem(meas)] if meas["expected"] else []
    checks = [*peermem, *check_ports(meas, th), *check_distance(meas, th, gpus), *check_acs(meas, th, gpus)]
    if th.get("rdma_expected") is None:
        # HCAs seen but RDMA not declared: a ConnectX used for Ethernet only, or a spare port left unplugged, is a
        # healthy node; what would be CRITICAL is a WARNING that says how to make it count (no false red)
        checks = [_undeclared(c) if c["status"] == FAIL and c["level"] != UNKNOWN else c for c in checks]
    return checks


def _undeclared(found: dict[str, Any]) -> dict[str, Any]:
    return check(found["name"], None, WARN, found["value"], found["threshold"],
                 f"{found['message']} (a WARNING: RDMA is not declared for this host; set gpu_health_thresholds' "
                 "rdma_expected true to make it CRITICAL)", evidence=found["evidence"]) | {"gpu": found["gpu"]}


def network(meas: dict[str, Any] | None, checks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The report's ``network`` object: every HCA port as the second read saw it, with the level of its checks.

    ``checks`` are the report's (after ``skip_checks``); a port's ``level`` is the worst of the checks whose
    evidence names it (PASS when none is left), ``failed`` their names; the object's own ``level`` and ``failed``
    cover every RDMA check (nvidia_peermem, no HCA, a GPU far from its NIC too). None where no RDMA check ran.
    """
    if meas is None:
        return None
    facts = meas["second"]
    ports = []
    for hca in facts["hcas"]:
        for port in hca["ports"]:
            mine = [c for c in checks if c["name"] in NAMES and isinstance(c.get("evidence"), dict)
                    and c["evidence"].get("hca") == hca["name"] and c["evidence"].get("port") == port["port"]]
            ports.append({"hca": hca["name"], "port": port["port"], "pci_bus_id": hca["pci_bus_id"],
                          "state": port["state"], "phys_state": port["phys_state"], "rate": port["rate"],
                          "rate_gbps": port["rate_gbps"], "link_layer": port["link_layer"],
                          "level": worst_level([c["level"] for c in mine]),
                          "failed": sorted({c["name"] for c in mine if c["status"] != OK})})
    ours = [c for c in checks if c["name"] in NAMES]
    return {"expected": meas["expected"], "nvidia_peermem_loaded": facts["nvidia_peermem_loaded"],
            "level": worst_level([c["level"] for c in ours]),
            "failed": sorted({c["name"] for c in ours if c["status"] != OK}), "ports": ports,
            "gpus": [{"pci_bus_id": g["pci_bus_id"], "nearest": g["nearest"]} for g in facts["gpus"]]}
