"""Simulated ``dcgm-exporter``: Prometheus ``/metrics`` with DCGM field names, for the fields in the counters file.

Like the real exporter it embeds its own host engine (no ``nv-hostengine`` needed) and holds every GPU as a
driver client while it runs. Each scrape reads NVML (and the XID history and MIG layout from the host's state).

As NVIDIA's exporter does (the label order of NVIDIA/dcgm-exporter ``pkg/dcgmexporter/expcollector.go``):

* On a GPU in MIG mode the profiling fields (``DCGM_FI_PROF_*``) are reported per GPU instance, with
  ``GPU_I_PROFILE`` and ``GPU_I_ID`` after ``modelName``; ``DCGM_FI_DEV_GPU_UTIL`` is not reported for it (DCGM has
  no whole-GPU utilisation in MIG mode, dcgm-exporter issue #430): the profiling fields replace it.
* ``--hpc-job-mapping-dir DIR`` (or ``DCGM_HPC_JOB_MAPPING_DIR``): a file per GPU named by its index, one job id a
  line; each sample of that GPU is repeated with an ``hpc_job`` label per job.
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
HPC_ENV = "DCGM_HPC_JOB_MAPPING_DIR"
PROF_PREFIX = "DCGM_FI_PROF_"
# DCGM has no whole-GPU utilisation for a GPU in MIG mode.
NOT_ON_MIG = frozenset({"DCGM_FI_DEV_GPU_UTIL"})


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


def _ratio(value: float) -> str:
    return f"{max(0.0, min(1.0, value)):.6f}"


def _busy(gpu: dict[str, Any]) -> float:
    """The simulated GPU's (or GPU instance's, see :meth:`Exporter._instances`) busy ratio from its utilisation."""
    return float(gpu.get("utilization", {}).get("gpu", 0)) / 100


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
    # Profiling (DCP) fields; on a MIG GPU ``g`` is one GPU instance's share (see Exporter._instances).
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": lambda nv, h, g: _ratio(_busy(g)),
    "DCGM_FI_PROF_SM_ACTIVE": lambda nv, h, g: _ratio(_busy(g) * 0.9),
    "DCGM_FI_PROF_SM_OCCUPANCY": lambda nv, h, g: _ratio(_busy(g) * 0.5),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": lambda nv, h, g: _ratio(_busy(g) * 0.3),
    "DCGM_FI_PROF_DRAM_ACTIVE": lambda nv, h, g: _ratio(float(g.get("utilization", {}).get("memory", 0)) / 100),
    "DCGM_FI_PROF_PCIE_TX_BYTES": lambda nv, h, g: 0,
    "DCGM_FI_PROF_PCIE_RX_BYTES": lambda nv, h, g: 0,
}


class Exporter:
    """Renders the metrics page."""

    def __init__(self, counters: list[Counter], hostname: str, job_dir: str | None = None) -> None:
        self.counters = counters
        self.hostname = hostname
        self.job_dir = Path(job_dir) if job_dir else None
        self.nv = _common.load_pynvml()
        _common.nvml_init(self.nv)
        self.lock = threading.Lock()

    def _jobs(self, index: int) -> list[str]:
        """The HPC jobs on GPU ``index``: the lines of ``<job dir>/<index>`` (none when there is no such file)."""
        if self.job_dir is None:
            return []
        try:
            text = (self.job_dir / str(index)).read_text(encoding="utf-8")
        except OSError:
            return []
        return [line.strip() for line in text.splitlines() if line.strip()]

    @staticmethod
    def _instances(gpu: dict[str, Any]) -> list[tuple[dict[str, str], dict[str, Any]]]:
        """``(GPU_I_* labels, state view)`` per GPU instance of a GPU in MIG mode; empty otherwise. An instance
        with a process of its own is as busy as the GPU; one without is idle."""
        mig = gpu.get("mig") or {}
        if not mig.get("current"):
            return []
        names = {p["id"]: p["name"] for p in mig.get("gi_profiles", [])}
        busy_gis = {p.get("gi_id") for p in gpu.get("processes", [])}
        out = []
        for gi in sorted(mig.get("gpu_instances", []), key=lambda g: g["id"]):
            labels = {"GPU_I_PROFILE": names.get(gi["profile_id"], "?"), "GPU_I_ID": str(gi["id"])}
            view = dict(gpu) if gi["id"] in busy_gis else {**gpu, "utilization": {"gpu": 0, "memory": 0}}
            out.append((labels, view))
        return out

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
                gpu = state_gpus.get(index, {})
                instances = self._instances(gpu)
                jobs = self._jobs(index)
                for field in samples:
                    if instances and field in NOT_ON_MIG:
                        continue
                    per = instances if instances and field.startswith(PROF_PREFIX) else [({}, gpu)]
                    for mig_labels, view in per:
                        try:
                            value = FIELDS[field](nv, handle, view)
                        except nv.NVMLError:
                            continue
                        samples[field] += [f"{field}{{{_labels(labels, mig_labels, job)}}} {value}"
                                           for job in (jobs or [None])]
        out = []
        for counter in self.counters:
            if counter.kind == "label":
                continue
            out += [f"# HELP {counter.field} {counter.help}", f"# TYPE {counter.field} {counter.kind}",
                    *samples[counter.field]]
        return "\n".join(out) + "\n"


def _labels(base: dict[str, str], mig: dict[str, str], job: str | None) -> str:
    """Labels in dcgm-exporter's order: gpu, UUID, pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID],
    Hostname, then the label fields and ``hpc_job`` (sorted, as Go ranges over a map)."""
    fixed = ("gpu", "UUID", "pci_bus_id", "device", "modelName")
    ordered = [(k, base[k]) for k in fixed] + list(mig.items()) + [("Hostname", base["Hostname"])]
    rest = {k: v for k, v in base.items() if k not in fixed and k != "Hostname"}
    if job is not None:
        rest["hpc_job"] = job
    ordered += sorted(rest.items())
    return ",".join(f'{k}="{v}"' for k, v in ordered)


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
    p.add_argument("--hpc-job-mapping-dir", default=os.environ.get(HPC_ENV) or None)
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
        exporter = Exporter(counters, socket.gethostname(), args.hpc_job_mapping_dir)
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
