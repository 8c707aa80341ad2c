"""Simulated ``dcgm-exporter``: Prometheus ``/metrics`` with DCGM field names, for the fields in the counters file.

Like the real exporter it embeds its own host engine (no ``nv-hostengine`` needed) and holds every GPU as a
driver client while it runs. Each scrape reads NVML (and the XID history from the host's state).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .. import hardware, store
from . import _common

NAME = "dcgm-exporter"
DEFAULT_COUNTERS = "/etc/dcgm-exporter/default-counters.csv"
DEFAULT_COUNTERS_CSV = """# Format
# If line starts with a '#' it is considered a comment
# DCGM FIELD, Prometheus metric type, help message

# Clocks
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).

# Temperature
DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).

# Power
DCGM_FI_DEV_POWER_USAGE,              gauge, Power draw (in W).

# PCIE
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.

# Utilization (the sample period varies depending on the product)
DCGM_FI_DEV_GPU_UTIL,      gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).

# Errors and violations
DCGM_FI_DEV_XID_ERRORS,              gauge,   Value of the last XID error encountered.
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL,       counter, Total number of single-bit volatile ECC errors.
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,       counter, Total number of double-bit volatile ECC errors.

# Memory usage
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved (in MiB).

# Remapped rows
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS,   counter, Number of remapped rows for correctable errors
DCGM_FI_DEV_ROW_REMAP_FAILURE,           gauge,   Whether remapping of rows has failed

# Static configuration information
DCGM_FI_DRIVER_VERSION,        label, Driver Version
"""


@dataclass
class Counter:
    """One line of the counters file."""

    field: str
    kind: str
    help: str


def parse_counters(text: str) -> list[Counter]:
    """The counters of a dcgm-exporter CSV (comments and blank lines skipped).

    Raises:
        ValueError: a line without three comma-separated parts, or an unknown field.
    """
    counters = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) != 3:
            raise ValueError(f"line {number}: expected 'field, type, help', got {raw!r}")
        if parts[0] not in FIELDS and parts[0] != "DCGM_FI_DRIVER_VERSION":
            raise ValueError(f"line {number}: unknown DCGM field {parts[0]}")
        counters.append(Counter(*parts))
    return counters


Getter = Callable[[Any, Any, dict[str, Any]], Any]


def _mib(value: int) -> int:
    return int(value) // (1024 * 1024)


def _xid(nv: Any, h: Any, gpu: dict[str, Any]) -> int:
    xids = [int(e["data"]) for e in gpu.get("events", []) if e.get("type") == 0x8]
    return xids[-1] if xids else 0


FIELDS: dict[str, Getter] = {
    "DCGM_FI_DEV_SM_CLOCK": lambda nv, h, g: nv.nvmlDeviceGetClockInfo(h, 1),
    "DCGM_FI_DEV_MEM_CLOCK": lambda nv, h, g: nv.nvmlDeviceGetClockInfo(h, 2),
    "DCGM_FI_DEV_GPU_TEMP": lambda nv, h, g: nv.nvmlDeviceGetTemperature(h, 0),
    "DCGM_FI_DEV_POWER_USAGE": lambda nv, h, g: f"{nv.nvmlDeviceGetPowerUsage(h) / 1000:.3f}",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda nv, h, g: int(g.get("pcie", {}).get("replay_counter", 0)),
    "DCGM_FI_DEV_GPU_UTIL": lambda nv, h, g: nv.nvmlDeviceGetUtilizationRates(h).gpu,
    "DCGM_FI_DEV_MEM_COPY_UTIL": lambda nv, h, g: nv.nvmlDeviceGetUtilizationRates(h).memory,
    "DCGM_FI_DEV_XID_ERRORS": _xid,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": lambda nv, h, g: nv.nvmlDeviceGetTotalEccErrors(h, 0, 0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda nv, h, g: nv.nvmlDeviceGetTotalEccErrors(h, 1, 0),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": lambda nv, h, g: nv.nvmlDeviceGetTotalEccErrors(h, 0, 1),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": lambda nv, h, g: nv.nvmlDeviceGetTotalEccErrors(h, 1, 1),
    "DCGM_FI_DEV_FB_FREE": lambda nv, h, g: _mib(nv.nvmlDeviceGetMemoryInfo(h).free),
    "DCGM_FI_DEV_FB_USED": lambda nv, h, g: _mib(nv.nvmlDeviceGetMemoryInfo(h).used),
    "DCGM_FI_DEV_FB_RESERVED": lambda nv, h, g: int(g.get("memory", {}).get("reserved_mib", 0)),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda nv, h, g: nv.nvmlDeviceGetRemappedRows(h)[1],
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": lambda nv, h, g: nv.nvmlDeviceGetRemappedRows(h)[0],
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda nv, h, g: nv.nvmlDeviceGetRemappedRows(h)[3],
    "DCGM_FI_DEV_ROW_REMAP_PENDING": lambda nv, h, g: nv.nvmlDeviceGetRemappedRows(h)[2],
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": lambda nv, h, g: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
    "DCGM_FI_DEV_PSTATE": lambda nv, h, g: nv.nvmlDeviceGetPerformanceState(h),
}


class Exporter:
    """Renders the metrics page."""

    def __init__(self, counters: list[Counter], hostname: str) -> None:
        self.counters = counters
        self.hostname = hostname
        self.nv = _common.load_pynvml()
        _common.nvml_init(self.nv)
        self.lock = threading.Lock()

    def render(self) -> str:
        """The Prometheus text exposition of every counter on every GPU NVML can open."""
        nv = self.nv
        try:
            state_gpus = {g["index"]: g for g in store.load().get("gpus", [])}
        except store.StateError:
            state_gpus = {}
        extra = {}
        if any(c.field == "DCGM_FI_DRIVER_VERSION" for c in self.counters):
            extra["DCGM_FI_DRIVER_VERSION"] = _common.text(nv.nvmlSystemGetDriverVersion())
        samples: dict[str, list[str]] = {c.field: [] for c in self.counters if c.kind != "label"}
        with self.lock:
            for index in range(nv.nvmlDeviceGetCount()):
                try:
                    handle = nv.nvmlDeviceGetHandleByIndex(index)
                    labels = {"gpu": str(index), "UUID": _common.text(nv.nvmlDeviceGetUUID(handle)),
                              "pci_bus_id": _common.text(nv.nvmlDeviceGetPciInfo(handle).busId),
                              "device": f"nvidia{nv.nvmlDeviceGetMinorNumber(handle)}",
                              "modelName": _common.text(nv.nvmlDeviceGetName(handle)), "Hostname": self.hostname,
                              **extra}
                except nv.NVMLError:
                    continue
                text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                for field in samples:
                    try:
                        value = FIELDS[field](nv, handle, state_gpus.get(index, {}))
                    except nv.NVMLError:
                        continue
                    samples[field].append(f"{field}{{{text}}} {value}")
        out = []
        for counter in self.counters:
            if counter.kind == "label":
                continue
            out += [f"# HELP {counter.field} {counter.help}", f"# TYPE {counter.field} {counter.kind}",
                    *samples[counter.field]]
        return "\n".join(out) + "\n"


def _handler(exporter: Exporter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                body, status, ctype = b"<html><a href=\"/metrics\">/metrics</a></html>\n", 200, "text/html"
                if self.path.split("?")[0] not in ("/", ""):
                    body, status, ctype = b"404 page not found\n", 404, "text/plain"
            else:
                body, status, ctype = exporter.render().encode(), 200, "text/plain; version=0.0.4"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def run(argv: list[str], version: str) -> int:
    """Run the exporter until SIGTERM; return its exit status."""
    p = argparse.ArgumentParser(prog=NAME, description="NVIDIA DCGM exporter (simulated)")
    p.add_argument("-f", "--collectors", default=DEFAULT_COUNTERS)
    p.add_argument("-a", "--address", default=":9400")
    p.add_argument("-v", "--version", action="store_true")
    args = p.parse_args(argv)
    if args.version:
        print(f"dcgm-exporter version {version}")
        return 0
    try:
        counters = parse_counters(Path(args.collectors).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f'level=ERROR msg="Failed to read collectors file {args.collectors}: {exc}"', file=sys.stderr)
        return 1
    host, _, port = args.address.rpartition(":")
    try:
        exporter = Exporter(counters, socket.gethostname())
        hardware.register_client(os.getpid(), NAME)  # before listening: a scraper that connects sees it held
        server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), _handler(exporter))
    except (_common.ToolError, OSError, ValueError) as exc:
        hardware.unregister_client(os.getpid())
        message = exc.message if isinstance(exc, _common.ToolError) else str(exc)
        print(f'level=ERROR msg="Failed to start: {message}"', file=sys.stderr)
        return 1
    stop = _common.StopFlag()
    print(f'level=INFO msg="Starting webserver" address={args.address}', file=sys.stderr, flush=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        hardware.unregister_client(os.getpid())
    return 0


def main(argv: list[str] | None = None, version: str | None = None) -> int:
    """Entry point of ``dcgm-exporter``."""
    return _common.run_main(lambda a: run(a, _common.tool_version(version, "4.4.1-4.5.2")), argv)


if __name__ == "__main__":
    sys.exit(main())
