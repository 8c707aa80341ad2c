"""Simulated DCGM host engine ``nv-hostengine``: a TCP server (127.0.0.1:5555 by default) that ``dcgmi`` talks to.

It holds every GPU as a driver client while it runs, keeps the health watches ``dcgmi health -s`` sets, and answers
discovery, diagnostics and health checks from NVML and the host's state. The wire protocol (one JSON request and
one JSON answer per line) is the simulator's own.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socketserver
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .. import hardware, store
from . import _common, dcgm_checks

NAME = "nv-hostengine"
PID_FILE = "/var/run/nvhostengine.pid"
DEFAULT_PORT = 5555
DEFAULT_BIND = "127.0.0.1"
VERSION = "4.4.1"


class Engine:
    """The host engine's state: NVML, health watches and the request handlers."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.watches: set[str] = set()
        self.lock = threading.Lock()
        self.nv = _common.load_pynvml()
        _common.nvml_init(self.nv)

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one request."""
        cmd = request.get("cmd")
        if cmd == "version":
            return {"ok": True, "version": self.version}
        if cmd == "discovery":
            return {"ok": True, "gpus": self._gpus(), "nvswitches": self._switches()}
        if cmd == "diag":
            level = int(request.get("level", 1))
            if level not in dcgm_checks.LEVEL_TESTS:
                return {"ok": False, "error": f"Invalid run level {level}: must be 1, 2 or 3."}
            results = dcgm_checks.diag(self._state(), level)
            return {"ok": True, "driver": self._driver(), "version": self.version,
                    "results": [asdict(r) for r in results],
                    "device_ids": [g["device_id"] for g in self._gpus()]}
        if cmd == "health_set":
            try:
                systems = dcgm_checks.parse_systems(str(request.get("systems", "")))
            except ValueError as exc:
                return {"ok": False, "error": str(exc)}
            with self.lock:
                self.watches = systems
            return {"ok": True}
        if cmd == "health_check":
            with self.lock:
                watches = set(self.watches)
            incidents = dcgm_checks.health(self._state(), watches)
            return {"ok": True, "watches": sorted(watches), "overall": dcgm_checks.overall(incidents),
                    "incidents": [asdict(i) for i in incidents]}
        return {"ok": False, "error": f"unknown request {cmd!r}"}

    @staticmethod
    def _state() -> dict[str, Any]:
        try:
            return store.load()
        except store.StateError:
            return {"gpus": []}

    def _driver(self) -> str:
        return _common.text(self.nv.nvmlSystemGetDriverVersion())

    def _switches(self) -> int:
        return int(self._state().get("nvswitch", {}).get("count", 0))

    def _gpus(self) -> list[dict[str, Any]]:
        nv = self.nv
        gpus = []
        for index in range(nv.nvmlDeviceGetCount()):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                pci = nv.nvmlDeviceGetPciInfo(handle)
                gpus.append({"id": index, "name": _common.text(nv.nvmlDeviceGetName(handle)),
                             "bus_id": _common.text(pci.busId), "uuid": _common.text(nv.nvmlDeviceGetUUID(handle)),
                             "device_id": f"{int(pci.pciDeviceId) >> 16:04X}"})
            except nv.NVMLError:
                continue
        return gpus


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        engine: Engine = self.server.engine  # type: ignore[attr-defined]
        for raw in self.rfile:
            try:
                answer = engine.handle(json.loads(raw))
            except (ValueError, TypeError) as exc:
                answer = {"ok": False, "error": f"bad request: {exc}"}
            self.wfile.write((json.dumps(answer) + "\n").encode())
            self.wfile.flush()


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def _terminate(pid_file: Path) -> int:
    pid = _common.read_pid_file(pid_file)
    if pid is None:
        print("Unable to terminate host engine: it is not running.")
        return 1
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        if _common.read_pid_file(pid_file) is None:
            break
        time.sleep(0.05)
    print("Host engine successfully terminated.")
    return 0


def run(argv: list[str], version: str) -> int:
    """Run or stop the host engine; return the exit status."""
    p = argparse.ArgumentParser(prog=NAME, description="NVIDIA Data Center GPU Manager host engine (simulated)")
    p.add_argument("-n", "--no-daemon", action="store_true")
    p.add_argument("-p", "--port", type=int, default=DEFAULT_PORT)
    p.add_argument("-b", "--bind-interface", default=DEFAULT_BIND)
    p.add_argument("-t", "--term", action="store_true")
    p.add_argument("--pid", default=PID_FILE)
    p.add_argument("-f", "--log-filename")
    p.add_argument("--log-level")
    p.add_argument("--service-account")
    p.add_argument("-v", "--version", action="store_true")
    args = p.parse_args(argv)
    pid_file = _common.sys_path(args.pid) if os.environ.get("NVIDIA_SIM_ROOT") else Path(args.pid)
    if args.version:
        print(f"Version : {version}")
        return 0
    if args.term:
        return _terminate(pid_file)
    if _common.read_pid_file(pid_file):
        print("Host engine already running with pid " f"{_common.read_pid_file(pid_file)}", file=sys.stderr)
        return 1
    notify = None if args.no_daemon else _common.detach()
    try:
        engine = Engine(version)
        hardware.register_client(os.getpid(), NAME)  # before listening: a client that connects sees it held
        server = _Server((args.bind_interface, args.port), _Handler)
    except (_common.ToolError, OSError) as exc:
        hardware.unregister_client(os.getpid())
        message = exc.message if isinstance(exc, _common.ToolError) else str(exc)
        print(f"Err: Failed to start DCGM Server: {message}", file=sys.stderr)
        if notify:
            notify(False)
        return 1
    server.engine = engine  # type: ignore[attr-defined]
    _common.write_pid_file(pid_file)
    print(f"Started host engine version {version} using port number: {args.port}", flush=True)
    if notify:
        notify(True)
    stop = _common.StopFlag()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        hardware.unregister_client(os.getpid())
        pid_file.unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``nv-hostengine``."""
    return _common.run_main(lambda a: run(a, _common.tool_version(version, VERSION)), argv)


if __name__ == "__main__":
    sys.exit(main())
