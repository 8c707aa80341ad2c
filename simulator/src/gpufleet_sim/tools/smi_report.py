"""nvidia-smi's human reports: ``-L`` and the default summary table (``-q`` is in ``smi_qlog``), and the process rows
both use."""

from __future__ import annotations

import time
from typing import Any

from . import _common
from .smi_common import NA, Gpu, Smi, ci_name, profile_name
from .smi_query import FIELDS

KEY_WIDTH = 42


def _mib(value: int) -> int:
    return int(value) // (1024 * 1024)


def list_gpus(smi: Smi, gpus: list[Gpu]) -> str:
    """``nvidia-smi -L``: one line per GPU, then one indented line per MIG device."""
    nv = smi.nvml
    lines = []
    for gpu in gpus:
        name = _common.text(nv.nvmlDeviceGetName(gpu.handle))
        uuid = _common.text(nv.nvmlDeviceGetUUID(gpu.handle))
        lines.append(f"GPU {gpu.index}: {name} (UUID: {uuid})")
        lines.extend(_mig_device_lines(smi, gpu))
    return "\n".join(lines)


def _mig_device_lines(smi: Smi, gpu: Gpu) -> list[str]:
    nv = smi.nvml
    mode = smi.mig_mode(gpu.handle)
    if not mode or not mode[0]:
        return []
    names = {}
    for gi_prof, gi, gi_info in smi.gpu_instances(gpu.handle):
        for ci_prof, ci_info in smi.compute_instances(gi):
            names[(int(gi_info.id), int(ci_info.id))] = ci_name(ci_prof, gi_prof)
    lines = []
    for idx in range(int(smi.call(nv.nvmlDeviceGetMaxMigDeviceCount, gpu.handle, default=0))):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, idx)
        except nv.NVMLError_NotFound:
            break
        uuid = _common.text(nv.nvmlDeviceGetUUID(mig))
        key = (int(nv.nvmlDeviceGetGpuInstanceId(mig)), int(nv.nvmlDeviceGetComputeInstanceId(mig)))
        lines.append(f"  MIG {names.get(key, '?'):<11} Device {idx:>2}: (UUID: {uuid})")
    return lines


def _field(smi: Smi, gpu: Gpu, name: str) -> Any:
    return FIELDS[name][1](smi, gpu)


def _line(level: int, key: str, value: Any = None) -> str:
    label = "    " * level + key
    if value is None:
        return label
    shown = "N/A" if value == NA else _common.text(value)
    return f"{label:<{KEY_WIDTH}}: {shown}"


def _processes(smi: Smi, gpu: Gpu) -> list[str]:
    procs = process_rows(smi, gpu)
    if not procs:
        return [_line(1, "Processes", "None")]
    out = [_line(1, "Processes")]
    for pid, name, used, gi, ci, kind in procs:
        memory = "Not available in WDDM driver model" if used == NA else f"{used} MiB"  # 535's words for N/A
        out += [_line(2, "GPU instance ID", gi), _line(2, "Compute instance ID", ci),
                _line(2, "Process ID", pid), _line(3, "Type", kind), _line(3, "Name", name),
                _line(3, "Used GPU Memory", memory)]
    return out


def process_rows(smi: Smi, gpu: Gpu) -> list[tuple[int, str, Any, Any, Any, str]]:
    """(pid, name, used MiB, GI id, CI id, type) of the processes on a GPU, in NVIDIA 535's order: MIG device by
    MIG device on a MIG GPU, then by pid; type "C" (compute), "G" (graphics) or "C+G" (both)."""
    nv = smi.nvml
    handles = [gpu.handle]
    if smi.call(nv.nvmlDeviceGetMigMode, gpu.handle, default=[0])[0] == 1:
        count = smi.call(nv.nvmlDeviceGetMaxMigDeviceCount, gpu.handle, default=0)
        migs = []
        for k in range(count if count != NA else 0):
            try:
                migs.append(nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, k))
            except nv.NVMLError_NotFound:
                continue
        handles = migs or handles
    rows = []
    for handle in handles:
        kinds: dict[int, tuple[Any, str]] = {}
        for call, kind in ((nv.nvmlDeviceGetComputeRunningProcesses, "C"),
                           (nv.nvmlDeviceGetGraphicsRunningProcesses, "G")):
            procs = smi.call(call, handle, default=[])
            for proc in procs if procs != NA else []:
                seen = kinds.get(int(proc.pid))
                kinds[int(proc.pid)] = (proc, "C+G" if seen else kind)
        for pid in sorted(kinds):
            proc, kind = kinds[pid]
            gi = getattr(proc, "gpuInstanceId", 0xFFFFFFFF)
            ci = getattr(proc, "computeInstanceId", 0xFFFFFFFF)
            used = NA if proc.usedGpuMemory is None else _mib(proc.usedGpuMemory)
            rows.append((pid, process_name(pid), used, NA if gi in (None, 0xFFFFFFFF) else gi,
                         NA if ci in (None, 0xFFFFFFFF) else ci, kind))
    return rows


def process_name(pid: int) -> str:
    """Name of a process: the simulated state's name, else /proc, else N/A."""
    from .. import store

    try:
        for gpu in store.load().get("gpus", []):
            for proc in gpu.get("processes", []):
                if int(proc.get("pid", -1)) == pid:
                    return str(proc.get("name", NA))
    except store.StateError:
        pass
    return NA


def summary(smi: Smi, gpus: list[Gpu]) -> str:
    """The default ``nvidia-smi`` table as NVIDIA's 535 draws it (columns checked against its binary)."""
    bar = "+" + "-" * 87 + "+"
    cells = "+-----------------------------------------+----------------------+----------------------+"
    out = [f"{time.strftime('%a %b %d %H:%M:%S %Y'):<31}", bar,  # 535 pads the time to 31 columns
           f"| NVIDIA-SMI {smi.driver_version():<23}Driver Version: {smi.driver_version():<13}"
           f"CUDA Version: {smi.cuda_version():<9}|",
           "|-----------------------------------------+----------------------+----------------------+",
           "| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                      |               MIG M. |",
           "|=========================================+======================+======================|"]
    for gpu in gpus:
        name = str(_field(smi, gpu, "name"))
        name = name if len(name) <= 24 else name[:24] + "..."  # 535 keeps 24 characters and marks the cut
        pm = "On" if _field(smi, gpu, "persistence_mode") == "Enabled" else "Off"
        mig = _field(smi, gpu, "mig.mode.current")
        mig = NA if mig == "[N/A]" else mig  # the table's cell says N/A where the CSV query says [N/A]
        # a MIG GPU counts ECC errors per MIG device: 535 prints "On" in the GPU's cell
        ecc = "On" if mig == "Enabled" else _field(smi, gpu, "ecc.errors.uncorrected.volatile.total")
        temp, pstate = _field(smi, gpu, "temperature.gpu"), _field(smi, gpu, "pstate")
        draw, cap = _field(smi, gpu, "power.draw"), _field(smi, gpu, "power.limit")
        # the cap is a 4-column cell: "70W" right-aligned, "1000W" cut to "1..."
        cap_cell = f"{float(cap):.0f}W".rjust(4) if cap != NA else "N/A"
        cap_cell = cap_cell if len(cap_cell) <= 4 else cap_cell[:1] + "..."
        power = f"{float(draw):.0f}W / {cap_cell}" if NA not in (draw, cap) else "N/A / N/A"
        used, total = _field(smi, gpu, "memory.used"), _field(smi, gpu, "memory.total")
        util = _field(smi, gpu, "utilization.gpu")
        mode = _field(smi, gpu, "compute_mode")
        memory = f"{used}MiB / " + _cell(f"{total}MiB", 8).rstrip()  # 535 cuts a 6-digit total to "14377..."
        out += [f"| {gpu.index:>3}  {name:<24}{pm:>{34 - max(len(name), 24)}} | {gpu.bus_id} {'Off':>3} | "
                f"{ecc!s:>20} |",
                f"| {'N/A':<3}{temp!s:>5}C    {pstate:<2}{power:>24} | {memory:>20} |"
                f"{f'{util}%':>8}{mode:>13} |",
                f"|{'':41}|{'':22}| {mig:>20} |", cells]
    out += _mig_devices(smi, gpus, bar)
    out += [" " * len(bar), bar,  # 535's empty line is as wide as the table
            "| Processes:                                                                            |",
            "|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |",
            "|        ID   ID                                                             Usage      |",
            "|" + "=" * 87 + "|"]
    rows = [(g.index, r) for g in gpus for r in process_rows(smi, g)]
    if not rows:
        out.append("|  No running processes found                                                           |")
    for index, (pid, name, used, gi, ci, kind) in rows:
        memory = _cell("N/A" if used == NA else f"{used:>5}MiB", 8)
        gi_cell, ci_cell = (_cell("N/A" if v == NA else f"{v:>2}", 3) for v in (gi, ci))
        name = name.strip(" ")
        if not name:
            continue  # 535 draws no row for a process whose name is blank
        name = name if len(name) <= 38 else "..." + name[-35:]  # 535 keeps a long name's end
        out.append(f"|{index:>5}   {gi_cell}  {ci_cell}{pid:>10}{kind:>7}   {name:<38}    {memory} |")
    out.append(bar)
    return "\n".join(_fit(line, len(bar)) for line in out)


def _cell(text: str, width: int) -> str:
    """A value in one of 535's fixed-width table cells: left-aligned, a longer one cut to ``...``."""
    return text.ljust(width) if len(text) <= width else text[:width - 3] + "..."


def _mig_devices(smi: Smi, gpus: list[Gpu], bar: str) -> list[str]:
    """535's "MIG devices" table: drawn when a GPU is in MIG mode."""
    if not any(_field(smi, g, "mig.mode.current") == "Enabled" for g in gpus):
        return []
    out = ["", bar, f"| {'MIG devices:':<86}|",
           "+------------------+--------------------------------+-----------+-----------------------+",
           "| GPU  GI  CI  MIG |                   Memory-Usage |        Vol|      Shared           |",
           "|      ID  ID  Dev |                     BAR1-Usage | SM     Unc| CE ENC DEC OFA JPG    |",
           "|                  |                                |        ECC|                       |",
           "|==================+================================+===========+=======================|"]
    rows = mig_device_rows(smi, gpus)
    if not rows:
        out += ["|  No MIG devices found                                                                 |", bar]
    return out + rows


def mig_device_rows(smi: Smi, gpus: list[Gpu]) -> list[str]:
    """The rows of 535's MIG device table, by MIG device index (as NVIDIA's binary draws them on the simulator).

    Like 535, a MIG device whose BAR1 the library cannot report is left out.
    """
    nv = smi.nvml
    sep = "+------------------+--------------------------------+-----------+-----------------------+"
    rows: list[str] = []
    for gpu in gpus:
        if _field(smi, gpu, "mig.mode.current") != "Enabled":
            continue
        for dev in range(int(smi.call(nv.nvmlDeviceGetMaxMigDeviceCount, gpu.handle, default=0))):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, dev)
                bar1 = nv.nvmlDeviceGetBAR1MemoryInfo(mig)
            except nv.NVMLError:
                continue
            gi, ci = nv.nvmlDeviceGetGpuInstanceId(mig), nv.nvmlDeviceGetComputeInstanceId(mig)
            mem = nv.nvmlDeviceGetMemoryInfo(mig)
            attrs = nv.nvmlDeviceGetAttributes_v2(mig)
            # the state counts ECC errors per GPU: a MIG device shows its GPU's volatile uncorrected total
            ecc = _field(smi, gpu, "ecc.errors.uncorrected.volatile.total")
            usage = f"{_mib(mem.used)}MiB / {_mib(mem.total):>5}MiB"
            bar1_usage = f"{_mib(bar1.bar1Used)}MiB / {_mib(bar1.bar1Total):>5}MiB"
            sms = attrs.multiprocessorCount
            rows += [f"|{gpu.index:>3}{gi:>5}{ci:>4}{dev:>4}  |{usage:>30}  | {sms:<3}{ecc!s:>6} |"
                     f"{attrs.sharedCopyEngineCount:>3}{attrs.sharedEncoderCount:>4}{attrs.sharedDecoderCount:>5}"
                     f"{attrs.sharedOfaCount:>5}{attrs.sharedJpegCount:>5} |",
                     f"|{'':18}|{bar1_usage:>30}  |{'':11}|{'':23}|", sep]
    return rows


def _fit(line: str, width: int) -> str:
    """Pad or trim a one-cell table line (``| ... |``) to the table width."""
    if line.startswith("|") and line.endswith("|") and len(line) != width and line.count("|") == 2:
        return "|" + line[1:-1].rstrip().ljust(width - 2)[: width - 2] + "|"
    return line


__all__ = ["list_gpus", "process_name", "process_rows", "profile_name", "summary"]
