# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Health reads of every GPU of a host in ONE NVML session, as the measurement document of :mod:`health_checks`.

Built on :func:`nvml.nvml_session` / :class:`nvml.Nvml` (the only place that imports pynvml). Each metric is read
on its own so that one failing call does not hide the others:

* NVML answers NOT_SUPPORTED -> the metric goes to ``unsupported`` (the check reports "not applicable"), e.g.
  retired pages on Ampere and newer, remapped rows on pre-Ampere GPUs or while MIG instances exist;
* NVML answers GPU_IS_LOST (on any call) -> the GPU is marked ``lost`` and reading it stops;
* any other error -> ``errors[metric]`` holds the one-sentence message (the check fails).

XID events have two sources, merged by :func:`read_host`'s caller (the module):

* NVML events (:func:`drain_xid_events`): an event set registered in this call for XidCriticalError on every GPU,
  drained with a short wait. NVML only delivers events that occur while the set is registered (the Linux
  driver reports each XID once per set), so this source sees XIDs raised *during* the check, not before it;
* the kernel log (:mod:`kernel_log`: the journal, else ``/dev/kmsg``, else ``dmesg``): ``NVRM: Xid (PCI:...): N``
  lines within the window. This is how the window reaches back in time on a real host.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_fabric, health_nvlink
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import (
    ERROR_GPU_IS_LOST,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED,
    NvmlError,
)

ERROR_TIMEOUT = 10
EVENT_XID = 0x8
MAX_EVENTS = 4096
CLOCK_EVENT_IDLE = 0x1
NO_INSTANCE = 0xFFFFFFFF
FI_DEV_GET_GPU_RECOVERY_ACTION = 230  # nvml.h NVML_FI_DEV_GET_GPU_RECOVERY_ACTION


class GpuLost(Exception):
    """A read of this GPU answered GPU_IS_LOST."""


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class GpuReader:
    """Collects the readings of one GPU: ``values``, ``unsupported`` and ``errors``."""

    def __init__(self, nvml: Any, index: int) -> None:
        self.nvml = nvml
        self.index = index
        self.handle: Any = None
        self.doc: dict[str, Any] = {"index": index, "uuid": None, "pci_bus_id": None, "pci_device_id": None,
                                    "lost": False,
                                    "values": {}, "unsupported": [], "errors": {}}

    def call(self, name: str, *args: Any) -> Any:
        """Call an NVML function for this GPU; GPU_IS_LOST raises :class:`GpuLost`."""
        try:
            return self.nvml.call(name, *args, gpu=self.index)
        except NvmlError as exc:
            if exc.code == ERROR_GPU_IS_LOST:
                raise GpuLost(str(exc)) from exc
            raise

    def read(self, metric: str, func: Any) -> None:
        """Store ``func()`` under ``metric``, or classify its failure (unsupported / error)."""
        try:
            self.doc["values"][metric] = func()
        except NvmlError as exc:
            if exc.code == ERROR_NOT_SUPPORTED:
                self.doc["unsupported"].append(metric)
            else:
                self.doc["errors"][metric] = str(exc)

    # -- metrics ------------------------------------------------------------------------------------------
    def identity(self) -> None:
        """Handle, UUID, PCI bus id, name and VBIOS (a failure here other than lost is an error on identity)."""
        self.handle = self.call("nvmlDeviceGetHandleByIndex", self.index)
        pci = self.call("nvmlDeviceGetPciInfo", self.handle)
        self.doc["pci_bus_id"] = _text(pci.busId)
        self.doc["pci_device_id"] = f"0x{int(pci.pciDeviceId):08X}"  # the board (nvlink_models is keyed by it)
        self.doc["uuid"] = _text(self.call("nvmlDeviceGetUUID", self.handle))
        self.read("name", lambda: _text(self.call("nvmlDeviceGetName", self.handle)))
        self.read("vbios_version", lambda: _text(self.call("nvmlDeviceGetVbiosVersion", self.handle)))

    def ecc(self) -> dict[str, int]:
        """Total ECC counts: corrected/uncorrected x volatile/aggregate."""
        lib = self.nvml.lib
        out = {}
        for kind, etype in (("corrected", lib.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                            ("uncorrected", lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            for counter, ctype in (("volatile", lib.NVML_VOLATILE_ECC), ("aggregate", lib.NVML_AGGREGATE_ECC)):
                out[f"{kind}_{counter}"] = int(self.call("nvmlDeviceGetTotalEccErrors", self.handle, etype, ctype))
        return out

    def retired_pages(self) -> dict[str, Any]:
        """Pages retired for multiple SBEs and for DBEs, and whether a retirement is pending."""
        lib = self.nvml.lib
        sbe = self.call("nvmlDeviceGetRetiredPages", self.handle,
                        lib.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        dbe = self.call("nvmlDeviceGetRetiredPages", self.handle, lib.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = self.call("nvmlDeviceGetRetiredPagesPendingStatus", self.handle)
        return {"sbe": len(sbe), "dbe": len(dbe), "pending": bool(pending)}

    def remapped_rows(self) -> dict[str, int]:
        """Row remapping counters (Ampere and newer)."""
        corr, unc, pending, failure = self.call("nvmlDeviceGetRemappedRows", self.handle)
        return {"corrected": int(corr), "uncorrected": int(unc), "pending": int(pending), "failure": int(failure)}

    def pcie(self) -> dict[str, int]:
        """Current link generation/width vs the maxima (the max generation is the GPU's and the slot's)."""
        return {
            "gen": int(self.call("nvmlDeviceGetCurrPcieLinkGeneration", self.handle)),
            "max_gen": int(self.call("nvmlDeviceGetMaxPcieLinkGeneration", self.handle)),
            "width": int(self.call("nvmlDeviceGetCurrPcieLinkWidth", self.handle)),
            "max_width": int(self.call("nvmlDeviceGetMaxPcieLinkWidth", self.handle)),
        }

    def nvlink(self) -> list[int]:
        """State of each NVLink (1 up, 0 down), link 0 upwards until NVML says the link does not exist."""
        links: list[int] = []
        for link in range(int(self.nvml.lib.NVML_NVLINK_MAX_LINKS)):
            try:
                links.append(int(self.call("nvmlDeviceGetNvLinkState", self.handle, link)))
            except NvmlError as exc:
                if exc.code in (ERROR_NOT_SUPPORTED, ERROR_INVALID_ARGUMENT) and links:
                    break
                if exc.code in (ERROR_NOT_SUPPORTED, ERROR_INVALID_ARGUMENT):
                    return []
                raise
        return links

    def temperature(self) -> dict[str, Any]:
        """GPU temperature and the slowdown/shutdown thresholds (C).

        Each threshold is read on its own: one that NVML does not answer is None and ``unreadable[key]`` says why
        (not supported, or the error), so the other one and the temperature are still judged.
        """
        lib = self.nvml.lib
        out: dict[str, Any] = {"gpu": int(self.call("nvmlDeviceGetTemperature", self.handle,
                                                     lib.NVML_TEMPERATURE_GPU))}
        unreadable: dict[str, str] = {}
        for key, which in (("slowdown", lib.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                           ("shutdown", lib.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)):
            try:
                out[key] = int(self.call("nvmlDeviceGetTemperatureThreshold", self.handle, which))
            except NvmlError as exc:
                out[key] = None
                unreadable[key] = "not supported" if exc.code == ERROR_NOT_SUPPORTED else str(exc).rstrip(".")
        out["unreadable"] = unreadable
        return out

    def ecc_mode(self) -> dict[str, bool]:
        """Current and pending ECC mode (NOT_SUPPORTED on GPUs without ECC)."""
        current, pending = self.call("nvmlDeviceGetEccMode", self.handle)
        return {"current": bool(current), "pending": bool(pending)}

    def recovery_action(self) -> int:
        """NVML field 230, the recovery action the driver asks for (NOT_SUPPORTED before R570)."""
        value = self.call("nvmlDeviceGetFieldValues", self.handle, [FI_DEV_GET_GPU_RECOVERY_ACTION])[0]
        if int(value.nvmlReturn) != 0:
            raise NvmlError("nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)", int(value.nvmlReturn),
                            "the field could not be read", self.index)
        return int(value.value.uiVal)

    def read_all(self, want_mig: bool) -> dict[str, Any]:
        """Read every metric; return the GPU's measurement document."""
        try:
            self.identity()
            self.read("brand", lambda: int(self.call("nvmlDeviceGetBrand", self.handle)))
            self.read("persistence_mode", lambda: int(self.call("nvmlDeviceGetPersistenceMode", self.handle)))
            self.read("ecc_mode", self.ecc_mode)
            self.read("ecc", self.ecc)
            self.read("retired_pages", self.retired_pages)
            self.read("remapped_rows", self.remapped_rows)
            self.read("pcie", self.pcie)
            self.read("virtualization_mode",
                      lambda: int(self.call("nvmlDeviceGetVirtualizationMode", self.handle)))
            self.read("nvlink", self.nvlink)
            self.read("nvlink_speed",
                      lambda: health_nvlink.read_speeds(self, list(self.doc["values"].get("nvlink") or [])))
            self.read("fabric", lambda: health_fabric.raw_fabric(self.nvml, self.index))
            self.read("temperature", self.temperature)
            self.read("clock_event_reasons",
                      lambda: int(self.call("nvmlDeviceGetCurrentClocksEventReasons", self.handle)))
            self.read("utilization_gpu", lambda: int(self.call("nvmlDeviceGetUtilizationRates", self.handle).gpu))
            self.read("processes", lambda: self.nvml.processes(self.index))
            self.read("recovery_action", self.recovery_action)
            if want_mig:
                self.read("mig", self._mig)
        except GpuLost as exc:
            self.doc["lost"] = True
            self.doc["lost_message"] = str(exc)
        except NvmlError as exc:
            if exc.code == ERROR_GPU_IS_LOST:
                self.doc["lost"] = True
                self.doc["lost_message"] = str(exc)
            else:
                self.doc["errors"]["identity"] = str(exc)
        values = self.doc["values"]
        reasons = values.get("clock_event_reasons")
        util = values.get("utilization_gpu")
        values["idle"] = bool((reasons is not None and reasons & CLOCK_EVENT_IDLE) or util == 0)
        return self.doc

    def _mig(self) -> dict[str, Any]:
        try:
            state = self.nvml.mig_state(self.index)
        except NvmlError as exc:
            if exc.code == ERROR_GPU_IS_LOST:
                raise GpuLost(str(exc)) from exc
            raise
        return {"enabled": bool(state["current"]), "supported": bool(state["supported"]),
                "gpu_instances": state["gpu_instances"]}


def drain_xid_events(nvml: Any, handles: dict[int, Any], wait_ms: int) -> tuple[dict[int, list[dict]], str | None]:
    """Register XidCriticalError on every handle in one event set and collect what arrives within ``wait_ms`` (total).

    Returns ``({gpu index: [{code, gi_id, ci_id, time: None, source: "nvml"}]}, error message or None)``. A GPU
    whose registration is NOT_SUPPORTED is skipped; events carry no timestamp (NVML's event data has none).
    """
    found: dict[int, list[dict]] = {index: [] for index in handles}
    if not handles or wait_ms <= 0:
        return found, None
    try:
        event_set = nvml.call("nvmlEventSetCreate")
    except NvmlError as exc:
        return found, str(exc)
    by_address = {}
    try:
        for index, handle in handles.items():
            try:
                nvml.call("nvmlDeviceRegisterEvents", handle, EVENT_XID, event_set, gpu=index)
            except NvmlError as exc:
                if exc.code in (ERROR_NOT_SUPPORTED, ERROR_GPU_IS_LOST):
                    continue
                return found, str(exc)
            by_address[ctypes.cast(handle, ctypes.c_void_p).value] = index
        deadline = time.monotonic() + wait_ms / 1000.0
        for _ in range(MAX_EVENTS):
            remaining = int((deadline - time.monotonic()) * 1000)
            if remaining <= 0:
                break
            try:
                data = nvml.call("nvmlEventSetWait_v2", event_set, remaining)
            except NvmlError as exc:
                if exc.code == ERROR_TIMEOUT:
                    break
                return found, str(exc)
            if not int(data.eventType) & EVENT_XID:
                continue
            index = by_address.get(ctypes.cast(data.device, ctypes.c_void_p).value)
            if index is None:
                continue
            gi_id, ci_id = int(data.gpuInstanceId), int(data.computeInstanceId)
            found[index].append({"code": int(data.eventData), "time": None, "source": "nvml",
                                 "gi_id": None if gi_id == NO_INSTANCE else gi_id,
                                 "ci_id": None if ci_id == NO_INSTANCE else ci_id})
    finally:
        with contextlib.suppress(NvmlError):
            nvml.call("nvmlEventSetFree", event_set)
    return found, None


def read_host(nvml: Any, want_mig: bool = True, xid_wait_ms: int = 100) -> dict[str, Any]:
    """Read the whole host: driver/CUDA version, GPU count and every GPU (XIDs from NVML events merged in)."""
    meas: dict[str, Any] = {"driver_version": None, "cuda_version": None, "gpu_count": None, "gpus": [],
                            "xid_sources": []}
    meas["driver_version"] = nvml.driver_version()
    try:
        meas["cuda_version"] = nvml.cuda_version()
    except NvmlError:
        meas["cuda_version"] = None
    count = nvml.device_count()
    meas["gpu_count"] = count
    readers = [GpuReader(nvml, index) for index in range(count)]
    for reader in readers:
        meas["gpus"].append(reader.read_all(want_mig))
    handles = {r.index: r.handle for r in readers if r.handle is not None and not r.doc["lost"]}
    events, error = drain_xid_events(nvml, handles, xid_wait_ms)
    meas["xid_sources"].append({"source": "nvml", "error": error, "wait_ms": xid_wait_ms})
    for gpu in meas["gpus"]:
        if gpu["lost"]:
            continue
        if error is not None:
            gpu["errors"]["xid"] = error
        else:
            gpu["values"]["xid"] = events.get(gpu["index"], [])
    return meas
