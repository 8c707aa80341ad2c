"""Simulated ``nv-fabricmanager``: refuses a driver of another version, configures NVSwitches, holds the GPUs.

The fabric manager's version is the one its package was built for (the installed wrapper passes it). It must equal
the version of the loaded driver library (``nvmlSystemGetDriverVersion``) exactly, as NVIDIA's does.

It knows the NVSwitch generation: on NVLink 5 systems (HGX B200/B300, fourth-generation NVSwitch) the switches are
reached through the NVLink Subnet Manager (``nvlsm``). Started without a live ``nvlsm`` it keeps running, says that
it waits for the subnet manager, and configures the switches (its "Successfully configured" line) only once one runs;
until then the simulated NVML reports every GPU's fabric "In Progress" (``nvmlsim_fabric.c``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import hardware, store
from . import _common

NAME = "nv-fabricmanager"
DEFAULT_CONFIG = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
PID_FILE = "/var/run/nvidia-fabricmanager/nv-fabricmanager.pid"
DEFAULT_LOG = "/var/log/fabricmanager.log"

CONFIG_TEMPLATE = """# Fabric Manager configuration (simulated NVIDIA stack)
LOG_LEVEL=4
LOG_FILE_NAME=/var/log/fabricmanager.log
LOG_APPEND_TO_LOG=1
LOG_FILE_MAX_SIZE=1024
LOG_USE_SYSLOG=0
DAEMONIZE=1
BIND_INTERFACE_IP=127.0.0.1
STARTING_TCP_PORT=16000
FABRIC_MODE=0
FABRIC_MODE_RESTART=0
STATE_FILE_NAME=/tmp/fabricmanager.state
FM_CMD_BIND_INTERFACE=127.0.0.1
FM_CMD_PORT_NUMBER=6666
FM_STAY_RESIDENT_ON_FAILURES=0
ACCESS_LINK_FAILURE_MODE=0
TRUNK_LINK_FAILURE_MODE=0
NVSWITCH_FAILURE_MODE=0
ABORT_CUDA_JOBS_ON_FM_EXIT=1
TOPOLOGY_FILE_PATH=/usr/share/nvidia/nvswitch
"""


def read_config(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a fabricmanager.cfg (comments and blanks ignored)."""
    values: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return values
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def _fail(log: Path, message: str, notify: object) -> int:
    _common.log_line(log, message)
    print(message, file=sys.stderr)
    if notify:
        notify(False)  # type: ignore[operator]
    return 1


_waiting_logged: set[Path] = set()


def _subnet_manager_up(log: Path) -> bool:
    """Whether a live nvlsm runs now; the first time it does not, say so in the log."""
    try:
        up = hardware.client_running(store.load(), "nvlsm")
    except store.StateError:
        up = False
    if not up and log not in _waiting_logged:
        _waiting_logged.add(log)
        _common.log_line(log, "waiting for the NVLink Subnet Manager (nvlsm): no subnet manager is running; the GPUs' "
                              "fabric registration stays in progress until it runs")
    return up


def run(argv: list[str], version: str) -> int:
    """Start the fabric manager; return its exit status."""
    parser = argparse.ArgumentParser(prog=NAME, description="NVIDIA Fabric Manager (simulated)")
    parser.add_argument("-c", "--config", default=DEFAULT_CONFIG)
    parser.add_argument("-v", "--version", action="store_true")
    parser.add_argument("--foreground", action="store_true", help="do not fork (simulator extension)")
    args = parser.parse_args(argv)
    if args.version:
        print(f"Fabric Manager version is : {version}")
        return 0
    cfg = read_config(_common.sys_path(args.config) if os.environ.get("NVIDIA_SIM_ROOT") else Path(args.config))
    log = _common.sys_path(cfg.get("LOG_FILE_NAME", DEFAULT_LOG))
    daemonize = cfg.get("DAEMONIZE", "1") == "1" and not args.foreground
    notify = _common.detach() if daemonize else None
    _common.log_line(log, f"Fabric Manager version {version} is running with the following configuration options")
    try:
        nv = _common.load_pynvml()
        _common.nvml_init(nv)
        driver = _common.text(nv.nvmlSystemGetDriverVersion())
    except _common.ToolError:
        return _fail(log, "fabric manager failed to initialize NVML: the NVIDIA driver is not loaded", notify)
    if driver != version:
        return _fail(log, f"fabric manager NVIDIA GPU driver interface version {version} don't match with driver "
                          f"version {driver}. Please update with matching NVIDIA driver package.", notify)
    try:
        switches = store.load().get("nvswitch", {})
    except store.StateError:
        switches = {}
    if not switches or not int(switches.get("count", 0)):
        return _fail(log, "request to query NVSwitch device information from NVSwitch driver failed with "
                          "error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]", notify)
    pid_file = _common.sys_path(PID_FILE)
    _common.write_pid_file(pid_file)
    stop = _common.StopFlag()
    hardware.register_client(os.getpid(), NAME)
    subnet_managed = hardware.subnet_managed_switches(store.load()) > 0
    configured = False
    if subnet_managed:
        _common.log_line(log, "Detected NVLink 5 system: the NVSwitches are managed through the NVLink Subnet Manager")
    if notify:
        notify(True)
    try:
        while True:
            if not configured and (not subnet_managed or _subnet_manager_up(log)):
                configured = True
                _common.log_line(log, f"Successfully configured all the available NVSwitches ({switches['count']}) "
                                      "to route GPU NVLink traffic. NVLink Peer-to-Peer support will be enabled once "
                                      "the GPUs are successfully registered with the NVLink fabric.")
            if stop.wait(1.0):
                break
    finally:
        hardware.unregister_client(os.getpid())
        pid_file.unlink(missing_ok=True)
        _common.log_line(log, "Fabric Manager is exiting on signal")
    return 0


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``nv-fabricmanager``."""
    return run(sys.argv[1:] if argv is None else argv, _common.tool_version(version, "0.0.0"))


if __name__ == "__main__":
    sys.exit(main())
