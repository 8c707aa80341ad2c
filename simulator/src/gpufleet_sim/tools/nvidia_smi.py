"""Simulated ``nvidia-smi``: NVIDIA's options, output formats and exit codes, on top of libnvidia-ml through pynvml.

Everything NVML offers goes through the library (so the MIG rules exist once, in C). GPU reset is hardware, not
NVML: it goes through ``hardware.py`` under the state file's lock.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import hardware, store
from . import _common, smi_links, smi_mig, smi_qlog, smi_query, smi_qxml, smi_report
from ._common import ToolError
from .smi_common import Gpu, Smi, exit_status

BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
COMPUTE_MODE_ARGS = {"0": 0, "DEFAULT": 0, "1": 1, "EXCLUSIVE_THREAD": 1, "2": 2, "PROHIBITED": 2,
                     "3": 3, "EXCLUSIVE_PROCESS": 3}
COMPUTE_MODE_NAMES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}
RESET_BUSY_NOTE = ("{n} device is currently being used by one or more other processes (e.g., Fabric Manager, "
                   "CUDA application, graphics application such as an X server, or a monitoring application such "
                   "as another instance of nvidia-smi). Please first kill all processes using this device and all "
                   "compute applications running in the system.")
MIG_PENDING_NOTE = ("{bus} is currently being used by one or more other processes (e.g. CUDA application or a "
                    "monitoring application such as another instance of nvidia-smi). Please first kill all "
                    "processes using the device and retry the command or reboot the system to make MIG mode "
                    "effective.")
USAGE = """NVIDIA System Management Interface -- v{version}

NVSMI provides monitoring information for Tesla and select Quadro devices.
The data is presented in either a plain text or an XML format, via stdout or a file.

    nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    -q,   --query               Display GPU or Unit info.
    -i,   --id=                 Target a specific GPU.
    --query-gpu=                Information about GPU. Call --help-query-gpu for more info.
    --query-remapped-rows=      Information about remapped rows.
    --query-compute-apps=       List of currently active compute processes.
    --format=                   csv[,noheader][,nounits]
    -pm,  --persistence-mode=   Set persistence mode: 0/DISABLED, 1/ENABLED
    -c,   --compute-mode=       Set MODE for compute applications: 0/DEFAULT, 2/PROHIBITED, 3/EXCLUSIVE_PROCESS
    -r,   --gpu-reset           Trigger reset of the GPU.
    -mig, --multi-instance-gpu= Enable or disable Multi Instance GPU: 0/DISABLED, 1/ENABLED
    mig                         Multi Instance GPU management.
    topo                        Display topological information about the system.
    nvlink                      Display NvLink information.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ToolError(BAD_ARGS, _common.EXIT_INVALID_ARGUMENT)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="nvidia-smi", add_help=False, allow_abbrev=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--version", action="store_true")
    p.add_argument("-L", "--list-gpus", action="store_true")
    p.add_argument("-q", "--query", action="store_true")
    p.add_argument("-d", "--display")
    p.add_argument("-x", "--xml-format", action="store_true")
    p.add_argument("-i", "--id", dest="gpu")
    p.add_argument("--query-gpu")
    p.add_argument("--query-remapped-rows")
    p.add_argument("--query-compute-apps")
    p.add_argument("--format")
    p.add_argument("-pm", "--persistence-mode")
    p.add_argument("-c", "--compute-mode")
    p.add_argument("-r", "--gpu-reset", action="store_true")
    p.add_argument("-mig", "--multi-instance-gpu")
    return p


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``nvidia-smi`` (the version comes from the library, like the real tool's)."""
    return _common.run_main(_run, argv)


def _run(argv: list[str]) -> int:
    if argv and argv[0] in ("mig", "topo", "nvlink"):
        sub = {"mig": smi_mig.main, "topo": smi_links.topo, "nvlink": smi_links.nvlink}[argv[0]]
        return int(sub(argv[1:]))
    args = _parser().parse_args(argv)
    if args.help:
        print(USAGE.format(version=_safe_version()))
        return _common.EXIT_OK
    smi = Smi()
    if args.version:
        version = smi.driver_version()
        print(f"NVIDIA-SMI version  : {version}\nNVML version        : {'.'.join(version.split('.')[:2])}\n"
              f"DRIVER version      : {version}\nCUDA Version        : {smi.cuda_version()}")
        return _common.EXIT_OK
    if args.gpu_reset:
        return _reset(smi, args.gpu)
    if args.list_gpus:
        return _list_gpus(smi, args.gpu)
    gpus = smi.select(args.gpu)
    if args.persistence_mode is not None:
        return _set_persistence(smi, gpus, args.persistence_mode)
    if args.compute_mode is not None:
        return _set_compute_mode(smi, gpus, args.compute_mode)
    if args.multi_instance_gpu is not None:
        return _set_mig(smi, gpus, args.multi_instance_gpu)
    if args.query_gpu is not None:
        print(smi_query.query_gpu(smi, gpus, args.query_gpu, args.format))
        return _common.EXIT_OK
    if args.query_compute_apps is not None:
        text = smi_query.query_compute_apps(smi, gpus, args.query_compute_apps, args.format, smi_report.process_name)
        if text:  # no header and no process: nothing at all, as 535
            print(text)
        return _common.EXIT_OK
    if args.query_remapped_rows is not None:
        print(smi_query.query_remapped_rows(smi, gpus, args.query_remapped_rows, args.format))
        return _common.EXIT_OK
    if args.xml_format and (not args.query or args.display):  # the text log instead would be a wrong answer
        raise ToolError("nvidia-smi (simulator): -x is implemented for -q without -d only; use NVIDIA's "
                        "nvidia-smi for the rest (docs/simulator.md)", _common.EXIT_INVALID_ARGUMENT, to_stdout=False)
    if args.xml_format:
        print(smi_qxml.query_xml(smi, gpus), end="")
        return _common.EXIT_OK
    if args.query:
        display = smi_qlog.parse_display(args.display)
        print(smi_qlog.query(smi, gpus, display), end="")
        return _common.EXIT_OK
    print(smi_report.summary(smi, gpus))
    return _common.EXIT_OK


def _list_gpus(smi: Smi, ident: str | None) -> int:
    """``-L``: every GPU; a lost one gets 535's line (and two empty ones) and the exit status 15 at the end."""
    if ident is not None:
        raise ToolError("ERROR: Option -i is not valid for this command. Please run 'nvidia-smi -h' for help.\n",
                        _common.EXIT_INVALID_ARGUMENT)
    status = _common.EXIT_OK
    for index in range(smi.count()):
        try:
            gpu = smi.gpu(index)
        except ToolError as exc:
            if exc.status != _common.EXIT_GPU_IS_LOST:
                raise
            print(f"Unable to determine the device handle for gpu {index}: GPU is lost.  Reboot the system to "
                  "recover this GPU\n\n")
            status = _common.EXIT_GPU_IS_LOST
            continue
        print(smi_report.list_gpus(smi, [gpu]))
    return status


def _safe_version() -> str:
    try:
        return Smi().driver_version()
    except ToolError:
        return "N/A"


def _apply(smi: Smi, gpus: list[Gpu], action: str, func: object, *args: object) -> int | None:
    """Run a setter on each GPU; print NVIDIA's failure lines. Return an exit status when it must stop."""
    nv = smi.nvml
    for gpu in gpus:
        try:
            func(gpu, *args)  # type: ignore[operator]
        except nv.NVMLError_NotSupported:
            print(f"Unable to {action} for GPU {gpu.bus_id}: Not Supported\nTreating as warning and moving on.")
        except nv.NVMLError as exc:
            print(f"Unable to {action} for GPU {gpu.bus_id}: {exc}\nTerminating early due to previous errors.")
            return exit_status(exc.value)
    return None


def _set_persistence(smi: Smi, gpus: list[Gpu], value: str) -> int:
    nv = smi.nvml
    mode = {"0": 0, "DISABLED": 0, "1": 1, "ENABLED": 1}.get(value.upper())
    if mode is None:
        raise ToolError(BAD_ARGS, _common.EXIT_INVALID_ARGUMENT)
    word = "Enabled" if mode else "Disabled"

    def one(gpu: Gpu) -> None:
        if int(nv.nvmlDeviceGetPersistenceMode(gpu.handle)) == mode:
            print(f"Persistence mode is already {word} for GPU {gpu.bus_id}.")
            return
        nv.nvmlDeviceSetPersistenceMode(gpu.handle, mode)
        print(f"{word} persistence mode for GPU {gpu.bus_id}.")  # 535 has no "Legacy" in its strings

    status = _apply(smi, gpus, f"set persistence mode to {word.lower()}", one)
    if status is not None:
        return status
    print("All done.")
    return _common.EXIT_OK


def _set_compute_mode(smi: Smi, gpus: list[Gpu], value: str) -> int:
    nv = smi.nvml
    mode = COMPUTE_MODE_ARGS.get(value.upper())
    if mode is None or mode == 1:
        raise ToolError(BAD_ARGS, _common.EXIT_INVALID_ARGUMENT)
    name = COMPUTE_MODE_NAMES[mode]

    def one(gpu: Gpu) -> None:
        if int(nv.nvmlDeviceGetComputeMode(gpu.handle)) == mode:
            print(f"Compute mode is already set to {name} for GPU {gpu.bus_id}.")
            return
        nv.nvmlDeviceSetComputeMode(gpu.handle, mode)
        print(f"Set compute mode to {name} for GPU {gpu.bus_id}.")

    status = _apply(smi, gpus, f"set compute mode to {name}", one)
    if status is not None:
        return status
    print("All done.")
    return _common.EXIT_OK


def _set_mig(smi: Smi, gpus: list[Gpu], value: str) -> int:
    nv = smi.nvml
    mode = {"0": 0, "DISABLED": 0, "1": 1, "ENABLED": 1}.get(value.upper())
    if mode is None:
        raise ToolError(BAD_ARGS, _common.EXIT_INVALID_ARGUMENT)
    verb = "enable" if mode else "disable"

    def one(gpu: Gpu) -> None:
        activation = int(nv.nvmlDeviceSetMigMode(gpu.handle, mode))
        if activation == nv.NVML_SUCCESS:
            print(f"{verb.capitalize()}d MIG Mode for GPU {gpu.bus_id}")
            return
        reason = nv.nvmlErrorString(activation)
        reason = reason.decode() if isinstance(reason, bytes) else str(reason)
        print(f"Warning: MIG mode is in pending {verb} state for GPU {gpu.bus_id}:{reason}")
        print(MIG_PENDING_NOTE.format(bus=gpu.bus_id))

    status = _apply(smi, gpus, f"{verb} MIG Mode", one)
    if status is not None:
        return status
    print("All done.")
    return _common.EXIT_OK


def _reset(smi: Smi, ident: str | None) -> int:
    gpus = smi.select(ident)
    bus_ids = [g.bus_id for g in gpus]
    if os.geteuid() != 0 and _require_root():
        print("The following GPUs could not be reset:")
        for bus in bus_ids:
            print(f"  GPU {bus}: Insufficient Permissions")
        return _common.EXIT_NO_PERMISSION
    try:
        done = hardware.reset(",".join(bus_ids))
    except hardware.ResetRefusedAll as exc:
        print("The following GPUs could not be reset:")
        for refusal in exc.refusals:
            print(f"  GPU {refusal.bus_id}: {refusal.reason}")
        busy = sum(1 for r in exc.refusals if r.reason == hardware.IN_USE_REASON)
        if busy:
            print()
            print(RESET_BUSY_NOTE.format(n=busy))
        lost = any(r.reason == hardware.LOST_REASON for r in exc.refusals)
        return _common.EXIT_GPU_IS_LOST if lost and not busy else _common.EXIT_OTHER
    except PermissionError:
        print("The following GPUs could not be reset:")
        for bus in bus_ids:
            print(f"  GPU {bus}: Insufficient Permissions")
        return _common.EXIT_NO_PERMISSION
    for bus in done:
        print(f"GPU {bus} was successfully reset.")
    print("All done.")
    return _common.EXIT_OK


def _require_root() -> bool:
    try:
        return bool(store.load().get("require_root", True))
    except store.StateError:
        return True


if __name__ == "__main__":
    sys.exit(main())
