"""Simulated ``nvlsm``, NVIDIA's NVLink Subnet Manager: on NVLink 5 systems (HGX B200/B300) it discovers and
configures the NVSwitch fabric for the fabric manager, which cannot register the GPUs without it.

Like the fabric manager it is locked to the driver: its version (the one its package was built for, passed by the
installed wrapper) must equal the loaded driver library's (``nvmlSystemGetDriverVersion``). It refuses to run where
the state has no NVLink 5 switch (no NVSwitch, or GPUs of an earlier NVLink generation), as NVIDIA's does when it
finds no NVSwitch management port. While it runs it is the live ``nvlsm`` client of the state, which the simulated
NVML's fabric state and ``nv-fabricmanager`` read.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from .. import hardware, store
from . import _common

NAME = "nvlsm"
DEFAULT_CONFIG = "/usr/share/nvidia/nvlsm/nvlsm.conf"
PID_FILE = "/var/run/nvlsm.pid"
DEFAULT_LOG = "/var/log/nvlsm.log"

CONFIG_TEMPLATE = """# NVLink Subnet Manager configuration (simulated NVIDIA stack)
log_file /var/log/nvlsm.log
log_max_size 1024
"""


def read_config(path: Path) -> dict[str, str]:
    """``key value`` lines of an nvlsm.conf (comments and blanks ignored)."""
    values: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return values
    for line in lines:
        parts = line.split(None, 1)
        if len(parts) == 2 and not parts[0].startswith("#"):
            values[parts[0]] = parts[1].strip()
    return values


def _fail(log: Path, message: str, notify: Any) -> int:
    _common.log_line(log, message)
    print(f"{NAME}: {message}", file=sys.stderr)
    if notify:
        notify(False)
    return 1


def run(argv: list[str], version: str) -> int:
    """Start the subnet manager; return its exit status."""
    parser = argparse.ArgumentParser(prog=NAME, description="NVIDIA NVLink Subnet Manager (simulated)")
    parser.add_argument("-F", "--config", default=DEFAULT_CONFIG)
    parser.add_argument("-V", "--version", action="store_true")
    parser.add_argument("-B", "--daemon", action="store_true", help="run in the background")
    args = parser.parse_args(argv)
    if args.version:
        print(f"NVLSM {version}")
        return 0
    cfg = read_config(_common.sys_path(args.config))
    log = _common.sys_path(cfg.get("log_file", DEFAULT_LOG))
    notify = _common.detach() if args.daemon else None
    _common.log_line(log, f"NVLink Subnet Manager {version} starting with {args.config}")
    try:
        nv = _common.load_pynvml()
        _common.nvml_init(nv)
        driver = _common.text(nv.nvmlSystemGetDriverVersion())
    except _common.ToolError:
        return _fail(log, "cannot initialize NVML: the NVIDIA driver is not loaded", notify)
    if driver != version:
        return _fail(log, f"NVLSM version {version} does not match the NVIDIA driver version {driver}; install the "
                          "nvlsm package of the driver's version.", notify)
    try:
        doc = store.load()
    except store.StateError:
        doc = {}
    switches = hardware.subnet_managed_switches(doc)
    if not switches:
        return _fail(log, "no NVSwitch management port found: this system has no NVLink 5 switch "
                          "(NVLSM is for fourth-generation NVSwitch systems)", notify)
    pid_file = _common.sys_path(PID_FILE)
    _common.write_pid_file(pid_file)
    stop = _common.StopFlag()
    hardware.register_client(os.getpid(), NAME)
    _common.log_line(log, f"SUBNET UP: {switches} NVSwitch devices discovered and configured")
    if notify:
        notify(True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        hardware.unregister_client(os.getpid())
        pid_file.unlink(missing_ok=True)
        _common.log_line(log, "NVLink Subnet Manager is exiting on signal")
    return 0


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``nvlsm``."""
    return run(sys.argv[1:] if argv is None else argv, _common.tool_version(version, "0.0.0"))


if __name__ == "__main__":
    sys.exit(main())
