"""GPU model data of the simulator: one JSON file per model in ``models/``.

A model file holds what the simulated driver reports for a GPU of that kind (marketing name as NVML
reports it, PCI ids, memory, clocks, power, PCIe, NVLink, RAS features) and, for MIG-capable models,
NVIDIA's GPU-instance and compute-instance profile tables. ``presets.py`` copies them into a state document.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

NVIDIA_VENDOR_ID = 0x10DE

REQUIRED_KEYS = (
    "model",
    "name",
    "architecture",
    "compute_capability",
    "brand",
    "pci",
    "board_part_number",
    "vbios_version",
    "inforom_image_version",
    "memory",
    "clocks",
    "power",
    "temperature",
    "pcie",
    "nvlink",
    "retired_pages",
    "remapped_rows",
    "row_remapper_max",
    "mig",
)


class UnknownModelError(KeyError):
    """Raised for a model name that has no file in ``models/``."""

    def __str__(self) -> str:
        """Return the message without KeyError's quoting."""
        return str(self.args[0])


class ModelDataError(ValueError):
    """Raised when a model file lacks a required key."""


def _models_dir() -> Any:
    return resources.files("gpufleet_sim").joinpath("models")


def list_models() -> list[str]:
    """Return the names of all models, sorted."""
    return sorted(p.name[: -len(".json")] for p in _models_dir().iterdir() if p.name.endswith(".json"))


@functools.cache
def _load(name: str) -> str:
    path = _models_dir().joinpath(f"{name}.json")
    if not path.is_file():
        known = ", ".join(list_models())
        raise UnknownModelError(f"unknown GPU model {name!r}; known models: {known}")
    text: str = path.read_text(encoding="utf-8")
    return text


def load_model(name: str) -> dict[str, Any]:
    """Return the model's data (a fresh copy: callers may change it)."""
    data: dict[str, Any] = json.loads(_load(name))
    missing = [key for key in REQUIRED_KEYS if key not in data]
    if missing:
        raise ModelDataError(f"model file {name}.json lacks {', '.join(missing)}")
    if data["model"] != name:
        raise ModelDataError(f"model file {name}.json names itself {data['model']!r}")
    return data


def pci_ids(model: dict[str, Any]) -> tuple[int, int]:
    """Return (pciDeviceId, pciSubSystemId) as NVML reports them: ``device << 16 | vendor``."""
    device = int(model["pci"]["device"], 16)
    subsystem = int(model["pci"]["subsystem"], 16)
    return device << 16 | NVIDIA_VENDOR_ID, subsystem << 16 | NVIDIA_VENDOR_ID
