"""``nvidia-smi -q``: the NVSMI LOG, line for line as NVIDIA's 535 ``nvidia-smi`` prints it.

Every value comes from the NVML call NVIDIA's binary makes for that line; an NVML answer of NOT_SUPPORTED prints
``N/A``, as 535 does. NVIDIA's binary reads a few lines (addressing mode, GPU and FRU part numbers, PCIe host max,
atomic caps, relaxed ordering, sparse operation mode, T.Limit temperature, deferred clocks, voltage) through slots
of the undocumented export table, which the simulated library does not fill: there it prints ``Uninitialized``,
here ``N/A`` (docs/simulator.md lists this difference). On Ampere and newer it reads the SRAM ECC counters the same
way (``N/A`` there); this report prints the state's counters.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

from . import _common
from .smi_common import NA, Gpu, Smi, on_off
from .smi_query import ARCHITECTURES, COMPUTE_MODES, EVENT_REASONS, FIELDS
from .smi_report import _processes

KEY_WIDTH = 42
AMPERE = 7
BRANDS = {0: "Unknown", 1: "Quadro", 2: "Tesla", 3: "NVS", 4: "Grid", 5: "GeForce", 6: "Titan", 7: "NVIDIA vApps",
          8: "NVIDIA Virtual PC", 9: "NVIDIA Virtual Compute Server", 10: "NVIDIA RTX Virtual Workstation",
          11: "NVIDIA Cloud Gaming", 12: "Quadro RTX", 13: "NVIDIA RTX", 14: "NVIDIA", 15: "GeForce RTX",
          16: "Titan RTX"}
VIRTUALIZATION = {0: "None", 1: "Pass-Through", 2: "VGPU", 3: "Host VGPU", 4: "Host VSGA"}
# the lines 535 reads through export-table slots (Uninitialized on the simulator)
EXPORT_TABLE = NA
# nvml.h fabric states; NOT_SUPPORTED (0, a GPU without a fabric) prints N/A: NVIDIA's 535 on the simulator and 580 on
# the real H200 passed through to a VM (ground truth h200-sxm-passthrough-r580/nvidia-smi/q.txt: "State : N/A")
FABRIC_STATES = {0: NA, 1: "Not Started", 2: "In Progress", 3: "Completed"}


def line(level: int, key: str, value: Any = None) -> str:
    """One ``key : value`` line of the log at indent ``level`` (a heading without value)."""
    label = "    " * level + key
    if value is None:
        return label
    return f"{label:<{KEY_WIDTH}}: {_common.text(value)}"


def _mib(value: int) -> int:
    return int(value) // (1024 * 1024)


def _unit(value: Any, unit: str) -> Any:
    return NA if value == NA else f"{value} {unit}"


def _watts(milliwatts: Any) -> Any:
    return NA if milliwatts == NA else f"{int(milliwatts) / 1000:.2f} W"


def _field(smi: Smi, gpu: Gpu, name: str) -> Any:
    return FIELDS[name][1](smi, gpu)


DISPLAY = ("MEMORY", "UTILIZATION", "ECC", "TEMPERATURE", "POWER", "CLOCK", "COMPUTE", "PIDS", "PERFORMANCE",
           "SUPPORTED_CLOCKS", "PAGE_RETIREMENT", "ACCOUNTING", "ENCODER_STATS", "SUPPORTED_GPU_TARGET_TEMP",
           "VOLTAGE", "FBC_STATS", "ROW_REMAPPER", "RESET_STATUS")
FULL = "full"   # a block of the whole log that no -d type selects
ONLY = "only"   # a block printed only when its -d type is asked (the samples, supported clocks, ...)


def parse_display(spec: str | None) -> set[str] | None:
    """``-d TYPE,...`` -> the set of types (None: the whole log).

    Raises:
        ToolError: an unknown type (exit 2, 535's message).
    """
    if spec is None:
        return None
    types = {part.strip().upper() for part in spec.split(",")}
    if not types <= set(DISPLAY):
        raise _common.ToolError("Failed to parse --display/-d flags", _common.EXIT_INVALID_ARGUMENT)
    return types


def query(smi: Smi, gpus: list[Gpu], display: set[str] | None = None) -> str:
    """The ``-q`` log for ``gpus``: everything, or only the blocks of the ``-d`` types in ``display``."""
    out = ["", "==============NVSMI LOG==============", "",
           line(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
           line(0, "Driver Version", smi.driver_version()),
           line(0, "CUDA Version", smi.cuda_version()), "",
           line(0, "Attached GPUs", smi.count())]
    for gpu in gpus:
        out.append(f"GPU {gpu.bus_id}")
        for tag, extra, lines in gpu_blocks(smi, gpu):
            if (display is None and not extra) or (display is not None and tag in display):
                out += lines
        out.append("")
    return "\n".join(out) + "\n"


Block = tuple[str, bool, list[str]]  # (-d type or FULL, printed only with -d, lines)


def gpu_blocks(smi: Smi, gpu: Gpu) -> list[Block]:
    """One GPU's part of the log as blocks in 535's order, each with the ``-d`` type that selects it."""
    nv, h = smi.nvml, gpu.handle
    call = smi.call
    arch = call(nv.nvmlDeviceGetArchitecture, h)
    mig = smi.mig_mode(h)
    pci = nv.nvmlDeviceGetPciInfo(h)
    brand = call(nv.nvmlDeviceGetBrand, h)
    blocks: list[Block] = [(FULL, False, [
           line(1, "Product Name", _field(smi, gpu, "name")),
           line(1, "Product Brand", BRANDS.get(brand, NA) if brand != NA else NA),
           line(1, "Product Architecture", ARCHITECTURES.get(arch, NA) if arch != NA else NA),
           line(1, "Display Mode", on_off(call(nv.nvmlDeviceGetDisplayMode, h))),
           line(1, "Display Active", on_off(call(nv.nvmlDeviceGetDisplayActive, h))),
           line(1, "Persistence Mode", _field(smi, gpu, "persistence_mode")),
           line(1, "Addressing Mode", EXPORT_TABLE),
           line(1, "MIG Mode"),
           line(2, "Current", on_off(mig[0]) if mig else NA),
           line(2, "Pending", on_off(mig[1]) if mig else NA)])]
    if mig and mig[0]:
        blocks.append((FULL, False, _mig_devices(smi, gpu)))
    blocks.append(("ACCOUNTING", False, [
        line(1, "Accounting Mode", on_off(call(nv.nvmlDeviceGetAccountingMode, h))),
        line(1, "Accounting Mode Buffer Size", call(nv.nvmlDeviceGetAccountingBufferSize, h))]))
    head = [line(1, "Driver Model"), line(2, "Current", NA), line(2, "Pending", NA),  # Windows only
            line(1, "Serial Number", _field(smi, gpu, "serial")),
            line(1, "GPU UUID", _field(smi, gpu, "uuid")),
            line(1, "Minor Number", call(nv.nvmlDeviceGetMinorNumber, h)),
            line(1, "VBIOS Version", _field(smi, gpu, "vbios_version")),
            line(1, "MultiGPU Board", _yes_no(call(nv.nvmlDeviceGetMultiGpuBoard, h))),
            line(1, "Board ID", _hex(call(nv.nvmlDeviceGetBoardId, h))),
            line(1, "Board Part Number", _common.text(call(nv.nvmlDeviceGetBoardPartNumber, h))),
            line(1, "GPU Part Number", EXPORT_TABLE),
            line(1, "FRU Part Number", EXPORT_TABLE),
            line(1, "Module ID", call(nv.nvmlDeviceGetModuleId, h)),
            line(1, "Inforom Version"),
            line(2, "Image Version", _field(smi, gpu, "inforom.img"))]
    for label, kind in (("OEM Object", 0), ("ECC Object", 1), ("Power Management Object", 2)):
        head.append(line(2, label, _common.text(call(nv.nvmlDeviceGetInforomVersion, h, kind))))
    virt = call(nv.nvmlDeviceGetVirtualizationMode, h)
    head += [line(1, "Inforom BBX Object Flush"), line(2, "Latest Timestamp", NA), line(2, "Latest Duration", NA),
             line(1, "GPU Operation Mode"), *_pair(call(nv.nvmlDeviceGetGpuOperationMode, h)),
             line(1, "GSP Firmware Version", _common.text(call(nv.nvmlDeviceGetGspFirmwareVersion, h))),
             line(1, "GPU Virtualization Mode"),
             line(2, "Virtualization Mode", VIRTUALIZATION.get(virt, NA) if virt != NA else NA),
             line(2, "Host VGPU Mode", NA if call(nv.nvmlDeviceGetHostVgpuMode, h) == NA else "Non SR-IOV")]
    blocks += [(FULL, False, head),
               ("RESET_STATUS", False, [line(1, "GPU Reset Status"),
                                        line(2, "Reset Required", _yes_no(field_value(smi, h, FI_RESET_STATUS))),
                                        line(2, "Drain and Reset Recommended",
                                             _yes_no(field_value(smi, h, FI_DRAIN_AND_RESET_STATUS)))]),
               (FULL, False, [line(1, "IBMNPU"), line(2, "Relaxed Ordering Mode", EXPORT_TABLE),
                              *_pci(smi, gpu, pci),
                              line(1, "Fan Speed", _unit(call(nv.nvmlDeviceGetFanSpeed, h), "%"))])]
    performance = [line(1, "Performance State", _field(smi, gpu, "pstate")), line(1, "Clocks Event Reasons")]
    reasons = _field(smi, gpu, "clocks_event_reasons.active")
    for bit, label, level, _suffix in EVENT_REASONS:
        active = NA if reasons == NA else ("Active" if int(reasons, 16) & bit else "Not Active")
        performance.append(line(2 + level, label, active))
    performance.append(line(1, "Sparse Operation Mode", EXPORT_TABLE))
    ampere = arch != NA and int(arch) >= AMPERE
    util, encoder, fbc = _utilization(smi, gpu)
    blocks += [("PERFORMANCE", False, performance),
               ("MEMORY", False, _memory(smi, gpu)),
               ("COMPUTE", False, [line(1, "Compute Mode", COMPUTE_MODES.get(call(nv.nvmlDeviceGetComputeMode, h),
                                                                             NA))]),
               ("UTILIZATION", False, util),
               ("UTILIZATION", True, [*_samples(smi, h, "GPU Utilization Samples", 1, "%"),
                                      *_samples(smi, h, "Memory Utilization Samples", 2, "%"),
                                      *_samples(smi, h, "ENC Utilization Samples", 3, "%"),
                                      *_samples(smi, h, "DEC Utilization Samples", 4, "%")]),
               ("ENCODER_STATS", False, encoder),
               ("FBC_STATS", False, fbc),
               ("ECC", False, [line(1, "ECC Mode"), line(2, "Current", _field(smi, gpu, "ecc.mode.current")),
                               line(2, "Pending", _field(smi, gpu, "ecc.mode.pending")),
                               *_ecc(smi, gpu, ampere)]),
               ("PAGE_RETIREMENT", False, _retired_pages(smi, gpu)),
               ("ROW_REMAPPER", False, _remapped_rows(smi, gpu)),
               ("TEMPERATURE", False, _temperature(smi, gpu)),
               ("SUPPORTED_GPU_TARGET_TEMP", True, [line(1, "Supported GPU_TARGET_TEMP"), line(2, "Min", NA),
                                                    line(2, "Max", NA)])]
    power, module = _power(smi, gpu)
    clocks, policy = _clocks(smi, gpu)
    blocks += [("POWER", False, power), ("POWER", True, _samples(smi, h, "Power Samples", 0, "W")),
               ("POWER", False, module),
               ("CLOCK", False, clocks),
               ("CLOCK", True, [*_samples(smi, h, "SM Clock Samples", 5, "MHz"),
                                *_samples(smi, h, "Memory Clock Samples", 6, "MHz")]),
               ("CLOCK", False, policy),
               ("VOLTAGE", False, [line(1, "Voltage"), line(2, "Graphics", EXPORT_TABLE)]),
               ("SUPPORTED_CLOCKS", True, _supported_clocks(smi, h)),
               (FULL, False, _fabric(smi, gpu)),
               ("PIDS", False, _processes(smi, gpu)),
               ("ACCOUNTING", True, [line(1, "Accounted Processes", accounted_processes(smi, h))])]
    return blocks


# field ids (nvml.h) 535 reads for the reset status and the PCIe replay rollovers
FI_PCIE_REPLAY_ROLLOVER_COUNTER, FI_RESET_STATUS, FI_DRAIN_AND_RESET_STATUS = 95, 226, 227
SAMPLE_KEYS = ("Duration", "Number of Samples", "Max", "Min", "Avg")


def field_value(smi: Smi, h: Any, field_id: int) -> Any:
    """One field's unsigned value (nvmlDeviceGetFieldValues), N/A when the library does not report it."""
    values = smi.call(smi.nvml.nvmlDeviceGetFieldValues, h, [field_id])
    if values == NA or values[0].nvmlReturn != 0:
        return NA
    return int(values[0].value.uiVal)


def _samples(smi: Smi, h: Any, title: str, kind: int, unit: str) -> list[str]:
    """A samples block as 535 prints nvmlDeviceGetSamples' answer: N/A where not supported, Not Found where no
    sample was taken, else the span, the count and max/min/average (power in W from mW)."""
    nv = smi.nvml
    try:
        _kind, samples = nv.nvmlDeviceGetSamples(h, kind, 0)
    except nv.NVMLError_NotFound:
        return [line(1, title), *(line(2, key, "Not Found") for key in SAMPLE_KEYS)]
    except nv.NVMLError:
        return [line(1, title), *(line(2, key, NA) for key in SAMPLE_KEYS)]
    if not samples:
        return [line(1, title), *(line(2, key, NA) for key in SAMPLE_KEYS)]
    values = [s.sampleValue.uiVal for s in samples]
    span = (samples[-1].timeStamp - samples[0].timeStamp) / 1e6

    def shown(value: float) -> str:
        return f"{value / 1000:.2f} W" if unit == "W" else f"{int(value)} {unit}"

    return [line(1, title), line(2, "Duration", f"{span:.2f} sec"), line(2, "Number of Samples", len(values)),
            line(2, "Max", shown(max(values))), line(2, "Min", shown(min(values))),
            line(2, "Avg", shown(sum(values) / len(values)))]


def supported_memory_clocks(smi: Smi, h: Any) -> Any:
    """[(memory MHz, [graphics MHz] or N/A)] from NVML, or N/A where the board lists none."""
    nv = smi.nvml
    memory = smi.call(nv.nvmlDeviceGetSupportedMemoryClocks, h)
    if memory == NA:
        return NA
    return [(mem, smi.call(nv.nvmlDeviceGetSupportedGraphicsClocks, h, mem)) for mem in memory]


def _supported_clocks(smi: Smi, h: Any) -> list[str]:
    clocks = supported_memory_clocks(smi, h)
    if clocks == NA:
        return [line(1, "Supported Clocks", NA)]
    out = [line(1, "Supported Clocks")]
    for mem, graphics in clocks:
        out.append(line(2, "Memory", f"{mem} MHz"))
        out += [line(3, "Graphics", NA)] if graphics == NA else [line(3, "Graphics", f"{g} MHz") for g in graphics]
    return out


def accounted_processes(smi: Smi, h: Any) -> Any:
    """'None' when accounting lists no process, N/A where the board does not answer (535's wording)."""
    pids = smi.call(smi.nvml.nvmlDeviceGetAccountingPids, h)
    return NA if pids == NA else ("None" if not pids else NA)


def _yes_no(value: Any) -> Any:
    return NA if value == NA else ("Yes" if value else "No")


def _hex(value: Any) -> Any:
    return NA if value == NA else f"0x{int(value):x}"


def _pair(value: Any) -> list[str]:
    current, pending = (NA, NA) if value == NA else value
    return [line(2, "Current", current), line(2, "Pending", pending)]


def _pci(smi: Smi, gpu: Gpu, pci: Any) -> list[str]:
    nv, h, call = smi.nvml, gpu.handle, smi.call
    bridge = call(nv.nvmlDeviceGetBridgeChipInfo, h)
    throughput = [call(nv.nvmlDeviceGetPcieThroughput, h, kind) for kind in (0, 1)]
    return [line(1, "PCI"),
            line(2, "Bus", f"0x{pci.bus:02X}"),
            line(2, "Device", f"0x{pci.device:02X}"),
            line(2, "Domain", f"0x{pci.domain:04X}"),
            line(2, "Device Id", f"0x{pci.pciDeviceId:08X}"),
            line(2, "Bus Id", gpu.bus_id),
            line(2, "Sub System Id", f"0x{pci.pciSubSystemId:08X}"),
            line(2, "GPU Link Info"),
            line(3, "PCIe Generation"),
            line(4, "Max", _field(smi, gpu, "pcie.link.gen.max")),
            line(4, "Current", _field(smi, gpu, "pcie.link.gen.current")),
            line(4, "Device Current", _field(smi, gpu, "pcie.link.gen.current")),
            line(4, "Device Max", _field(smi, gpu, "pcie.link.gen.gpumax")),
            line(4, "Host Max", EXPORT_TABLE),
            line(3, "Link Width"),
            line(4, "Max", _unit(_field(smi, gpu, "pcie.link.width.max"), "").replace(" ", "x")),
            line(4, "Current", _unit(_field(smi, gpu, "pcie.link.width.current"), "").replace(" ", "x")),
            line(2, "Bridge Chip"),
            line(3, "Type", NA if bridge == NA else bridge.bridgeChipInfo[0].type),
            line(3, "Firmware", NA if bridge == NA else bridge.bridgeChipInfo[0].fwVersion),
            line(2, "Replays Since Reset", call(nv.nvmlDeviceGetPcieReplayCounter, h)),
            line(2, "Replay Number Rollovers", field_value(smi, h, FI_PCIE_REPLAY_ROLLOVER_COUNTER)),
            line(2, "Tx Throughput", _unit(throughput[0], "KB/s")),
            line(2, "Rx Throughput", _unit(throughput[1], "KB/s")),
            line(2, "Atomic Caps Inbound", EXPORT_TABLE),
            line(2, "Atomic Caps Outbound", EXPORT_TABLE)]


def _usage(level: int, title: str, total: Any, used: Any, free: Any, reserved: Any = None) -> list[str]:
    out = [line(level, title), line(level + 1, "Total", _unit(total, "MiB"))]
    if reserved is not None:
        out.append(line(level + 1, "Reserved", _unit(reserved, "MiB")))
    return [*out, line(level + 1, "Used", _unit(used, "MiB")), line(level + 1, "Free", _unit(free, "MiB"))]


def _memory(smi: Smi, gpu: Gpu) -> list[str]:
    nv, h, call = smi.nvml, gpu.handle, smi.call
    total = _field(smi, gpu, "memory.total")
    used, reserved = _field(smi, gpu, "memory.used"), _field(smi, gpu, "memory.reserved")
    free = total - used - (0 if reserved == NA else reserved)
    out = _usage(1, "FB Memory Usage", total, used, free, reserved)
    bar1 = call(nv.nvmlDeviceGetBAR1MemoryInfo, h)
    out += _usage(1, "BAR1 Memory Usage", *((NA,) * 3 if bar1 == NA else
                                             (_mib(bar1.bar1Total), _mib(bar1.bar1Used), _mib(bar1.bar1Free))))
    protected = call(nv.nvmlDeviceGetConfComputeProtectedMemoryUsage, h)
    return out + _usage(1, "Conf Compute Protected Memory Usage", *((NA,) * 3 if protected == NA else (
        _mib(protected.total), _mib(protected.used), _mib(protected.free))))


def _utilization(smi: Smi, gpu: Gpu) -> tuple[list[str], list[str], list[str]]:
    nv, h, call = smi.nvml, gpu.handle, smi.call
    rates = call(nv.nvmlDeviceGetUtilizationRates, h)
    coded = [call(f, h) for f in (nv.nvmlDeviceGetEncoderUtilization, nv.nvmlDeviceGetDecoderUtilization,
                                  nv.nvmlDeviceGetJpgUtilization, nv.nvmlDeviceGetOfaUtilization)]
    out = [line(1, "Utilization"),
           line(2, "Gpu", NA if rates == NA else f"{rates.gpu} %"),
           line(2, "Memory", NA if rates == NA else f"{rates.memory} %")]
    for label, value in zip(("Encoder", "Decoder", "JPEG", "OFA"), coded, strict=True):
        out.append(line(2, label, NA if value == NA else f"{value[0]} %"))
    encoder, fbc = call(nv.nvmlDeviceGetEncoderStats, h), call(nv.nvmlDeviceGetFBCStats, h)
    return (out, [line(1, "Encoder Stats"), *_stats(None if encoder == NA else encoder)],
            [line(1, "FBC Stats"), *_stats(None if fbc == NA else (fbc.sessionsCount, fbc.averageFPS,
                                                                   fbc.averageLatency))])


def _stats(values: Any) -> list[str]:
    sessions, fps, latency = (NA, NA, NA) if values is None else values
    return [line(2, "Active Sessions", sessions), line(2, "Average FPS", fps),
            line(2, "Average Latency", latency)]


def _ecc(smi: Smi, gpu: Gpu, ampere: bool) -> list[str]:
    out = [line(1, "ECC Errors")]
    for counter in ("volatile", "aggregate"):
        out.append(line(2, counter.capitalize()))
        if ampere:
            out += [line(3, "SRAM Correctable", _field(smi, gpu, f"ecc.errors.corrected.{counter}.sram")),
                    line(3, "SRAM Uncorrectable Parity", NA),
                    line(3, "SRAM Uncorrectable SEC-DED", _field(smi, gpu, f"ecc.errors.uncorrected.{counter}.sram"))]
        else:
            out += [line(3, "SRAM Correctable", _field(smi, gpu, f"ecc.errors.corrected.{counter}.sram")),
                    line(3, "SRAM Uncorrectable", _field(smi, gpu, f"ecc.errors.uncorrected.{counter}.sram"))]
        out += [line(3, "DRAM Correctable", _field(smi, gpu, f"ecc.errors.corrected.{counter}.dram")),
                line(3, "DRAM Uncorrectable", _field(smi, gpu, f"ecc.errors.uncorrected.{counter}.dram"))]
        if ampere and counter == "aggregate":
            out.append(line(3, "SRAM Threshold Exceeded", NA))
    if ampere:
        out += [line(2, "Aggregate Uncorrectable SRAM Sources"),
                *(line(3, f"SRAM {where}", NA) for where in ("L2", "SM", "Microcontroller", "PCIE", "Other"))]
    return out


def _retired_pages(smi: Smi, gpu: Gpu) -> list[str]:
    nv, h, call = smi.nvml, gpu.handle, smi.call
    single = call(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    double = call(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    pending = call(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    return [line(1, "Retired Pages"),
            line(2, "Single Bit ECC", NA if single == NA else len(single)),
            line(2, "Double Bit ECC", NA if double == NA else len(double)),
            line(2, "Pending Page Blacklist", _yes_no(pending))]


def _remapped_rows(smi: Smi, gpu: Gpu) -> list[str]:
    nv, h, call = smi.nvml, gpu.handle, smi.call
    rows = call(nv.nvmlDeviceGetRemappedRows, h)
    if rows == NA:
        return [line(1, "Remapped Rows", NA)]
    corr, unc, pending, failure = (int(v) for v in rows)
    out = [line(1, "Remapped Rows"),
           line(2, "Correctable Error", corr),
           line(2, "Uncorrectable Error", unc),
           line(2, "Pending", "Yes" if pending else "No"),
           line(2, "Remapping Failure Occurred", "Yes" if failure else "No")]
    hist = call(nv.nvmlDeviceGetRowRemapperHistogram, h)
    if hist != NA:
        out.append(line(2, "Bank Remap Availability Histogram"))
        for label in ("Max", "High", "Partial", "Low", "None"):
            out.append(line(3, label, f"{getattr(hist, label.lower())} bank(s)"))
    return out


def _temperature(smi: Smi, gpu: Gpu) -> list[str]:
    nv, h, call = smi.nvml, gpu.handle, smi.call

    def threshold(kind: int) -> Any:
        return _unit(call(nv.nvmlDeviceGetTemperatureThreshold, h, kind), "C")

    return [line(1, "Temperature"),
            line(2, "GPU Current Temp", _unit(_field(smi, gpu, "temperature.gpu"), "C")),
            line(2, "GPU T.Limit Temp", EXPORT_TABLE),
            line(2, "GPU Shutdown T.Limit Temp", threshold(0)),
            line(2, "GPU Slowdown T.Limit Temp", threshold(1)),
            line(2, "GPU Max Operating T.Limit Temp", threshold(3)),
            line(2, "GPU Target Temperature", NA),
            line(2, "Memory Current Temp", NA),
            line(2, "Memory Max Operating T.Limit Temp", threshold(2))]


def _power(smi: Smi, gpu: Gpu) -> tuple[list[str], list[str]]:
    nv, h, call = smi.nvml, gpu.handle, smi.call
    limits = call(nv.nvmlDeviceGetPowerManagementLimitConstraints, h)
    low, high = (NA, NA) if limits == NA else limits
    out = [line(1, "GPU Power Readings"),
           line(2, "Power Draw", _watts(call(nv.nvmlDeviceGetPowerUsage, h))),
           line(2, "Current Power Limit", _watts(call(nv.nvmlDeviceGetEnforcedPowerLimit, h))),
           line(2, "Requested Power Limit", _watts(call(nv.nvmlDeviceGetPowerManagementLimit, h))),
           line(2, "Default Power Limit", _watts(call(nv.nvmlDeviceGetPowerManagementDefaultLimit, h))),
           line(2, "Min Power Limit", _watts(low)),
           line(2, "Max Power Limit", _watts(high))]
    labels = ("Power Draw", "Current Power Limit", "Requested Power Limit", "Default Power Limit",
              "Min Power Limit", "Max Power Limit")
    return out, [line(1, "Module Power Readings"), *(line(2, label, NA) for label in labels)]


def _clocks(smi: Smi, gpu: Gpu) -> tuple[list[str], list[str]]:
    nv, h, call = smi.nvml, gpu.handle, smi.call

    def mhz(func: Any, kind: int) -> Any:
        return _unit(call(func, h, kind), "MHz")

    current, maximum = nv.nvmlDeviceGetClockInfo, nv.nvmlDeviceGetMaxClockInfo
    boost = call(nv.nvmlDeviceGetAutoBoostedClocksEnabled, h)
    return [line(1, "Clocks"),
            line(2, "Graphics", mhz(current, 0)), line(2, "SM", mhz(current, 1)),
            line(2, "Memory", mhz(current, 2)), line(2, "Video", mhz(current, 3)),
            line(1, "Applications Clocks"),
            line(2, "Graphics", mhz(nv.nvmlDeviceGetApplicationsClock, 0)),
            line(2, "Memory", mhz(nv.nvmlDeviceGetApplicationsClock, 2)),
            line(1, "Default Applications Clocks"),
            line(2, "Graphics", mhz(nv.nvmlDeviceGetDefaultApplicationsClock, 0)),
            line(2, "Memory", mhz(nv.nvmlDeviceGetDefaultApplicationsClock, 2)),
            line(1, "Deferred Clocks"), line(2, "Memory", EXPORT_TABLE),
            line(1, "Max Clocks"),
            line(2, "Graphics", mhz(maximum, 0)), line(2, "SM", mhz(maximum, 1)),
            line(2, "Memory", mhz(maximum, 2)), line(2, "Video", mhz(maximum, 3)),
            line(1, "Max Customer Boost Clocks"),
            line(2, "Graphics", mhz(nv.nvmlDeviceGetMaxCustomerBoostClock, 0))], [
            line(1, "Clock Policy"),
            line(2, "Auto Boost", NA if boost == NA else on_off(boost[0]).replace("Enabled", "On")
                 .replace("Disabled", "Off")),
            line(2, "Auto Boost Default", NA if boost == NA else on_off(boost[1]).replace("Enabled", "On")
                 .replace("Disabled", "Off"))]


def _fabric(smi: Smi, gpu: Gpu) -> list[str]:
    nv = smi.nvml
    info = nv.c_nvmlGpuFabricInfo_t()
    try:
        nv.nvmlDeviceGetGpuFabricInfo(gpu.handle, ctypes.byref(info))  # the wrapper passes the pointer on
        state = FABRIC_STATES.get(int(info.state), NA)
        status = NA if int(info.state) != 3 else ("Success" if int(info.status) == 0 else
                                                   _common.text(nv.nvmlErrorString(int(info.status))))
    except nv.NVMLError:
        state = status = NA
    return [line(1, "Fabric"), line(2, "State", state), line(2, "Status", status)]


def _mig_devices(smi: Smi, gpu: Gpu) -> list[str]:
    nv, call = smi.nvml, smi.call
    out: list[str] = []
    for index in range(int(call(nv.nvmlDeviceGetMaxMigDeviceCount, gpu.handle, default=0))):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, index)
        except nv.NVMLError:
            continue
        attrs = nv.nvmlDeviceGetAttributes_v2(mig)
        mem = nv.nvmlDeviceGetMemoryInfo(mig)
        bar1 = call(nv.nvmlDeviceGetBAR1MemoryInfo, mig)
        sram = call(nv.nvmlDeviceGetMemoryErrorCounter, mig, 1, 0, 7)
        out += [line(1, "MIG Device"),
                line(2, "Index", index),
                line(2, "GPU Instance ID", nv.nvmlDeviceGetGpuInstanceId(mig)),
                line(2, "Compute Instance ID", nv.nvmlDeviceGetComputeInstanceId(mig)),
                line(2, "Device Attributes"), line(3, "Shared"),
                line(4, "Multiprocessor count", attrs.multiprocessorCount),
                line(4, "Copy Engine count", attrs.sharedCopyEngineCount),
                line(4, "Encoder count", attrs.sharedEncoderCount),
                line(4, "Decoder count", attrs.sharedDecoderCount),
                line(4, "OFA count", attrs.sharedOfaCount),
                line(4, "JPG count", attrs.sharedJpegCount),
                line(2, "ECC Errors"), line(3, "Volatile"), line(4, "SRAM Uncorrectable", sram),
                *_usage(2, "FB Memory Usage", _mib(mem.total), _mib(mem.used), _mib(mem.free), 0),
                *_usage(2, "BAR1 Memory", *((NA,) * 3 if bar1 == NA else
                                            (_mib(bar1.bar1Total), _mib(bar1.bar1Used), _mib(bar1.bar1Free))))]
    return out


__all__ = ["DISPLAY", "gpu_blocks", "line", "parse_display", "query"]
