"""Load a Python file of the checkout that is not in an importable package (a filter plugin, Molecule's shared
``lab_hosts.py``) as a module: for the tests and tools that read such files."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from gpufleet_lab.podman import project_root


def load_file(name: str, path: Path) -> ModuleType:
    """The file at ``path`` executed as a module called ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lab_hosts() -> ModuleType:
    """molecule/_shared/lab_hosts.py as a module (its prepared baseline images: ``ensure_baselines``)."""
    return load_file("lab_hosts", project_root() / "molecule" / "_shared" / "lab_hosts.py")
