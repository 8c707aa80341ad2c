# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""NVML access for gpufleet modules: the only place in the collection that imports ``pynvml``.

Every module that talks to the GPU driver opens an :func:`nvml_session` and uses the :class:`Nvml` object it
yields. ``pynvml`` (from the pinned ``nvidia-ml-py``) is imported lazily, so a module can still report a clear,
actionable error when the bindings or the driver are missing. Every NVML failure becomes an :class:`NvmlError`
naming the NVML function, the numeric return code and what to do about it.

Conventions of the returned data:

* sizes are MiB (``memory_total_mib``, ``used_memory_mib``);
* ``pci_device_id`` is the mig-parted spelling ``0xDDDDVVVV`` (device id, vendor id), upper-case hex;
* MIG profile names drop the driver's ``MIG `` prefix (``3g.40gb``, ``1g.10gb+me``); a compute instance that
  does not fill its GPU instance is named ``<C>c.<GI name>`` (``1c.3g.40gb``), one that fills it carries the
  GPU instance's name (the MIG device naming of the MIG user guide).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any

PINNED_BINDINGS = "nvidia-ml-py==13.615.71"
MIB = 1024 * 1024
NOT_AVAILABLE_ID = 0xFFFFFFFF

# nvmlReturn_t values used by name below (nvml.h).
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_IN_USE = 19
ERROR_INSUFFICIENT_RESOURCES = 23

_HINTS = {
    ERROR_INVALID_ARGUMENT: "the request does not match what this GPU offers; check the profile and placement",
    ERROR_NOT_SUPPORTED: "this GPU or driver does not support the operation (is MIG mode enabled on it?)",
    ERROR_NO_PERMISSION: "run the task as root (become: true)",
    ERROR_NOT_FOUND: "the object no longer exists; re-read the GPU state and retry",
    ERROR_DRIVER_NOT_LOADED: "load the NVIDIA kernel driver (apply the gpufleet.nvidia.nvidia_driver role, "
    "reboot if it asks for it)",
    ERROR_LIBRARY_NOT_FOUND: "install the NVIDIA driver so that libnvidia-ml.so.1 is on the library path",
    ERROR_FUNCTION_NOT_FOUND: "the driver is older than the pinned bindings " + PINNED_BINDINGS
    + "; upgrade the driver",
    ERROR_GPU_IS_LOST: "the GPU fell off the bus; drain the node, then reset the GPU or reboot",
    ERROR_RESET_REQUIRED: "reset the GPU (nvidia-smi -r) or reboot the host",
    ERROR_IN_USE: "stop the processes and services holding the GPU (nvidia-persistenced, DCGM, MPS, "
    "device plugins) and retry",
    ERROR_INSUFFICIENT_RESOURCES: "the MIG instance does not fit beside the existing ones; destroy instances "
    "or choose another layout",
}
_UNAVAILABLE_CODES = (ERROR_DRIVER_NOT_LOADED, ERROR_LIBRARY_NOT_FOUND)


class NvmlError(Exception):
    """An NVML call failed.

    Attributes:
        function: the pynvml function (same name as the NVML C symbol family) that failed.
        code: the ``nvmlReturn_t`` value, or None when the failure did not come from the driver.
        message: the driver's error text.
        gpu: the GPU index the call was about, when known.
    """

    def __init__(self, function: str, code: int | None, message: str, gpu: int | None = None) -> None:
        self.function = function
        self.code = code
        self.message = message
        self.gpu = gpu
        super().__init__(str(self))

    @property
    def hint(self) -> str:
        """What the operator should do about this error."""
        return _HINTS.get(self.code or -1, "check the driver state with nvidia-smi")

    def __str__(self) -> str:
        where = f" on GPU {self.gpu}" if self.gpu is not None else ""
        code = f" (NVML error {self.code})" if self.code is not None else ""
        return f"{self.function} failed{where}: {self.message}{code}; {self.hint}."

    def to_dict(self) -> dict[str, Any]:
        """The error as result data (``nvml_error`` in module results)."""
        return {"function": self.function, "code": self.code, "message": self.message, "gpu": self.gpu}


class NvmlUnavailable(NvmlError):
    """NVML cannot be used at all: bindings missing, library missing or driver not loaded."""

    @property
    def hint(self) -> str:
        """The fix: install the bindings, the driver library, or load the driver."""
        if self.code is None:
            return (f"install {PINNED_BINDINGS} into the interpreter that runs gpufleet modules (gpufleet_python, "
                    "made by the gpufleet.nvidia.nvml_python role)")
        return _HINTS[self.code] if self.code in _HINTS else super().hint


#: nvml.h nvmlGpuVirtualizationMode_t (nvmlDeviceGetVirtualizationMode), as nvidia-smi -q prints it
#: ("Virtualization Mode": None on bare metal, Pass-Through in the real H200 VM of tests/data/ground-truth)
VIRTUALIZATION = {0: "None", 1: "Pass-Through", 2: "VGPU", 3: "Host VGPU", 4: "Host VSGA"}


def virtualization_name(mode: Any) -> str | None:
    """A virtualization mode as nvidia-smi prints it (None where NVML did not say)."""
    return VIRTUALIZATION.get(mode, f"unknown mode {mode}") if isinstance(mode, int) else None


def _text(value: Any) -> str:
    """Decode bytes that pynvml may hand back undecoded."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _profile_name(raw: Any) -> str:
    name = _text(raw).strip()
    return name[4:] if name.startswith("MIG ") else name


def cuda_version_string(version: int) -> str:
    """Turn ``nvmlSystemGetCudaDriverVersion`` (12040) into ``12.4``."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _import_pynvml() -> Any:
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise NvmlUnavailable("import pynvml", None, f"the NVML Python bindings are not installed ({exc})") from exc
    return pynvml


class Nvml:
    """An open NVML session (see :func:`nvml_session`). Handles are valid until the session ends."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self._gi_profiles: dict[int, list[dict[str, Any]]] = {}

    # -- plumbing -----------------------------------------------------------------------------------------
    def call(self, name: str, *args: Any, gpu: int | None = None) -> Any:
        """Call ``pynvml.<name>(*args)``; an ``NVMLError`` becomes an :class:`NvmlError` naming ``name``."""
        func = getattr(self.lib, name, None)
        if func is None:
            raise NvmlError(name, ERROR_FUNCTION_NOT_FOUND, "the bindings have no such function", gpu)
        try:
            return func(*args)
        except self.lib.NVMLError as exc:
            code = getattr(exc, "value", None)
            cls = NvmlUnavailable if code in _UNAVAILABLE_CODES else NvmlError
            raise cls(name, code, _text(str(exc)), gpu) from exc

    def _optional(self, name: str, *args: Any, gpu: int | None = None) -> Any:
        """Like :meth:`call`, but NOT_SUPPORTED (a field this GPU does not report) gives None."""
        try:
            return self.call(name, *args, gpu=gpu)
        except NvmlError as exc:
            if exc.code == ERROR_NOT_SUPPORTED:
                return None
            raise

    def device_count(self) -> int:
        """Number of GPUs the driver exposes."""
        return int(self.call("nvmlDeviceGetCount"))

    def handle(self, index: int) -> Any:
        """The device handle of GPU ``index``."""
        return self.call("nvmlDeviceGetHandleByIndex", index, gpu=index)

    # -- inventory ----------------------------------------------------------------------------------------
    def driver_version(self) -> str:
        """The kernel driver version (``550.163.01``)."""
        return _text(self.call("nvmlSystemGetDriverVersion"))

    def cuda_version(self) -> str:
        """The CUDA version the driver supports (``12.4``)."""
        return cuda_version_string(int(self.call("nvmlSystemGetCudaDriverVersion")))

    def gpu(self, index: int) -> dict[str, Any]:
        """Identity of one GPU (see :meth:`gpus`)."""
        h = self.handle(index)
        pci = self.call("nvmlDeviceGetPciInfo", h, gpu=index)
        serial = self._optional("nvmlDeviceGetSerial", h, gpu=index)
        vbios = self._optional("nvmlDeviceGetVbiosVersion", h, gpu=index)
        capability = self._optional("nvmlDeviceGetCudaComputeCapability", h, gpu=index)
        virtualization = self._optional("nvmlDeviceGetVirtualizationMode", h, gpu=index)
        return {
            "index": index,
            "uuid": _text(self.call("nvmlDeviceGetUUID", h, gpu=index)),
            "name": _text(self.call("nvmlDeviceGetName", h, gpu=index)),
            "pci_bus_id": _text(pci.busId),
            "pci_device_id": "0x%08X" % (pci.pciDeviceId & 0xFFFFFFFF),
            "pci_subsystem_id": "0x%08X" % (pci.pciSubSystemId & 0xFFFFFFFF),
            "serial": _text(serial) if serial is not None else None,
            "vbios_version": _text(vbios) if vbios is not None else None,
            "memory_total_mib": int(self.call("nvmlDeviceGetMemoryInfo", h, gpu=index).total // MIB),
            "minor_number": self._optional("nvmlDeviceGetMinorNumber", h, gpu=index),
            "compute_capability": f"{capability[0]}.{capability[1]}" if capability is not None else None,
            "virtualization_mode": virtualization_name(virtualization),
        }

    def gpus(self) -> list[dict[str, Any]]:
        """Identity of every GPU: index, uuid, name, pci_bus_id, pci_device_id, serial, vbios_version,
        memory_total_mib, minor_number (plus pci_subsystem_id and compute_capability)."""
        return [self.gpu(i) for i in range(self.device_count())]

    def processes(self, index: int) -> list[dict[str, Any]]:
        """Compute processes on GPU ``index``: ``[{pid, name, used_memory_mib, gi_id, ci_id}]``.

        ``gi_id``/``ci_id`` are None when the process is not tied to a MIG instance.
        """
        h = self.handle(index)
        found = []
        for proc in self.call("nvmlDeviceGetComputeRunningProcesses_v3", h, gpu=index):
            used = getattr(proc, "usedGpuMemory", None)
            gi_id = getattr(proc, "gpuInstanceId", NOT_AVAILABLE_ID)
            ci_id = getattr(proc, "computeInstanceId", NOT_AVAILABLE_ID)
            try:
                name = _text(self.call("nvmlSystemGetProcessName", proc.pid))
            except NvmlError:
                name = None  # only a label for messages; the PID is what matters
            found.append({
                "pid": int(proc.pid),
                "name": name,
                "used_memory_mib": int(used // MIB) if used is not None else None,
                "gi_id": None if gi_id == NOT_AVAILABLE_ID else int(gi_id),
                "ci_id": None if ci_id == NOT_AVAILABLE_ID else int(ci_id),
            })
        return found

    # -- MIG: read ----------------------------------------------------------------------------------------
    def mig_mode(self, index: int) -> tuple[int, int] | None:
        """``(current, pending)`` MIG mode of GPU ``index``, or None when the GPU is not MIG-capable."""
        mode = self._optional("nvmlDeviceGetMigMode", self.handle(index), gpu=index)
        return None if mode is None else (int(mode[0]), int(mode[1]))

    def gi_profiles(self, index: int) -> list[dict[str, Any]]:
        """GPU-instance profiles of GPU ``index``: ``[{enum, id, name, slices, instances, memory_mib,
        placements: [[start, size], ...]}]`` (empty on a GPU without MIG)."""
        if index in self._gi_profiles:
            return self._gi_profiles[index]
        h = self.handle(index)
        profiles = []
        for enum in range(self.lib.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = self.call("nvmlDeviceGetGpuInstanceProfileInfo", h, enum, gpu=index)
            except NvmlError as exc:
                if exc.code in (ERROR_NOT_SUPPORTED, ERROR_INVALID_ARGUMENT):
                    continue
                raise
            profiles.append({
                "enum": enum, "id": int(info.id), "name": _profile_name(info.name),
                "slices": int(info.sliceCount), "instances": int(info.instanceCount),
                "memory_mib": int(info.memorySizeMB), "placements": self._gi_placements(index, h, int(info.id)),
            })
        self._gi_profiles[index] = profiles
        return profiles

    def _gi_placements(self, index: int, h: Any, profile_id: int) -> list[list[int]]:
        count = ctypes.c_uint(0)
        try:
            self.call("nvmlDeviceGetGpuInstancePossiblePlacements", h, profile_id, None, ctypes.byref(count),
                      gpu=index)
        except NvmlError as exc:
            if exc.code != ERROR_INSUFFICIENT_SIZE:
                raise
        if not count.value:
            return []
        array = (self.lib.c_nvmlGpuInstancePlacement_t * count.value)()
        self.call("nvmlDeviceGetGpuInstancePossiblePlacements", h, profile_id, array, ctypes.byref(count),
                  gpu=index)
        return [[int(array[i].start), int(array[i].size)] for i in range(count.value)]

    def _gi_profile_by_id(self, index: int, profile_id: int) -> dict[str, Any]:
        for prof in self.gi_profiles(index):
            if prof["id"] == profile_id:
                return prof
        raise NvmlError("nvmlDeviceGetGpuInstanceProfileInfo", ERROR_NOT_FOUND,
                        f"GPU-instance profile id {profile_id} is not offered by this GPU", index)

    def _gpu_instance_handles(self, index: int) -> list[tuple[Any, Any, dict[str, Any]]]:
        """``(handle, info, profile)`` for every GPU instance of GPU ``index``."""
        h = self.handle(index)
        found = []
        for prof in self.gi_profiles(index):
            array = (self.lib.c_nvmlGpuInstance_t * max(prof["instances"], 1))()
            count = ctypes.c_uint(0)
            self.call("nvmlDeviceGetGpuInstances", h, prof["id"], array, ctypes.byref(count), gpu=index)
            for i in range(count.value):
                found.append((array[i], self.call("nvmlGpuInstanceGetInfo", array[i], gpu=index), prof))
        return found

    def ci_profiles(self, index: int, gi_handle: Any) -> list[dict[str, Any]]:
        """Compute-instance profiles inside a GPU instance: ``[{enum, id, slices, instances}]``."""
        profiles = []
        for enum in range(self.lib.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = self.call("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi_handle, enum,
                                 self.lib.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, gpu=index)
            except NvmlError as exc:
                if exc.code in (ERROR_NOT_SUPPORTED, ERROR_INVALID_ARGUMENT):
                    continue
                raise
            profiles.append({"enum": enum, "id": int(info.id), "slices": int(info.sliceCount),
                             "instances": int(info.instanceCount)})
        return profiles

    def _mig_device_uuids(self, index: int) -> dict[tuple[int, int], str]:
        h = self.handle(index)
        uuids: dict[tuple[int, int], str] = {}
        for slot in range(int(self.call("nvmlDeviceGetMaxMigDeviceCount", h, gpu=index))):
            try:
                mig = self.call("nvmlDeviceGetMigDeviceHandleByIndex", h, slot, gpu=index)
            except NvmlError as exc:
                if exc.code == ERROR_NOT_FOUND:
                    continue
                raise
            key = (int(self.call("nvmlDeviceGetGpuInstanceId", mig, gpu=index)),
                   int(self.call("nvmlDeviceGetComputeInstanceId", mig, gpu=index)))
            uuids[key] = _text(self.call("nvmlDeviceGetUUID", mig, gpu=index))
        return uuids

    def mig_state(self, index: int) -> dict[str, Any]:
        """MIG state of GPU ``index``: ``{supported, current, pending, gpu_instances: [{id, profile_id,
        profile_name, start, size, slices, compute_instances: [{id, profile_id, name, uuid, start, size,
        slices}]}]}`` sorted by placement start. Modes are booleans."""
        mode = self.mig_mode(index)
        if mode is None:
            return {"supported": False, "current": False, "pending": False, "gpu_instances": []}
        state: dict[str, Any] = {"supported": True, "current": bool(mode[0]), "pending": bool(mode[1]),
                                 "gpu_instances": []}
        if not mode[0]:
            return state
        uuids = self._mig_device_uuids(index)
        for gi_handle, info, prof in self._gpu_instance_handles(index):
            gi_id = int(info.id)
            cis = []
            for ci_prof in self.ci_profiles(index, gi_handle):
                array = (self.lib.c_nvmlComputeInstance_t * max(ci_prof["instances"], 1))()
                count = ctypes.c_uint(0)
                self.call("nvmlGpuInstanceGetComputeInstances", gi_handle, ci_prof["id"], array,
                          ctypes.byref(count), gpu=index)
                for i in range(count.value):
                    ci = self.call("nvmlComputeInstanceGetInfo", array[i], gpu=index)
                    slices = ci_prof["slices"]
                    name = prof["name"] if slices == prof["slices"] else f"{slices}c.{prof['name']}"
                    cis.append({"id": int(ci.id), "profile_id": int(ci.profileId), "name": name,
                                "uuid": uuids.get((gi_id, int(ci.id))), "start": int(ci.placement.start),
                                "size": int(ci.placement.size), "slices": slices})
            cis.sort(key=lambda c: (c["start"], c["id"]))
            state["gpu_instances"].append({
                "id": gi_id, "profile_id": int(info.profileId), "profile_name": prof["name"],
                "start": int(info.placement.start), "size": int(info.placement.size), "slices": prof["slices"],
                "compute_instances": cis,
            })
        state["gpu_instances"].sort(key=lambda g: (g["start"], g["id"]))
        return state

    # -- MIG: change --------------------------------------------------------------------------------------
    def set_mig_mode(self, index: int, enabled: bool) -> dict[str, Any]:
        """Request MIG mode on/off. Returns ``{current, pending, activation_status}``; ``current != pending``
        means the change waits for a GPU reset (activation status IN_USE or RESET_REQUIRED)."""
        status = self.call("nvmlDeviceSetMigMode", self.handle(index), 1 if enabled else 0, gpu=index)
        mode = self.mig_mode(index) or (0, 0)
        return {"current": bool(mode[0]), "pending": bool(mode[1]), "activation_status": int(status)}

    def create_gpu_instance(self, index: int, profile_id: int, start: int | None = None) -> dict[str, Any]:
        """Create a GPU instance of ``profile_id``; at placement ``start`` when given (size from the profile).
        Returns ``{id, profile_id, start, size}``."""
        h = self.handle(index)
        if start is None:
            gi = self.call("nvmlDeviceCreateGpuInstance", h, profile_id, gpu=index)
        else:
            size = self._placement_size(index, profile_id, start)
            placement = self.lib.c_nvmlGpuInstancePlacement_t(start, size)
            # pynvml forwards the placement unchanged to a `const nvmlGpuInstancePlacement_t *`: pass it byref.
            gi = self.call("nvmlDeviceCreateGpuInstanceWithPlacement", h, profile_id, ctypes.byref(placement),
                           gpu=index)
        info = self.call("nvmlGpuInstanceGetInfo", gi, gpu=index)
        return {"id": int(info.id), "profile_id": int(info.profileId), "start": int(info.placement.start),
                "size": int(info.placement.size)}

    def _placement_size(self, index: int, profile_id: int, start: int) -> int:
        prof = self._gi_profile_by_id(index, profile_id)
        for p_start, p_size in prof["placements"]:
            if p_start == start:
                return int(p_size)
        offered = ", ".join(f"{p[0]}:{p[1]}" for p in prof["placements"])
        raise NvmlError("nvmlDeviceCreateGpuInstanceWithPlacement", ERROR_INVALID_ARGUMENT,
                        f"profile {prof['name']} has no placement starting at slot {start} (offered: {offered})", index)

    def _gi_handle(self, index: int, gi_id: int) -> Any:
        return self.call("nvmlDeviceGetGpuInstanceById", self.handle(index), gi_id, gpu=index)

    def destroy_gpu_instance(self, index: int, gi_id: int) -> None:
        """Destroy GPU instance ``gi_id`` (its compute instances must be gone)."""
        self.call("nvmlGpuInstanceDestroy", self._gi_handle(index, gi_id), gpu=index)

    def create_compute_instance(self, index: int, gi_id: int, slices: int | None = None,
                                start: int | None = None) -> dict[str, Any]:
        """Create a compute instance of ``slices`` compute slices (default: the whole GPU instance) inside
        GPU instance ``gi_id``, at ``start`` when given. Returns ``{id, profile_id, start, size}``."""
        gi = self._gi_handle(index, gi_id)
        profiles = self.ci_profiles(index, gi)
        if not profiles:
            raise NvmlError("nvmlGpuInstanceGetComputeInstanceProfileInfo", ERROR_NOT_SUPPORTED,
                            f"GPU instance {gi_id} offers no compute-instance profile", index)
        wanted = slices if slices is not None else max(p["slices"] for p in profiles)
        matching = [p for p in profiles if p["slices"] == wanted]
        if not matching:
            raise NvmlError("nvmlGpuInstanceGetComputeInstanceProfileInfo", ERROR_NOT_SUPPORTED,
                            f"GPU instance {gi_id} has no {wanted}-slice compute-instance profile", index)
        profile_id = matching[0]["id"]
        if start is None:
            ci = self.call("nvmlGpuInstanceCreateComputeInstance", gi, profile_id, gpu=index)
        else:
            placement = self.lib.c_nvmlComputeInstancePlacement_t(start, wanted)
            ci = self.call("nvmlGpuInstanceCreateComputeInstanceWithPlacement", gi, profile_id,
                           ctypes.byref(placement), gpu=index)
        info = self.call("nvmlComputeInstanceGetInfo", ci, gpu=index)
        return {"id": int(info.id), "profile_id": int(info.profileId), "start": int(info.placement.start),
                "size": int(info.placement.size)}

    def destroy_compute_instance(self, index: int, gi_id: int, ci_id: int) -> None:
        """Destroy compute instance ``ci_id`` of GPU instance ``gi_id``."""
        gi = self._gi_handle(index, gi_id)
        ci = self.call("nvmlGpuInstanceGetComputeInstanceById", gi, ci_id, gpu=index)
        self.call("nvmlComputeInstanceDestroy", ci, gpu=index)


@contextlib.contextmanager
def nvml_session() -> Iterator[Nvml]:
    """Initialise NVML, yield an :class:`Nvml`, shut NVML down again.

    Raises:
        NvmlUnavailable: bindings not installed, ``libnvidia-ml.so.1`` missing or the driver not loaded.
        NvmlError: any other failure of ``nvmlInit``.
    """
    lib = _import_pynvml()
    session = Nvml(lib)
    session.call("nvmlInit")
    try:
        yield session
    finally:
        with contextlib.suppress(Exception):
            lib.nvmlShutdown()
