"""nvidia-smi's ``--query-gpu`` / ``--query-remapped-rows`` CSV output and the ``-q`` report."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from . import _common
from ._common import ToolError
from .smi_common import NA, Gpu, Smi, on_off

COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada Lovelace",
                 9: "Hopper", 10: "Blackwell"}
EVENT_REASONS = [  # (bit, -q label, indent level, query field suffix)
    (0x1, "Idle", 0, "gpu_idle"),
    (0x2, "Applications Clocks Setting", 0, "applications_clocks_setting"),
    (0x4, "SW Power Cap", 0, "sw_power_cap"),
    (0x8, "HW Slowdown", 0, "hw_slowdown"),
    (0x40, "HW Thermal Slowdown", 1, "hw_thermal_slowdown"),
    (0x80, "HW Power Brake Slowdown", 1, "hw_power_brake_slowdown"),
    (0x10, "Sync Boost", 0, "sync_boost"),
    (0x20, "SW Thermal Slowdown", 0, "sw_thermal_slowdown"),
    (0x100, "Display Clock Setting", 0, "display_clock_setting"),
]
Getter = Callable[[Smi, Gpu], Any]


def _mib(value: int) -> int:
    return int(value) // (1024 * 1024)


def _watts(milliwatts: Any) -> Any:
    return NA if milliwatts == NA else f"{int(milliwatts) / 1000:.2f}"


def _ecc_total(error_type: int, counter: int) -> Getter:
    return lambda s, g: s.call(s.nvml.nvmlDeviceGetTotalEccErrors, g.handle, error_type, counter)


def _ecc_location(error_type: int, counter: int, location: int) -> Getter:
    return lambda s, g: s.call(s.nvml.nvmlDeviceGetMemoryErrorCounter, g.handle, error_type, counter, location)


def _mig(which: int) -> Getter:
    def get(s: Smi, g: Gpu) -> Any:
        mode = s.mig_mode(g.handle)
        return "[N/A]" if mode is None else on_off(mode[which])
    return get


def _reasons(s: Smi, g: Gpu) -> Any:
    return s.call(s.nvml.nvmlDeviceGetCurrentClocksEventReasons, g.handle)


def _reason_bit(bit: int) -> Getter:
    def get(s: Smi, g: Gpu) -> Any:
        value = _reasons(s, g)
        return NA if value == NA else ("Active" if int(value) & bit else "Not Active")
    return get


def _clock(kind: int, maximum: bool = False) -> Getter:
    def get(s: Smi, g: Gpu) -> Any:
        func = s.nvml.nvmlDeviceGetMaxClockInfo if maximum else s.nvml.nvmlDeviceGetClockInfo
        return s.call(func, g.handle, kind)
    return get


def _memory(attr: str) -> Getter:
    return lambda s, g: _mib(getattr(s.nvml.nvmlDeviceGetMemoryInfo(g.handle), attr))


def _used(s: Smi, g: Gpu) -> Any:
    """535's ``memory.used``: what processes and contexts use, without the driver's reserve (memory_v2.used)."""
    info = s.call(s.nvml.nvmlDeviceGetMemoryInfo, g.handle, s.nvml.nvmlMemory_v2)
    return _mib(s.nvml.nvmlDeviceGetMemoryInfo(g.handle).used) if info == NA else _mib(info.used)


def _reserved(s: Smi, g: Gpu) -> Any:
    info = s.call(s.nvml.nvmlDeviceGetMemoryInfo, g.handle, s.nvml.nvmlMemory_v2)
    return NA if info == NA else _mib(info.reserved)


def _temp(s: Smi, g: Gpu) -> Any:
    return s.call(s.nvml.nvmlDeviceGetTemperature, g.handle, s.nvml.NVML_TEMPERATURE_GPU)


def _cc(s: Smi, g: Gpu) -> str:
    major, minor = s.nvml.nvmlDeviceGetCudaComputeCapability(g.handle)
    return f"{major}.{minor}"


def _pstate(s: Smi, g: Gpu) -> Any:
    value = s.call(s.nvml.nvmlDeviceGetPerformanceState, g.handle)
    return NA if value == NA else f"P{int(value)}"


def _ecc_mode(which: int) -> Getter:
    def get(s: Smi, g: Gpu) -> Any:
        mode = s.call(s.nvml.nvmlDeviceGetEccMode, g.handle)
        return NA if mode == NA else on_off(mode[which])
    return get


def _fields() -> dict[str, tuple[str, Getter]]:
    """Canonical field name -> (unit, getter); the getter returns the bare value."""
    nv_type = {"corrected": 0, "uncorrected": 1}
    nv_counter = {"volatile": 0, "aggregate": 1}
    table: dict[str, tuple[str, Getter]] = {
        "timestamp": ("", lambda s, g: time.strftime("%Y/%m/%d %H:%M:%S.000")),
        "driver_version": ("", lambda s, g: s.driver_version()),
        "count": ("", lambda s, g: s.count()),
        "index": ("", lambda s, g: g.index),
        "name": ("", lambda s, g: _common.text(s.nvml.nvmlDeviceGetName(g.handle))),
        "serial": ("", lambda s, g: _common.text(s.call(s.nvml.nvmlDeviceGetSerial, g.handle))),
        "uuid": ("", lambda s, g: _common.text(s.nvml.nvmlDeviceGetUUID(g.handle))),
        "pci.bus_id": ("", lambda s, g: g.bus_id),
        "pci.domain": ("", lambda s, g: f"0x{s.nvml.nvmlDeviceGetPciInfo(g.handle).domain:04X}"),
        "pci.bus": ("", lambda s, g: f"0x{s.nvml.nvmlDeviceGetPciInfo(g.handle).bus:02X}"),
        "pci.device": ("", lambda s, g: f"0x{s.nvml.nvmlDeviceGetPciInfo(g.handle).device:02X}"),
        "pci.device_id": ("", lambda s, g: f"0x{s.nvml.nvmlDeviceGetPciInfo(g.handle).pciDeviceId:08X}"),
        "pci.sub_device_id": ("", lambda s, g: f"0x{s.nvml.nvmlDeviceGetPciInfo(g.handle).pciSubSystemId:08X}"),
        "vbios_version": ("", lambda s, g: _common.text(s.call(s.nvml.nvmlDeviceGetVbiosVersion, g.handle))),
        "inforom.img": ("", lambda s, g: _common.text(s.call(s.nvml.nvmlDeviceGetInforomImageVersion, g.handle))),
        "persistence_mode": ("", lambda s, g: on_off(s.call(s.nvml.nvmlDeviceGetPersistenceMode, g.handle))),
        "compute_mode": ("", lambda s, g: COMPUTE_MODES.get(s.call(s.nvml.nvmlDeviceGetComputeMode, g.handle), NA)),
        "compute_cap": ("", _cc),
        "pstate": ("", _pstate),
        "mig.mode.current": ("", _mig(0)),
        "mig.mode.pending": ("", _mig(1)),
        "memory.total": ("MiB", _memory("total")),
        "memory.used": ("MiB", _used),
        "memory.free": ("MiB", _memory("free")),
        "memory.reserved": ("MiB", _reserved),
        "utilization.gpu": ("%", lambda s, g: s.nvml.nvmlDeviceGetUtilizationRates(g.handle).gpu),
        "utilization.memory": ("%", lambda s, g: s.nvml.nvmlDeviceGetUtilizationRates(g.handle).memory),
        "ecc.mode.current": ("", _ecc_mode(0)),
        "ecc.mode.pending": ("", _ecc_mode(1)),
        "temperature.gpu": ("", _temp),
        "temperature.memory": ("", lambda s, g: "N/A"),  # 535 prints it bare
        "power.draw": ("W", lambda s, g: _watts(s.call(s.nvml.nvmlDeviceGetPowerUsage, g.handle))),
        "power.limit": ("W", lambda s, g: _watts(s.call(s.nvml.nvmlDeviceGetPowerManagementLimit, g.handle))),
        "enforced.power.limit": ("W", lambda s, g: _watts(s.call(s.nvml.nvmlDeviceGetEnforcedPowerLimit, g.handle))),
        "clocks.current.graphics": ("MHz", _clock(0)),
        "clocks.current.sm": ("MHz", _clock(1)),
        "clocks.current.memory": ("MHz", _clock(2)),
        "clocks.current.video": ("MHz", _clock(3)),
        "clocks.max.graphics": ("MHz", _clock(0, True)),
        "clocks.max.sm": ("MHz", _clock(1, True)),
        "clocks.max.memory": ("MHz", _clock(2, True)),
        "pcie.link.gen.current": ("", lambda s, g: s.call(s.nvml.nvmlDeviceGetCurrPcieLinkGeneration, g.handle)),
        "pcie.link.gen.max": ("", lambda s, g: s.call(s.nvml.nvmlDeviceGetMaxPcieLinkGeneration, g.handle)),
        "pcie.link.gen.gpumax": ("", lambda s, g: s.call(s.nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration, g.handle)),
        "pcie.link.width.current": ("", lambda s, g: s.call(s.nvml.nvmlDeviceGetCurrPcieLinkWidth, g.handle)),
        "pcie.link.width.max": ("", lambda s, g: s.call(s.nvml.nvmlDeviceGetMaxPcieLinkWidth, g.handle)),
        "clocks_event_reasons.supported": ("", lambda s, g: "0x00000000000001FF"),
        "clocks_event_reasons.active": ("", lambda s, g: _hex64(_reasons(s, g))),
    }
    for bit, _label, _level, suffix in EVENT_REASONS:
        table[f"clocks_event_reasons.{suffix}"] = ("", _reason_bit(bit))
    for tname, tval in nv_type.items():
        for cname, cval in nv_counter.items():
            table[f"ecc.errors.{tname}.{cname}.total"] = ("", _ecc_total(tval, cval))
            table[f"ecc.errors.{tname}.{cname}.dram"] = ("", _ecc_location(tval, cval, 2))
            table[f"ecc.errors.{tname}.{cname}.sram"] = ("", _ecc_location(tval, cval, 7))
    return table


def _hex64(value: Any) -> str:
    return NA if value == NA else f"0x{int(value):016X}"


FIELDS = _fields()
# the other names NVIDIA's 535 accepts for a field; its CSV header prints the canonical name (checked with its binary)
ALIASES = {
    "gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
    "inforom.image": "inforom.img",
    "clocks.gr": "clocks.current.graphics", "clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video", "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
}
for _bit, _label, _level, _suffix in EVENT_REASONS:
    ALIASES[f"clocks_throttle_reasons.{_suffix}"] = f"clocks_event_reasons.{_suffix}"
ALIASES["clocks_throttle_reasons.active"] = "clocks_event_reasons.active"
ALIASES["clocks_throttle_reasons.supported"] = "clocks_event_reasons.supported"


def parse_format(spec: str | None) -> tuple[bool, bool]:
    """``--format=csv[,noheader][,nounits]`` -> (header, units).

    Raises:
        ToolError: the format is missing or not csv (exit 2, like nvidia-smi).
    """
    if not spec:
        raise ToolError('"--format=" switch is missing. Please run \'nvidia-smi -h\' for help.\n',
                        _common.EXIT_INVALID_ARGUMENT)
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts or parts[0] != "csv" or any(p not in ("csv", "noheader", "nounits") for p in parts):
        # NVIDIA's 535 says "Format modifier is not recognized." here (tests/sim/test_tool_nvidia_smi.py pins this)
        raise ToolError(f'"{spec}" is not a valid format.', _common.EXIT_INVALID_ARGUMENT)
    return "noheader" not in parts, "nounits" not in parts


def _resolve_fields(spec: str) -> list[str]:
    names = []
    for raw in (f.strip() for f in spec.split(",")):
        if not raw:
            continue
        name = ALIASES.get(raw, raw)
        if name not in FIELDS:
            raise ToolError(f'Field "{raw}" is not a valid field to query.\n', _common.EXIT_INVALID_ARGUMENT)
        names.append(name)
    if not names:
        raise ToolError("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.",
                        _common.EXIT_INVALID_ARGUMENT)
    return names


def _cell(value: Any, unit: str, units: bool) -> str:
    if value == NA:
        return "[N/A]"
    text = _common.text(value)
    if text == "[N/A]":
        return text
    return f"{text} {unit}" if unit and units else text


def query_gpu(smi: Smi, gpus: list[Gpu], spec: str, fmt: str | None) -> str:
    """The CSV for ``--query-gpu=spec --format=fmt``."""
    names = _resolve_fields(spec)
    header, units = parse_format(fmt)
    lines = []
    if header:
        lines.append(", ".join(f"{n} [{FIELDS[n][0]}]" if FIELDS[n][0] and units else n for n in names))
    for gpu in gpus:
        lines.append(", ".join(_cell(FIELDS[n][1](smi, gpu), FIELDS[n][0], units) for n in names))
    return "\n".join(lines)


REMAP_FIELDS = ("gpu_bus_id", "gpu_uuid", "remapped_rows.correctable", "remapped_rows.uncorrectable",
                "remapped_rows.pending", "remapped_rows.failure")


def query_remapped_rows(smi: Smi, gpus: list[Gpu], spec: str, fmt: str | None) -> str:
    """The CSV for ``--query-remapped-rows=spec --format=fmt``."""
    names = [f.strip() for f in spec.split(",") if f.strip()]
    for name in names:
        if name not in REMAP_FIELDS:
            raise ToolError(f'Field "{name}" is not a valid field to query.\n', _common.EXIT_INVALID_ARGUMENT)
    header, _units = parse_format(fmt)
    lines = [", ".join(names)] if header else []
    for gpu in gpus:
        rows = smi.call(smi.nvml.nvmlDeviceGetRemappedRows, gpu.handle)
        values = {"gpu_bus_id": gpu.bus_id, "gpu_uuid": _common.text(smi.nvml.nvmlDeviceGetUUID(gpu.handle))}
        for i, key in enumerate(REMAP_FIELDS[2:]):
            values[key] = "[N/A]" if rows == NA else str(int(rows[i]))
        lines.append(", ".join(values[n] for n in names))
    return "\n".join(lines)


# --query-compute-apps: field (and alias) -> the CSV header NVIDIA's 535 prints
COMPUTE_APP_FIELDS = {"timestamp": "timestamp", "gpu_name": "gpu_name", "gpu_bus_id": "gpu_bus_id",
                      "gpu_serial": "gpu_serial", "gpu_uuid": "gpu_uuid", "pid": "pid",
                      "process_name": "process_name", "name": "process_name",
                      "used_gpu_memory": "used_gpu_memory [MiB]", "used_memory": "used_gpu_memory [MiB]"}


def query_compute_apps(smi: Smi, gpus: list[Gpu], spec: str, fmt: str | None,
                       name_of: Callable[[int], str]) -> str:
    """The CSV for ``--query-compute-apps=spec --format=fmt``: one line per compute process (``C`` or ``C+G``), GPU
    by GPU, in the driver's order (MIG devices' processes included); ``name_of`` gives a process's name."""
    names = [f.strip() for f in spec.split(",") if f.strip()]
    for name in names:
        if name not in COMPUTE_APP_FIELDS:
            raise ToolError(f'Field "{name}" is not a valid field to query.\n', _common.EXIT_INVALID_ARGUMENT)
    header, units = parse_format(fmt)
    nv = smi.nvml
    lines = [", ".join(COMPUTE_APP_FIELDS[n] for n in names)] if header else []
    stamp = time.strftime("%Y/%m/%d %H:%M:%S.") + f"{int(time.time() * 1000) % 1000:03d}"
    for gpu in gpus:
        procs = smi.call(nv.nvmlDeviceGetComputeRunningProcesses, gpu.handle, default=[])
        for proc in procs if procs != NA else []:
            used = proc.usedGpuMemory
            values = {"timestamp": stamp, "gpu_name": _common.text(nv.nvmlDeviceGetName(gpu.handle)),
                      "gpu_bus_id": gpu.bus_id, "gpu_serial": _common.text(nv.nvmlDeviceGetSerial(gpu.handle)),
                      "gpu_uuid": _common.text(nv.nvmlDeviceGetUUID(gpu.handle)), "pid": str(int(proc.pid)),
                      "process_name": name_of(int(proc.pid)),
                      "used_gpu_memory [MiB]": "[N/A]" if used is None else
                      f"{_mib(used)} MiB" if units else str(_mib(used))}
            lines.append(", ".join(values[COMPUTE_APP_FIELDS[n]] for n in names))
    return "\n".join(lines)
