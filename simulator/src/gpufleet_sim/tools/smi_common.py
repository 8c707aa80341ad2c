"""Device access shared by the nvidia-smi sub-modules: GPU selection, bus ids, MIG names, NVML error text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from .. import store
from . import _common
from ._common import ToolError

T = TypeVar("T")
NA = "N/A"


@dataclass
class Gpu:
    """One physical GPU as nvidia-smi sees it."""

    index: int
    handle: Any
    bus_id: str


class Smi:
    """NVML (through pynvml) plus nvidia-smi's rules for picking GPUs and reporting errors."""

    def __init__(self) -> None:
        self.nvml: ModuleType = _common.load_pynvml()
        _common.nvml_init(self.nvml)

    # ------------------------------------------------------------------ helpers
    def err_text(self, exc: Exception) -> str:
        """Return NVML's error string for an ``NVMLError``."""
        return str(exc)

    def call(self, func: Callable[..., T], *args: Any, default: Any = NA) -> T | Any:
        """Call an NVML wrapper; NOT_SUPPORTED / FUNCTION_NOT_FOUND / NO_DATA give ``default``."""
        nv = self.nvml
        try:
            return func(*args)
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound, nv.NVMLError_NoData,
                nv.NVMLError_InvalidArgument):
            return default

    def driver_version(self) -> str:
        """The driver version string from the library."""
        return _common.text(self.nvml.nvmlSystemGetDriverVersion())

    def cuda_version(self) -> str:
        """The CUDA version as ``12.8``."""
        value = int(self.nvml.nvmlSystemGetCudaDriverVersion())
        return f"{value // 1000}.{(value % 1000) // 10}"

    def count(self) -> int:
        """Number of GPUs the library reports."""
        return int(self.nvml.nvmlDeviceGetCount())

    @staticmethod
    def state_bus_id(index: int) -> str:
        """A GPU's bus id read from the state (for GPUs whose handle cannot be had, e.g. lost ones)."""
        try:
            for gpu in store.load().get("gpus", []):
                if gpu.get("index") == index:
                    return str(gpu["pci"]["bus_id"])
        except store.StateError:
            pass
        return f"{index}"

    def lost_error(self, index: int) -> ToolError:
        """nvidia-smi's message for a GPU that has fallen off the bus (exit 15)."""
        bus = self.state_bus_id(index)
        short = bus[4:] if len(bus) == 16 else bus
        return ToolError(f"Unable to determine the device handle for GPU{short}: GPU is lost.  "
                         "Reboot the system to recover this GPU\n\n", _common.EXIT_GPU_IS_LOST)

    def gpu(self, index: int) -> Gpu:
        """The GPU with this index (``ToolError`` when it is lost)."""
        nv = self.nvml
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            bus = _common.text(nv.nvmlDeviceGetPciInfo(handle).busId)
        except nv.NVMLError_GpuIsLost as exc:
            raise self.lost_error(index) from exc
        return Gpu(index, handle, bus)

    def index_of(self, handle: Any) -> int:
        """The index of a device handle (by ``nvmlDeviceGetIndex``, else by matching UUIDs)."""
        nv = self.nvml
        try:
            return int(nv.nvmlDeviceGetIndex(handle))
        except nv.NVMLError_FunctionNotFound:
            uuid = _common.text(nv.nvmlDeviceGetUUID(handle))
            for i in range(self.count()):
                if _common.text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))) == uuid:
                    return i
            raise

    def select(self, ident: str | None) -> list[Gpu]:
        """GPUs for ``-i`` (index, UUID, PCI bus id or a comma list; all when None).

        Raises:
            ToolError: "No devices were found" (6) for an unknown id, the lost-GPU message (15).
        """
        if ident is None:
            return [self.gpu(i) for i in range(self.count())]
        result = []
        for part in (p.strip() for p in ident.split(",") if p.strip()):
            result.append(self._one(part))
        return result

    def _one(self, ident: str) -> Gpu:
        nv = self.nvml
        try:
            if ident.isdigit():
                if int(ident) >= self.count():
                    raise ToolError("No devices were found", _common.EXIT_NOT_FOUND)
                return self.gpu(int(ident))
            if ident.upper().startswith(("GPU-", "MIG-")):
                handle = nv.nvmlDeviceGetHandleByUUID(ident)
            elif ":" in ident:
                handle = nv.nvmlDeviceGetHandleByPciBusId(ident)
            else:
                handle = nv.nvmlDeviceGetHandleBySerial(ident)
            return self.gpu(self.index_of(handle))
        except (nv.NVMLError_NotFound, nv.NVMLError_InvalidArgument, nv.NVMLError_FunctionNotFound) as exc:
            raise ToolError("No devices were found", _common.EXIT_NOT_FOUND) from exc

    # ------------------------------------------------------------------ MIG
    def mig_mode(self, handle: Any) -> tuple[int, int] | None:
        """``(current, pending)`` or None when the GPU is not MIG capable."""
        nv = self.nvml
        try:
            current, pending = nv.nvmlDeviceGetMigMode(handle)
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            return None
        return int(current), int(pending)

    def gi_profiles(self, handle: Any) -> list[Any]:
        """The GPU-instance profile infos (v2) the GPU supports, in profile-enum order."""
        nv = self.nvml
        profiles = []
        for enum in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                profiles.append(nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum))
            except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument):
                continue
        return profiles

    def gpu_instances(self, handle: Any) -> list[tuple[Any, Any, Any]]:
        """``(profile_info, gi_handle, gi_info)`` for every GPU instance, sorted by GI id."""
        nv = self.nvml
        found = []
        for prof in self.gi_profiles(handle):
            count = max(int(prof.instanceCount), 1)
            array = (nv.c_nvmlGpuInstance_t * count)()
            num = nv.c_uint()
            try:
                nv.nvmlDeviceGetGpuInstances(handle, prof.id, array, nv.byref(num))
            except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument):
                continue
            for i in range(num.value):
                found.append((prof, array[i], nv.nvmlGpuInstanceGetInfo(array[i])))
        return sorted(found, key=lambda item: int(item[2].id))

    def ci_profiles(self, gi: Any) -> list[Any]:
        """The compute-instance profile infos (v2) a GPU instance supports, in enum order."""
        nv = self.nvml
        profiles = []
        for enum in range(nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                profiles.append(nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, enum, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))
            except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument):
                continue
        return profiles

    def compute_instances(self, gi: Any) -> list[tuple[Any, Any]]:
        """``(ci_profile_info, ci_info)`` for every compute instance of a GI, sorted by CI id."""
        nv = self.nvml
        found = []
        for prof in self.ci_profiles(gi):
            count = max(int(prof.instanceCount), 1)
            array = (nv.c_nvmlComputeInstance_t * count)()
            num = nv.c_uint()
            try:
                nv.nvmlGpuInstanceGetComputeInstances(gi, prof.id, array, nv.byref(num))
            except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument):
                continue
            for i in range(num.value):
                found.append((prof, nv.nvmlComputeInstanceGetInfo(array[i])))
        return sorted(found, key=lambda item: int(item[1].id))


def profile_name(info: Any) -> str:
    """A GI profile's short name (``3g.40gb``) from its v2 info (NVML reports ``MIG 3g.40gb``)."""
    name = _common.text(getattr(info, "name", "")).strip()
    return name[4:] if name.startswith("MIG ") else name


def ci_name(ci_info: Any, gi_info: Any) -> str:
    """A compute instance's name: the GI's name when the CI fills it, else ``<c>c.<gi name>``."""
    gi_short = profile_name(gi_info)
    if int(ci_info.sliceCount) >= int(gi_info.sliceCount):
        return gi_short
    return f"{int(ci_info.sliceCount)}c.{gi_short}"


# NVML_ERROR_IN_USE, NVML_ERROR_INSUFFICIENT_RESOURCES: 535 exits with these codes too (seen with its binary on
# MIG changes), beside the documented ones
PASSED_THROUGH = {19, 23}


def exit_status(nvml_code: int) -> int:
    """nvidia-smi 535's exit status for an NVML failure: the documented codes and PASSED_THROUGH, else 255."""
    return nvml_code if nvml_code in PASSED_THROUGH else _common.exit_status_for(nvml_code)


def on_off(value: Any) -> str:
    """``Enabled`` / ``Disabled`` for an NVML enable state."""
    if value == NA:
        return NA
    return "Enabled" if int(value) else "Disabled"
