"""gpufleet: provision and operate NVIDIA GPU servers with the Ansible collection gpufleet.nvidia.

The Python API lives in :mod:`gpufleet.api` (runs) and :mod:`gpufleet.results` (typed results); the command line in
:mod:`gpufleet.cli`. Importing this package imports neither, so that the simulator (:mod:`gpufleet_sim`) and the
test-host harness (:mod:`gpufleet_lab`) stay light.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpufleet")
except PackageNotFoundError:  # a checkout used without installing it
    __version__ = "0.0.0+checkout"

__all__ = ["__version__"]
