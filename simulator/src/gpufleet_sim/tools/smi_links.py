"""``nvidia-smi topo`` and ``nvidia-smi nvlink``: the host's links as NVIDIA's 535 ``nvidia-smi`` prints them.

Everything comes from the library's public functions: NVLink state and error counters per link, P2P status
between two GPUs (``nvmlDeviceGetP2PStatus``: NVLink peers), the common ancestor of two GPUs, the GPUs near a CPU.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from . import _common
from ._common import ToolError
from .smi_common import Gpu, Smi

BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
SPEEDS = {3: "25 GB/s", 4: "26.562 GB/s", 5: "53.125 GB/s"}  # per link and direction, by NVLink generation
FI_DEV_NVLINK_GET_SPEED = 164  # nvml.h: per link (scopeId), MB/s
CAPABILITIES = (("P2P is supported", 0), ("Access to system memory supported", 1), ("P2P atomics supported", 2),
                ("System memory atomics supported", 3), ("SLI is supported", 4), ("Link is supported", 5))
P2P_INDEX = {"r": 0, "w": 1, "n": 2, "a": 3, "p": 4}
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "NS", 5: "NS", 6: "U"}
# -n LEVEL (NVML level LEVEL * 10): how 535 names the path when a GPU is there, and when none is
NEAREST = {0: "by way of an single on-board PCIe switch", 1: "by way of a single PCIe switch",
           2: "by way of potentially multiple PCIe switches", 3: "by the same PCIe host bridge",
           4: "by way of an on-CPU interconnect between PCIe host bridges",
           5: "by way of an SMP interconnect link between NUMA nodes"}
PATHS = {0: "an single on-board PCIe switch", 10: "a single PCIe switch", 20: "multiple PCIe switches",
         30: "a PCIe host bridge", 40: "an on-CPU interconnect between PCIe host bridges",
         50: "an SMP interconnect link between NUMA nodes"}
LEGEND_M = ["", "Legend:", "",
            "  X    = Self",
            "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
            "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a "
            "NUMA node",
            "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
            "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
            "  PIX  = Connection traversing at most a single PCIe bridge",
            "  NV#  = Connection traversing a bonded set of # NVLinks"]
LEGEND_P2P = ["", "Legend:", "", "  X    = Self", "  OK   = Status Ok", "  CNS  = Chipset not supported",
              "  GNS  = GPU not supported", "  TNS  = Topology not supported", "  NS   = Not supported",
              "  U    = Unknown"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ToolError(BAD_ARGS, _common.EXIT_INVALID_ARGUMENT)


def nvlinks(smi: Smi, gpu: Gpu) -> list[int]:
    """State (1 up / 0 down) of each NVLink of a GPU, by asking NVML link by link."""
    nv = smi.nvml
    states = []
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            states.append(int(nv.nvmlDeviceGetNvLinkState(gpu.handle, link)))
        except (nv.NVMLError_InvalidArgument, nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            break
    return states


def _speed(smi: Smi, gpu: Gpu, link: int, version: int) -> str:
    """An up link's speed as ``nvidia-smi nvlink -s`` prints it, from NVML's per-link speed field (MB/s), or from the
    generation where the field has no answer."""
    values = smi.call(smi.nvml.nvmlDeviceGetFieldValues, gpu.handle, [(FI_DEV_NVLINK_GET_SPEED, link)], default=None)
    if not values or int(values[0].nvmlReturn) != 0:
        return SPEEDS.get(version, "25 GB/s")
    mbps = int(values[0].value.uiVal)
    fraction = f".{mbps % 1000:03d}".rstrip("0") if mbps % 1000 else ""
    return f"{mbps // 1000}{fraction} GB/s"


def _p2p(smi: Smi, a: Gpu, b: Gpu, index: int) -> str:
    status = smi.call(smi.nvml.nvmlDeviceGetP2PStatus, a.handle, b.handle, index)
    return "U" if status == "N/A" else P2P_STATUS.get(int(status), "U")


def topo(argv: list[str]) -> int:
    """``nvidia-smi topo -m | -p2p r|w|n|a|p | -c CPU | -n LEVEL -i GPU | -p -i GPU,GPU``."""
    parser = _Parser(prog="nvidia-smi topo", add_help=False, allow_abbrev=False)
    parser.add_argument("-m", "--matrix", action="store_true")
    parser.add_argument("-p2p", "--p2pstatus")
    parser.add_argument("-c", "--cpu")
    parser.add_argument("-n", "--nearest_gpus")
    parser.add_argument("-p", "--gpu_path", action="store_true")
    parser.add_argument("-i", "--id", dest="gpu")
    args = parser.parse_args(argv)
    if args.matrix and not (args.p2pstatus or args.cpu or args.nearest_gpus or args.gpu_path or args.gpu):
        return _matrix(Smi())
    if args.p2pstatus is not None and not (args.cpu or args.nearest_gpus or args.gpu_path or args.gpu):
        if args.p2pstatus not in P2P_INDEX:
            raise ToolError("Invalid p2p capability index specified at the command-line", _common.EXIT_INVALID_ARGUMENT)
        return _p2p_matrix(Smi(), P2P_INDEX[args.p2pstatus])
    if args.cpu is not None and not (args.nearest_gpus or args.gpu_path):
        _cpu(Smi(), args.cpu)
        if args.gpu:  # 535 lists the GPUs, then refuses the -i it cannot use
            raise ToolError("The -i command line argument must be used in conjunction with -n or -p.\n",
                            _common.EXIT_OTHER)
        return _common.EXIT_OK
    if args.nearest_gpus is not None and not args.gpu_path:
        return _nearest(Smi(), args.nearest_gpus, args.gpu)
    if args.gpu_path:
        return _path(Smi(), args.gpu)
    raise ToolError(BAD_ARGS, _common.EXIT_INVALID_ARGUMENT)


def _matrix(smi: Smi) -> int:
    gpus = smi.select(None)
    links = {g.index: nvlinks(smi, g) for g in gpus}
    cpus = os.cpu_count() or 1
    # 535 underlines the header with ANSI escapes whether or not stdout is a terminal
    lines = ["\t\x1b[4m" + "\t".join(f"GPU{g.index}" for g in gpus)
             + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"]
    for a in gpus:
        cells = []
        for b in gpus:
            if a.index == b.index:
                cells.append(" X ")
                continue
            # NVLink peers (P2P over NVLink OK) meet over the smaller count of links up; others through the host
            # bridges of the one NUMA node the state implies, as the library answers NVIDIA's binary
            up = min(sum(links[a.index]), sum(links[b.index]), 18) if _p2p(smi, a, b, 2) == "OK" else 0
            cells.append(f"NV{up}" if up else "NODE")
        affinity = f"0-{cpus - 1}" if cpus > 1 else "0"
        lines.append(f"GPU{a.index}\t" + "\t".join(cells) + f"\t{affinity}\t0\t\tN/A")
    print("\n".join(lines + LEGEND_M))
    return _common.EXIT_OK


def _p2p_matrix(smi: Smi, index: int) -> int:
    gpus = smi.select(None)
    lines = [" \t\x1b[4m" + "".join(f"GPU{g.index}\t" for g in gpus) + "\x1b[0m"]
    for a in gpus:
        lines.append(f" GPU{a.index}\t" + "".join(("X" if a.index == b.index else _p2p(smi, a, b, index)) + "\t"
                                                   for b in gpus))
    print("\n".join(lines + LEGEND_P2P))
    return _common.EXIT_OK


def _cpu(smi: Smi, cpu: str) -> int:
    nv = smi.nvml
    if not cpu.isdigit():
        raise ToolError(f'Option "{cpu}" is invalid for "-c".', _common.EXIT_INVALID_ARGUMENT)
    try:
        handles = nv.nvmlSystemGetTopologyGpuSet(int(cpu))
    except nv.NVMLError as exc:
        raise ToolError("Failed to display GPUs with affinity for a given CPU information\n", _common.EXIT_OTHER) \
            from exc
    indices = sorted(smi.index_of(h) for h in handles)
    print(f"The GPUs that have an affinity with CPU {int(cpu)} are:\n" + ", ".join(map(str, indices)) + "\n")
    return _common.EXIT_OK


def _nearest(smi: Smi, level: str, ident: str | None) -> int:
    if not level.lstrip("-").isdigit():
        raise ToolError(f'Option "{level}" is invalid for "-n".', _common.EXIT_INVALID_ARGUMENT)
    if not ident or "," in ident:
        raise ToolError("Nearest GPUs argument must be used in conjunction with the -i argument which must be a "
                        "single identifier.\n", _common.EXIT_INVALID_ARGUMENT)
    if int(level) not in NEAREST:
        raise ToolError("Failed to display the nearest GPUs\n", _common.EXIT_OTHER)
    gpu = smi.select(ident)[0]
    nv = smi.nvml
    handles = smi.call(nv.nvmlDeviceGetTopologyNearestGpus, gpu.handle, int(level) * 10, default=[])
    indices = sorted(smi.index_of(h) for h in handles)
    if indices:
        print(f"Device {gpu.index} is connected {NEAREST[int(level)]} to device(s): {', '.join(map(str, indices))}\n")
    else:
        print(f"Device {gpu.index} is not connected to other devices {NEAREST[int(level)]}.\n")
    return _common.EXIT_OK


def _path(smi: Smi, ident: str | None) -> int:
    if not ident or len([part for part in ident.split(",") if part.strip()]) != 2:
        raise ToolError("Path command line flag must be used in conjection with the -i argument which must be two "
                        "GPU identifiers.\n", _common.EXIT_INVALID_ARGUMENT)
    try:
        gpus = smi.select(ident)
    except ToolError as exc:  # 535 answers an unknown id with the usage line
        raise ToolError("Path command line flag must be used in conjection with the -i argument which must be two "
                        "GPU identifiers.\n", _common.EXIT_INVALID_ARGUMENT) from exc
    level: Any = smi.call(smi.nvml.nvmlDeviceGetTopologyCommonAncestor, gpus[0].handle, gpus[1].handle)
    print(f"Device {gpus[0].index} is connected to device {gpus[1].index} by way of {PATHS.get(level, 'N/A')}.\n")
    return _common.EXIT_OK


def nvlink(argv: list[str]) -> int:
    """``nvidia-smi nvlink -s | -e | -c [-i GPU]``."""
    parser = _Parser(prog="nvidia-smi nvlink", add_help=False, allow_abbrev=False)
    parser.add_argument("-s", "--status", action="store_true")
    parser.add_argument("-e", "--errorcounters", action="store_true")
    parser.add_argument("-c", "--capabilities", action="store_true")
    parser.add_argument("-i", "--id", dest="gpu")
    args = parser.parse_args(argv)
    if args.status + args.errorcounters + args.capabilities != 1:
        raise ToolError(BAD_ARGS, _common.EXIT_INVALID_ARGUMENT)
    smi = Smi()
    nv = smi.nvml
    for gpu in smi.select(args.gpu):
        links = nvlinks(smi, gpu)
        if not links:
            continue  # 535 prints nothing for a GPU without NVLink
        name = _common.text(nv.nvmlDeviceGetName(gpu.handle))
        print(f"GPU {gpu.index}: {name} (UUID: {_common.text(nv.nvmlDeviceGetUUID(gpu.handle))})")
        version = smi.call(nv.nvmlDeviceGetNvLinkVersion, gpu.handle, 0, default=4)
        for link, up in enumerate(links):
            if args.status:
                print(f"\t Link {link}: {_speed(smi, gpu, link, int(version)) if up else '<inactive>'}")
            elif up and args.capabilities:  # 535 lists active links only
                for label, cap in CAPABILITIES:
                    value = smi.call(nv.nvmlDeviceGetNvLinkCapability, gpu.handle, link, cap)
                    print(f"\t Link {link}, {label}: {value if value == 'N/A' else str(bool(value)).lower()}")
            elif up:
                for label, counter in (("Replay Errors", 0), ("Recovery Errors", 1), ("CRC Errors", 2)):
                    value = smi.call(nv.nvmlDeviceGetNvLinkErrorCounter, gpu.handle, link, counter)
                    print(f"\t Link {link}: {label}: {value}")
                print()
    return _common.EXIT_OK
