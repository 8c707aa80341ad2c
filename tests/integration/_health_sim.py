"""The simulated NVML library the gpu_health integration tests load (test_gpu_health_faults.py, _replayed.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = sys.executable
DRIVER_VERSION = "570.172.08"
LIB_DIR = ROOT / "build" / "health" / "lib"


def build_sim_library(out_dir: Path, driver_version: str) -> Path:
    """Build the simulator's libnvidia-ml.so.1 (``gpufleet_sim.build`` when present, else its Makefile)."""
    try:
        from gpufleet_sim.build import build_library
    except ImportError:
        subprocess.run(["make", "-j1", "-s", "-C", str(ROOT / "simulator/src/gpufleet_sim/native"), f"OUT={out_dir}",
                        f"DRIVER_VERSION={driver_version}", f"PYTHON={VENV_PYTHON}"], check=True)
        return out_dir / "libnvidia-ml.so.1"
    return Path(build_library(out_dir, driver_version))
