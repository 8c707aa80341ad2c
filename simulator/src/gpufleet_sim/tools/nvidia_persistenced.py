"""Simulated ``nvidia-persistenced``: holds every GPU open and keeps persistence mode on while it runs.

Like the real daemon it forks into the background (``Type=forking``), writes
``/var/run/nvidia-persistenced/nvidia-persistenced.pid``, and on SIGTERM turns persistence mode off again and exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from .. import hardware
from . import _common

NAME = "nvidia-persistenced"
PID_FILE = "/var/run/nvidia-persistenced/nvidia-persistenced.pid"
FAILED = "nvidia-persistenced failed to initialize. Check syslog for more details."


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=NAME, description="NVIDIA Persistence Daemon (simulated)")
    p.add_argument("-V", "--version", action="store_true")
    p.add_argument("-u", "--user")
    p.add_argument("-g", "--group")
    p.add_argument("--persistence-mode", dest="persistence", action="store_true", default=True)
    p.add_argument("--no-persistence-mode", dest="persistence", action="store_false")
    p.add_argument("--uvm-persistence-mode", action="store_true")
    p.add_argument("--nvidia-cfg-path")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("-f", "--foreground", action="store_true", help="do not fork (simulator extension)")
    return p


def _set_all(nv: Any, mode: int) -> None:
    """Set persistence mode on every GPU NVML can open (lost GPUs are skipped)."""
    for i in range(nv.nvmlDeviceGetCount()):
        try:
            nv.nvmlDeviceSetPersistenceMode(nv.nvmlDeviceGetHandleByIndex(i), mode)
        except nv.NVMLError:
            continue


def run(argv: list[str], version: str | None = None) -> int:
    """Run the daemon; return its exit status."""
    args = _parser().parse_args(argv)
    if args.version:
        print(f"{NAME}: version {_common.tool_version(version, 'unknown')}")
        return 0
    pid_file = _common.sys_path(PID_FILE)
    if _common.read_pid_file(pid_file):
        print(FAILED, file=sys.stderr)
        return 1
    notify = None if args.foreground else _common.detach()
    try:
        nv = _common.load_pynvml()
        _common.nvml_init(nv)
    except _common.ToolError:
        print(FAILED, file=sys.stderr)
        if notify:
            notify(False)
        return 1
    stop = _common.StopFlag()
    _common.write_pid_file(pid_file)
    hardware.register_client(os.getpid(), NAME)
    if args.persistence:
        _set_all(nv, 1)
    if notify:
        notify(True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        if args.persistence:
            _set_all(nv, 0)
        hardware.unregister_client(os.getpid())
        Path(pid_file).unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``nvidia-persistenced``."""
    return run(sys.argv[1:] if argv is None else argv, version)


if __name__ == "__main__":
    sys.exit(main())
