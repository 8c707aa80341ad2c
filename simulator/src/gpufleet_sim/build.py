"""Build the simulated ``libnvidia-ml.so.1`` from ``native/`` with make (used by packaging and tests)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

LIBRARY_NAME = "libnvidia-ml.so.1"


class BuildError(RuntimeError):
    """Raised when make fails; the message carries make's output."""


def native_dir() -> Path:
    """Return the folder holding the C sources and the Makefile."""
    return Path(str(resources.files("gpufleet_sim").joinpath("native")))


def build_library(out_dir: Path, driver_version: str, python: str = sys.executable) -> Path:
    """Build the library for ``driver_version`` into ``out_dir`` and return the path of the .so.

    ``python`` must have the pinned nvidia-ml-py: its ctypes classes generate the layout assertions.
    Objects live in ``out_dir/obj``; a changed ``driver_version`` rebuilds them.
    """
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cmd = ["make", "-j1", "-C", str(native_dir()), f"OUT={out}", f"DRIVER_VERSION={driver_version}",
           f"PYTHON={python}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"building {LIBRARY_NAME} failed (make exit {proc.returncode}):\n"
                         f"{proc.stdout}{proc.stderr}")
    lib = out / LIBRARY_NAME
    if not lib.is_file():
        raise BuildError(f"make succeeded but {lib} is missing")
    return lib


@contextmanager
def pynvml_bound(lib: Path, state: Path) -> Iterator[Any]:
    """The unmodified ``pynvml`` loading the simulated library ``lib`` with ``NVML_SIM_STATE=state``, in this
    process; yields pynvml. Afterwards pynvml's library, its function cache and the variable are as they were."""
    import pynvml

    saved = (pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache), os.environ.get("NVML_SIM_STATE"))
    pynvml.nvmlLib = ctypes.CDLL(str(lib))
    pynvml._nvmlGetFunctionPointer_cache.clear()
    os.environ["NVML_SIM_STATE"] = str(state)
    try:
        yield pynvml
    finally:
        pynvml.nvmlLib = saved[0]
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlGetFunctionPointer_cache.update(saved[1])
        if saved[2] is None:
            os.environ.pop("NVML_SIM_STATE", None)
        else:
            os.environ["NVML_SIM_STATE"] = saved[2]
