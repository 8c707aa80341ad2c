"""What a power cycle does to the simulated GPUs, applied once per boot of the host.

The state document records the boot id of the last boot the hardware saw (``"boot_id"``). Whoever boots the
simulated host calls :func:`power_on` with the new boot id (the test hosts' boot hook does, at every container
start); when the id differs from the recorded one, the GPUs come up as real ones do after a power cycle:

- pending modes become current: MIG mode (``mig.pending`` → ``mig.current``) and ECC mode;
- MIG GPU and compute instances are gone until someone creates them again (``gpufleet-mig-apply.service``);
- persistence mode is off until ``nvidia-persistenced`` sets it; compute mode is Default; the power limit is the
  default limit again;
- volatile ECC counters, pending row remaps and page retirements are applied or cleared (the aggregate counters
  and the remapped rows, kept in the InfoROM, stay);
- the driver's event queue (XIDs) is empty, no process or driver client holds a GPU, utilisation is 0;
- the injected faults that a reboot clears are cleared (:data:`CLEARED_BY_REBOOT`); the others describe a
  defect of the board, the link or the cooling, or a test's own NVML error injection, and stay.

A document without a recorded boot id only records it: a freshly written state already describes the hardware as
it is. Standard library only, like ``store`` and ``hardware``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import store

State = dict[str, Any]

#: Faults a reboot clears: the XID events, the uncorrectable error (its volatile count; the aggregate stays), the
#: pending remap (applied), a GPU that fell off the bus (a power cycle brings it back) and the processes.
CLEARED_BY_REBOOT = ("xid", "ecc-uncorrectable", "remap-pending", "fallen-off-bus", "process")
BOOT_ID_KEY = "boot_id"


def power_cycle_gpu(gpu: dict[str, Any]) -> None:
    """Put one GPU in the state it has after a power cycle (see the module's description)."""
    faults = gpu.get("faults") or {}
    fallen = faults.get("fallen-off-bus")
    if fallen is not None and "lost" in fallen.get("saved", {}):
        saved = fallen["saved"]["lost"]
        if saved is None:
            gpu.pop("lost", None)
        else:
            gpu["lost"] = saved
    for name in CLEARED_BY_REBOOT:
        faults.pop(name, None)
    if "faults" in gpu and not faults:
        gpu.pop("faults")
    mig = gpu.get("mig")
    if isinstance(mig, dict) and mig.get("supported"):
        mig["current"] = mig.get("pending", mig.get("current", 0))
        mig["gpu_instances"] = []
    ecc = gpu.get("ecc")
    if isinstance(ecc, dict):
        if "pending" in ecc:
            ecc["current"] = ecc["pending"]
        for kind in ("corrected", "uncorrected"):
            counters = (ecc.get("volatile") or {}).get(kind) or {}
            for location in counters:
                counters[location] = 0
    for key in ("remapped_rows", "retired_pages"):
        if (gpu.get(key) or {}).get("pending"):
            gpu[key]["pending"] = 0
    if "persistence_mode" in gpu:
        gpu["persistence_mode"] = 0
    if "compute_mode" in gpu:
        gpu["compute_mode"] = 0
    power = gpu.get("power")
    if isinstance(power, dict) and "default_mw" in power:
        power["limit_mw"] = power["enforced_mw"] = power["default_mw"]
    if "events" in gpu:
        gpu["events"] = []
    if "processes" in gpu:
        gpu["processes"] = []
    if isinstance(gpu.get("memory"), dict) and "used_mib" in gpu["memory"]:
        gpu["memory"]["used_mib"] = 0
    if isinstance(gpu.get("utilization"), dict):
        gpu["utilization"].update({"gpu": 0, "memory": 0})


def power_on_in(doc: State, boot_id: str) -> bool:
    """Record ``boot_id``; power-cycle every GPU when the document saw another boot. Return True when it did."""
    if not boot_id.strip():
        raise ValueError("a boot id must not be empty")
    previous = doc.get(BOOT_ID_KEY)
    doc[BOOT_ID_KEY] = boot_id
    if previous is None or previous == boot_id:
        return False
    for gpu in doc.get("gpus", []):
        power_cycle_gpu(gpu)
    if "clients" in doc:
        doc["clients"] = []
    return True


def power_on(boot_id: str, path: Path | str | None = None) -> bool:
    """Apply :func:`power_on_in` to the state file under the store's lock; return True when it power-cycled."""
    with store.transaction(path) as doc:
        return power_on_in(doc, boot_id)
