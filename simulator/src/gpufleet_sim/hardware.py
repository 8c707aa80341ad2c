"""What the simulated hardware does that NVML does not expose: reset, faults, processes, events, driver clients.

The functions named ``*_in`` (and the other functions that take a ``doc``) change a state document in memory and
are pure apart from the liveness check of client pids; the wrappers without the suffix run them inside
:func:`store.transaction`. Standard library only: the packages ship this file (with ``store.py``) under
``/usr/lib/nvidia-sim/python`` for the simulated tools.

Every fault records what it changed under the GPU's ``"faults"`` key (``{name: {"saved": {...}, ...}}``), so that
``clear`` puts the healthy values back exactly and ``gpusim show`` can list what is injected.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from . import store

State = dict[str, Any]
Gpu = dict[str, Any]

EVENT_TYPE_DOUBLE_BIT_ECC = 0x2
EVENT_TYPE_XID = 0x8
NO_INSTANCE = 0xFFFFFFFF
MAX_EVENTS = 256
CLOCK_EVENT_IDLE = 0x1
CLOCK_EVENT_HW_THERMAL_SLOWDOWN = 0x40
XID_DBE = 48
XID_FALLEN_OFF_BUS = 79
IN_USE_REASON = "In use by another client"
LOST_REASON = "GPU is lost"

FAULTS = (
    "xid",
    "ecc-uncorrectable",
    "remap-pending",
    "remap-failure",
    "pcie-downgrade",
    "nvlink-down",
    "nvlink-slow",
    "thermal-slowdown",
    "fallen-off-bus",
    "nvml-error",
    "process",
    "fabric-stuck",
)


class HardwareError(Exception):
    """A hardware operation was refused or named something that does not exist."""


class ResetRefused(HardwareError):
    """A GPU reset was refused; ``reason`` is the text nvidia-smi prints after the bus id."""

    def __init__(self, bus_id: str, reason: str) -> None:
        super().__init__(f"GPU {bus_id}: {reason}")
        self.bus_id = bus_id
        self.reason = reason


class ResetRefusedAll(HardwareError):
    """Some GPUs could not be reset; ``refusals`` holds one :class:`ResetRefused` per GPU."""

    def __init__(self, refusals: list[ResetRefused]) -> None:
        super().__init__("; ".join(str(r) for r in refusals))
        self.refusals = refusals


# --------------------------------------------------------------------------------------------------- lookups


def _normalise_bus_id(text: str) -> str:
    """Return a bus id as ``DDDDDDDD:BB:DD.F`` upper case, accepting the short NVIDIA spellings."""
    parts = text.strip().upper().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    domain = parts[0].rjust(8, "0")
    return ":".join([domain, *parts[1:]])


def find_gpu(doc: State, ident: str | int) -> Gpu:
    """Return the GPU named by index, UUID, serial or PCI bus id.

    Raises:
        HardwareError: no GPU matches.
    """
    text = str(ident).strip()
    for gpu in doc.get("gpus", []):
        if text.isdigit() and int(text) == gpu["index"]:
            return cast(Gpu, gpu)
        if text.lower() == str(gpu.get("uuid", "")).lower() or text == str(gpu.get("serial", "")):
            return cast(Gpu, gpu)
        if ":" in text and _normalise_bus_id(text) == _normalise_bus_id(gpu["pci"]["bus_id"]):
            return cast(Gpu, gpu)
    raise HardwareError(f"no GPU matches {text!r}")


def select_gpus(doc: State, ident: str | int | None) -> list[Gpu]:
    """Return every GPU (``ident`` None) or the GPUs named by a comma-separated list of identifiers."""
    if ident is None or str(ident) == "":
        return list(doc.get("gpus", []))
    return [find_gpu(doc, part) for part in str(ident).split(",") if part.strip()]


def pid_alive(pid: int) -> bool:
    """Return True when a process with this pid exists (a pid we may not signal exists too)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_clients(doc: State, alive: Callable[[int], bool] = pid_alive) -> list[dict[str, Any]]:
    """Return the registered driver clients whose process is alive."""
    return [c for c in doc.get("clients", []) if alive(int(c.get("pid", 0)))]


#: The NVLink generation whose NVSwitches (fourth generation, HGX B200/B300) are managed through the NVLink Subnet
#: Manager: the fabric manager and the GPUs' fabric registration wait for a live ``nvlsm`` there.
SUBNET_MANAGED_NVLINK = 5


def subnet_managed_switches(doc: State) -> int:
    """The number of NVSwitches the NVLink Subnet Manager manages (0 unless the state's GPUs are NVLink 5)."""
    count = int((doc.get("nvswitch") or {}).get("count", 0))
    gens = [int((g.get("nvlink") or {}).get("version", 0)) for g in doc.get("gpus", [])]
    return count if count and gens and max(gens) >= SUBNET_MANAGED_NVLINK else 0


def client_running(doc: State, name: str) -> bool:
    """Whether a live driver client of this name (``nv-fabricmanager``, ``nvlsm``) is registered."""
    return any(c.get("name") == name for c in live_clients(doc))


# --------------------------------------------------------------------------------------------------- clients


def register_client_in(doc: State, pid: int, name: str, alive: Callable[[int], bool] = pid_alive) -> None:
    """Add ``pid`` as a client holding every GPU; drop stale entries and any older entry for the same pid."""
    clients = [c for c in doc.get("clients", []) if int(c.get("pid", 0)) != pid and alive(int(c.get("pid", 0)))]
    clients.append({"pid": pid, "name": name})
    doc["clients"] = clients


def unregister_client_in(doc: State, pid: int) -> None:
    """Remove ``pid`` from the driver clients."""
    doc["clients"] = [c for c in doc.get("clients", []) if int(c.get("pid", 0)) != pid]


# --------------------------------------------------------------------------------------------------- events


def append_event_in(doc: State, gpu: Gpu, data: int, etype: int = EVENT_TYPE_XID,
                    gi_id: int = NO_INSTANCE, ci_id: int = NO_INSTANCE) -> int:
    """Append an event (an XID by default) with the next host-wide ``event_seq``; return its seq."""
    seq = int(doc.get("event_seq", 0)) + 1
    doc["event_seq"] = seq
    events = gpu.setdefault("events", [])
    events.append({"seq": seq, "type": etype, "data": data, "gi_id": gi_id, "ci_id": ci_id,
                   "time": int(time.time())})
    del events[:-MAX_EVENTS]
    return seq


def xid_codes(gpu: Gpu) -> list[int]:
    """Return the XID codes recorded on a GPU, oldest first."""
    return [int(e["data"]) for e in gpu.get("events", []) if e.get("type") == EVENT_TYPE_XID]


# --------------------------------------------------------------------------------------------------- processes


def _gi(gpu: Gpu, gi_id: int) -> dict[str, Any]:
    for gi in gpu.get("mig", {}).get("gpu_instances", []):
        if gi["id"] == gi_id:
            return cast(dict[str, Any], gi)
    raise HardwareError(f"GPU {gpu['index']} has no GPU instance {gi_id}")


def add_process_in(gpu: Gpu, pid: int, name: str = "python3", used_memory_mib: int = 512,
                   gi_id: int | None = None, ci_id: int | None = None) -> None:
    """Start a compute process on a GPU (or inside a MIG GPU/compute instance)."""
    if gpu.get("lost"):
        raise HardwareError(f"GPU {gpu['index']} is lost")
    if (gi_id is None) != (ci_id is None):
        raise HardwareError("a MIG process needs both a GPU instance id and a compute instance id")
    if gi_id is not None:
        gi = _gi(gpu, gi_id)
        if not any(ci["id"] == ci_id for ci in gi.get("compute_instances", [])):
            raise HardwareError(f"GPU {gpu['index']} GPU instance {gi_id} has no compute instance {ci_id}")
    procs = gpu.setdefault("processes", [])
    if any(p["pid"] == pid for p in procs):
        raise HardwareError(f"process {pid} already runs on GPU {gpu['index']}")
    procs.append({"pid": pid, "name": name, "used_memory_mib": used_memory_mib, "gi_id": gi_id, "ci_id": ci_id})
    memory = gpu.setdefault("memory", {})
    memory["used_mib"] = int(memory.get("used_mib", 0)) + used_memory_mib


def remove_process_in(gpu: Gpu, pid: int) -> None:
    """End a compute process; its memory is given back."""
    procs = gpu.get("processes", [])
    for proc in procs:
        if proc["pid"] == pid:
            procs.remove(proc)
            memory = gpu.setdefault("memory", {})
            memory["used_mib"] = max(0, int(memory.get("used_mib", 0)) - int(proc.get("used_memory_mib", 0)))
            return
    raise HardwareError(f"no process {pid} on GPU {gpu['index']}")


# --------------------------------------------------------------------------------------------------- reset


def reset_blocker(doc: State, gpu: Gpu, alive: Callable[[int], bool] = pid_alive) -> str | None:
    """Return why a reset of ``gpu`` is refused (nvidia-smi's wording), or None when it may proceed."""
    if gpu.get("lost"):
        return LOST_REASON
    if gpu.get("processes") or live_clients(doc, alive):
        return IN_USE_REASON
    return None


def reset_in(doc: State, gpu: Gpu, alive: Callable[[int], bool] = pid_alive) -> None:
    """Reset one GPU: apply the pending MIG and ECC modes, clear volatile ECC, remap pending rows.

    Raises:
        ResetRefused: the GPU is lost, or a compute process or a live driver client holds it.
    """
    reason = reset_blocker(doc, gpu, alive)
    if reason:
        raise ResetRefused(gpu["pci"]["bus_id"], reason)
    mig = gpu.get("mig", {})
    if mig.get("supported"):
        mig["current"] = mig.get("pending", mig.get("current", 0))
        if not mig["current"]:
            mig["gpu_instances"] = []
    ecc = gpu.get("ecc", {})
    if "pending" in ecc:
        ecc["current"] = ecc["pending"]
    for kind in ("corrected", "uncorrected"):
        counters = ecc.get("volatile", {}).get(kind, {})
        for location in counters:
            counters[location] = 0
    rows = gpu.get("remapped_rows", {})
    if rows.get("pending"):
        rows["pending"] = 0
    pages = gpu.get("retired_pages", {})
    if pages.get("pending"):
        pages["pending"] = 0
    gpu.get("utilization", {}).update({"gpu": 0, "memory": 0})
    faults = gpu.get("faults", {})
    for repaired in ("ecc-uncorrectable", "remap-pending"):
        faults.pop(repaired, None)


# --------------------------------------------------------------------------------------------------- faults


def _record(gpu: Gpu, name: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """Return the fault record, creating it with a snapshot of ``keys`` the first time."""
    faults = gpu.setdefault("faults", {})
    if name not in faults:
        faults[name] = {"saved": {k: copy.deepcopy(gpu.get(k)) for k in keys}, "events": []}
    return cast(dict[str, Any], faults[name])


def inject_in(doc: State, gpu: Gpu | None, fault: str, args: dict[str, Any]) -> str:
    """Inject ``fault`` (one of :data:`FAULTS`) with its ``args``; return a one-line description.

    ``gpu`` is None only for ``nvml-error`` on a system-level function (for example ``nvmlInit``).
    """
    if fault == "nvml-error":
        return _inject_nvml_error(doc, gpu, str(args["function"]), int(args["code"]))
    if gpu is None:
        raise HardwareError(f"fault {fault} needs a GPU")
    index = gpu["index"]
    if fault == "xid":
        code = int(args["code"])
        rec = _record(gpu, "xid", ())
        rec["events"].append(append_event_in(doc, gpu, code))
        return f"XID {code} on GPU {index}"
    if fault == "ecc-uncorrectable":
        count = int(args.get("count") or 1)
        rec = _record(gpu, fault, ("ecc",))
        for counter in ("volatile", "aggregate"):
            cell = gpu["ecc"][counter]["uncorrected"]
            cell["dram"] = int(cell.get("dram", 0)) + count
        rec["events"].append(append_event_in(doc, gpu, 0, EVENT_TYPE_DOUBLE_BIT_ECC))
        rec["events"].append(append_event_in(doc, gpu, XID_DBE))
        return f"{count} uncorrectable ECC error(s) on GPU {index}"
    if fault in ("remap-pending", "remap-failure"):
        rows = gpu.get("remapped_rows", {})
        if not rows.get("supported"):
            raise HardwareError(f"GPU {index} does not support row remapping")
        _record(gpu, fault, ("remapped_rows",))
        if fault == "remap-pending":
            rows["pending"] = 1
            rows["uncorrected"] = int(rows.get("uncorrected", 0)) + 1
        else:
            rows["failure"] = 1
        return f"{fault} on GPU {index}"
    if fault == "pcie-downgrade":
        pcie = gpu["pcie"]
        _record(gpu, fault, ("pcie",))
        gen, width = args.get("gen"), args.get("width")
        if gen is None and width is None:
            gen, width = max(1, int(pcie["max_gen"]) - 2), max(1, int(pcie["max_width"]) // 2)
        if gen is not None:
            pcie["gen"] = int(gen)
        if width is not None:
            pcie["width"] = int(width)
        return f"PCIe link of GPU {index} at gen {pcie['gen']} x{pcie['width']}"
    if fault == "nvlink-down":
        link = int(args["link"])
        links = gpu.get("nvlink", {}).get("links", [])
        if not 0 <= link < len(links):
            raise HardwareError(f"GPU {index} has no NVLink {link}")
        _record(gpu, fault, ("nvlink",))
        links[link] = 0
        return f"NVLink {link} of GPU {index} down"
    if fault == "nvlink-slow":
        # the link stays up at a lower speed (NVML_FI_DEV_NVLINK_GET_SPEED answers "nvlink_slow"[link]; default half
        # of the generation's speed); the nvlink_slow list is separate from "nvlink" so clearing nvlink-down keeps it
        link = int(args["link"])
        links = gpu.get("nvlink", {}).get("links", [])
        if not 0 <= link < len(links):
            raise HardwareError(f"GPU {index} has no NVLink {link}")
        nominal = {3: 25000, 4: 26562, 5: 53125}.get(int(gpu["nvlink"].get("version", 0)), 25000)
        mbps = int(args.get("mbps") or nominal // 2)
        _record(gpu, fault, ("nvlink_slow",))
        slow = list(gpu.get("nvlink_slow") or [None] * len(links))
        slow[link] = mbps
        gpu["nvlink_slow"] = slow
        return f"NVLink {link} of GPU {index} at {mbps} MB/s"
    if fault == "thermal-slowdown":
        _record(gpu, fault, ("temperature", "clock_event_reasons"))
        reasons = int(gpu.get("clock_event_reasons", 0)) & ~CLOCK_EVENT_IDLE
        gpu["clock_event_reasons"] = reasons | CLOCK_EVENT_HW_THERMAL_SLOWDOWN
        gpu["temperature"]["gpu"] = int(gpu["temperature"]["slowdown"])
        return f"HW thermal slowdown on GPU {index}"
    if fault == "fallen-off-bus":
        rec = _record(gpu, fault, ("lost",))
        gpu["lost"] = True
        rec["events"].append(append_event_in(doc, gpu, XID_FALLEN_OFF_BUS))
        return f"GPU {index} has fallen off the bus"
    if fault == "fabric-stuck":
        # the GPU's fabric registration stays "In Progress" (nvmlsim_fabric.c) until the fault is cleared
        _record(gpu, fault, ("fabric_stuck",))
        gpu["fabric_stuck"] = True
        return f"GPU {index}'s fabric stuck in progress"
    if fault == "process":
        pid = int(args["pid"])
        add_process_in(gpu, pid, str(args.get("name") or "python3"), int(args.get("used_memory_mib") or 512),
                       args.get("gi_id"), args.get("ci_id"))
        _record(gpu, fault, ()).setdefault("pids", []).append(pid)
        return f"process {pid} on GPU {index}"
    raise HardwareError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")


def _inject_nvml_error(doc: State, gpu: Gpu | None, function: str, code: int) -> str:
    if not function.startswith("nvml"):
        raise HardwareError(f"{function!r} is not an NVML function name")
    target: dict[str, Any] = doc if gpu is None else gpu
    if gpu is None:
        faults = doc.setdefault("faults", {})
        faults.setdefault("nvml-error", {"saved": {"inject": copy.deepcopy(doc.get("inject", {}))}, "events": []})
    else:
        _record(gpu, "nvml-error", ("inject",))
    target.setdefault("inject", {})[function] = code
    where = "the system" if gpu is None else f"GPU {gpu['index']}"
    return f"{function} returns {code} on {where}"


def _clear_one(doc: State, gpu: Gpu, name: str) -> None:
    rec = gpu.get("faults", {}).pop(name, None)
    if rec is None:
        return
    for key, value in rec.get("saved", {}).items():
        if value is None:
            gpu.pop(key, None)
        else:
            gpu[key] = value
    seqs = set(rec.get("events", []))
    if seqs:
        gpu["events"] = [e for e in gpu.get("events", []) if e.get("seq") not in seqs]
    for pid in rec.get("pids", []):
        if any(p["pid"] == pid for p in gpu.get("processes", [])):
            remove_process_in(gpu, pid)


def clear_in(doc: State, gpus: list[Gpu], fault: str | None = None, system: bool = True) -> list[str]:
    """Clear one fault (or all, ``fault`` None) on ``gpus`` (and on the system with ``system``); return what."""
    if fault is not None and fault not in FAULTS:
        raise HardwareError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    cleared: list[str] = []
    for gpu in gpus:
        for name in list(gpu.get("faults", {})):
            if fault is None or name == fault:
                _clear_one(doc, gpu, name)
                cleared.append(f"GPU {gpu['index']}: {name}")
        if not gpu.get("faults"):
            gpu.pop("faults", None)
    sys_rec = doc.get("faults", {}).get("nvml-error")
    if system and sys_rec is not None and fault in (None, "nvml-error"):
        doc["inject"] = sys_rec["saved"]["inject"]
        doc["faults"].pop("nvml-error")
        if not doc["faults"]:
            doc.pop("faults")
        cleared.append("system: nvml-error")
    return cleared


def active_faults(doc: State) -> dict[str, list[str]]:
    """Return the injected faults per GPU index (as strings) and under ``"system"``."""
    result: dict[str, list[str]] = {}
    if doc.get("faults"):
        result["system"] = sorted(doc["faults"])
    for gpu in doc.get("gpus", []):
        if gpu.get("faults"):
            result[str(gpu["index"])] = sorted(gpu["faults"])
    return result


# --------------------------------------------------------------------------------------------------- wrappers


def reset(ident: str | int | None = None, path: Path | str | None = None) -> list[str]:
    """Reset the named GPUs (all when ``ident`` is None) in one transaction; return their bus ids.

    Either every GPU resets or none does: the refusals of all GPUs are collected into one ``ResetRefused`` list.

    Raises:
        ResetRefusedAll: one or more GPUs could not be reset (nothing was changed).
    """
    with store.transaction(path) as doc:
        gpus = select_gpus(doc, ident)
        refused = [ResetRefused(g["pci"]["bus_id"], r) for g in gpus if (r := reset_blocker(doc, g))]
        if refused:
            raise ResetRefusedAll(refused)
        for gpu in gpus:
            reset_in(doc, gpu)
        return [g["pci"]["bus_id"] for g in gpus]


def register_client(pid: int, name: str, path: Path | str | None = None) -> None:
    """Register ``pid`` as a driver client holding every GPU."""
    with store.transaction(path) as doc:
        register_client_in(doc, pid, name)


def unregister_client(pid: int, path: Path | str | None = None) -> None:
    """Remove ``pid`` from the driver clients (a missing state file is not an error: the host went away)."""
    try:
        with store.transaction(path) as doc:
            unregister_client_in(doc, pid)
    except store.StateError:
        pass


def add_process(ident: str | int, pid: int, name: str = "python3", used_memory_mib: int = 512,
                gi_id: int | None = None, ci_id: int | None = None, path: Path | str | None = None) -> None:
    """Start a compute process on the named GPU."""
    with store.transaction(path) as doc:
        add_process_in(find_gpu(doc, ident), pid, name, used_memory_mib, gi_id, ci_id)


def remove_process(ident: str | int, pid: int, path: Path | str | None = None) -> None:
    """End a compute process on the named GPU."""
    with store.transaction(path) as doc:
        remove_process_in(find_gpu(doc, ident), pid)


def append_event(ident: str | int, xid: int, path: Path | str | None = None) -> int:
    """Record XID ``xid`` on the named GPU; return the event's seq."""
    with store.transaction(path) as doc:
        return append_event_in(doc, find_gpu(doc, ident), xid)


def inject(fault: str, ident: str | int | None, args: dict[str, Any], path: Path | str | None = None) -> list[str]:
    """Inject a fault on each named GPU (``ident`` None: every GPU, or the system for ``nvml-error``)."""
    with store.transaction(path) as doc:
        if ident is None and fault == "nvml-error":
            return [inject_in(doc, None, fault, args)]
        return [inject_in(doc, gpu, fault, args) for gpu in select_gpus(doc, ident)]


def clear(fault: str | None = None, ident: str | int | None = None, path: Path | str | None = None) -> list[str]:
    """Clear one fault or all faults on the named GPUs (all GPUs when ``ident`` is None)."""
    with store.transaction(path) as doc:
        return clear_in(doc, select_gpus(doc, ident), fault, system=ident is None)
