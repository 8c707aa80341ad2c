"""Helpers for the simulated-tool tests: a hand-written schema-1 state, the built library, running a tool."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
DRIVER_VERSION = "570.172.08"

_A100_GI_PROFILES = [
    # index, id, name, slices, instances, sms, ce, dec, enc, jpeg, ofa, memory_mib, placements(start,size)
    (0, 19, "1g.10gb", 1, 7, 14, 1, 0, 0, 0, 0, 9728, [[i, 1] for i in range(7)]),
    (7, 20, "1g.10gb+me", 1, 1, 14, 1, 1, 0, 1, 1, 9728, [[i, 1] for i in range(7)]),
    (9, 15, "1g.20gb", 1, 4, 14, 1, 1, 0, 0, 0, 19968, [[0, 2], [2, 2], [4, 2], [6, 2]]),
    (1, 14, "2g.20gb", 2, 3, 28, 2, 1, 0, 0, 0, 19968, [[0, 2], [2, 2], [4, 2]]),
    (2, 9, "3g.40gb", 3, 2, 42, 3, 2, 0, 0, 0, 40192, [[0, 4], [4, 4]]),
    (3, 5, "4g.40gb", 4, 1, 56, 4, 2, 0, 0, 0, 40192, [[0, 4]]),
    (4, 0, "7g.80gb", 7, 1, 98, 7, 5, 0, 1, 1, 80896, [[0, 8]]),
]


def _ci_profiles() -> dict[str, list[dict[str, Any]]]:
    table: dict[str, list[dict[str, Any]]] = {}
    enum_by_slices = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
    for gi_slices, ci_sizes in {1: [1], 2: [1, 2], 3: [1, 2, 3], 4: [1, 2, 4], 7: [1, 2, 3, 4, 7]}.items():
        rows = []
        for size in ci_sizes:
            count = gi_slices // size
            rows.append({"index": enum_by_slices[size], "id": enum_by_slices[size], "name": f"{size}c.{gi_slices}g",
                         "slices": size, "instances": count, "sms": 14 * size,
                         "placements": [[i * size, size] for i in range(count)]})
        table[str(gi_slices)] = rows
    return table


def make_gpu(index: int, host_seed: str = "test") -> dict[str, Any]:
    """One A100-SXM4-80GB GPU in the schema-1 layout of docs/simulator.md."""
    gpu_uuid = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host_seed}-{index}"))
    bus = 0x07 + index * 0x10
    return {
        "index": index, "model": "A100-SXM4-80GB", "name": "NVIDIA A100-SXM4-80GB", "uuid": gpu_uuid,
        "serial": f"14209220{index:05d}", "board_part_number": "692-2G506-0210-002",
        "vbios_version": "92.00.36.00.10", "inforom_image_version": "G506.0210.00.04", "minor_number": index,
        "brand": 2, "architecture": 7, "compute_capability": [8, 0],
        "pci": {"bus_id": f"00000000:{bus:02X}:00.0", "domain": 0, "bus": bus, "device": 0,
                "pci_device_id": 0x20B210DE, "pci_subsystem_id": 0x147F10DE},
        "memory": {"total_mib": 81920, "reserved_mib": 595, "used_mib": 0},
        "persistence_mode": 0, "compute_mode": 0, "performance_state": 0,
        "utilization": {"gpu": 0, "memory": 0},
        "ecc": {"current": 1, "pending": 1,
                "volatile": {"corrected": {"dram": 0, "sram": 0}, "uncorrected": {"dram": 0, "sram": 0}},
                "aggregate": {"corrected": {"dram": 0, "sram": 0}, "uncorrected": {"dram": 0, "sram": 0}}},
        "retired_pages": {"supported": False, "sbe": [], "dbe": [], "pending": 0},
        "remapped_rows": {"supported": True, "corrected": 0, "uncorrected": 0, "pending": 0, "failure": 0,
                          "histogram": {"max": 640, "high": 0, "partial": 0, "low": 0, "none": 0}},
        "temperature": {"gpu": 31, "shutdown": 92, "slowdown": 89, "mem_max": 95, "gpu_max": 87},
        "power": {"usage_mw": 61000, "limit_mw": 400000, "enforced_mw": 400000, "default_mw": 400000,
                  "min_mw": 100000, "max_mw": 400000},
        "clocks": {"current": {"graphics": 210, "sm": 210, "mem": 1593, "video": 585},
                   "max": {"graphics": 1410, "sm": 1410, "mem": 1593, "video": 1290}},
        "clock_event_reasons": 1,
        "pcie": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16, "gpu_max_gen": 4, "replay_counter": 0},
        "nvlink": {"version": 3, "links": [1] * 12},
        "mig": {
            "supported": True, "current": 0, "pending": 0, "reset_required_for_mode": True,
            "gi_profiles": [
                {"index": i, "id": pid, "name": name, "slices": sl, "instances": n, "sms": sms,
                 "copy_engines": ce, "decoders": dec, "encoders": enc, "jpegs": jpg, "ofas": ofa,
                 "memory_mib": mem, "p2p": 0, "placements": pl}
                for i, pid, name, sl, n, sms, ce, dec, enc, jpg, ofa, mem, pl in _A100_GI_PROFILES
            ],
            "ci_profiles": _ci_profiles(),
            "gpu_instances": [],
        },
        "processes": [], "events": [], "lost": False, "inject": {},
    }


def make_state(gpus: int = 2, nvswitch: bool = False) -> dict[str, Any]:
    """A whole schema-1 host document with ``gpus`` A100s."""
    doc: dict[str, Any] = {"schema": 1, "require_root": True, "inject": {}, "event_seq": 0, "clients": [],
                           "gpus": [make_gpu(i) for i in range(gpus)]}
    if nvswitch:
        doc["nvswitch"] = {"count": 6, "fabric_manager_required": True}
    return copy.deepcopy(doc)


def write_state(path: Path, doc: dict[str, Any]) -> Path:
    """Write a state document (plain write: nothing else runs yet)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path


def tool_env(state: Path, libdir: Path | None, **extra: str) -> dict[str, str]:
    """Environment for running a tool against ``state`` and the library in ``libdir``."""
    env = dict(os.environ)
    env["NVML_SIM_STATE"] = str(state)
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["LC_ALL"] = "C"
    if libdir is not None:
        env["LD_LIBRARY_PATH"] = str(libdir)
    env.update(extra)
    return env


def run_tool(module: str, args: list[str], env: dict[str, str], stdin: str | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m gpufleet_sim.tools.<module> args``."""
    return subprocess.run([sys.executable, "-m", f"gpufleet_sim.tools.{module}", *args], env=env, text=True,
                          capture_output=True, input=stdin, timeout=timeout, check=False)


def build_lib(driver_version: str = DRIVER_VERSION) -> Path:
    """Build (incrementally) the simulated library for ``driver_version``; return the folder holding it."""
    from gpufleet_sim.build import build_library

    lib = build_library(REPO / "build" / "sim-tools" / f"lib-{driver_version}", driver_version, python=sys.executable)
    return Path(lib).parent


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
