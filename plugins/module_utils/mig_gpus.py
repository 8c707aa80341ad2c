# Copyright: (c) 2025, gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""The GPUs a MIG layout is validated against: one description per GPU, and which layout entries select it.

Split from :mod:`mig_layout` (which validates and re-exports these names): ``gpu_info(raw)`` normalises a GPU as
``gpu_facts``, NVML or an inventory describes it (index, model or name, PCI ids, MIG capability, the host's own
profile table) into a :class:`GpuInfo`; ``entry_matches(entry, gpu)`` says whether a parsed layout entry selects
it, the way mig-parted's ``devices`` and ``device-filter`` do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_entries import LayoutEntry
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_host import HOST_TABLE_KEY, model_for
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import (
    GpuModel,
    find_model,
    parse_pci_id,
)


@dataclass(frozen=True)
class GpuInfo:
    """What the validator needs to know about a GPU (from gpu_facts, NVML or an inventory)."""

    index: int
    model: GpuModel | None
    label: str
    raw_model: str | None
    raw_name: str | None
    pci_device_id: int | None
    pci_subsystem_id: int | None
    mig_capable: bool | None
    table_error: str | None = None

    @property
    def title(self) -> str:
        """``GPU 0 (A100-SXM4-80GB)`` for messages."""
        return f"GPU {self.index} ({self.label})"


def sub_mapping(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``raw[key]`` when it is a mapping, else an empty one."""
    value = raw.get(key)
    return value if isinstance(value, Mapping) else {}


def gpu_info(raw: Mapping[str, Any]) -> GpuInfo:
    """Normalise ``{index, model|name, pci_device_id[, pci_subsystem_id, mig_capable]}`` (or nested ``pci``)."""
    pci = sub_mapping(raw, "pci")
    device_id = parse_pci_id(raw.get("pci_device_id", pci.get("pci_device_id")))
    subsystem = parse_pci_id(raw.get("pci_subsystem_id", pci.get("pci_subsystem_id")))
    mig = sub_mapping(raw, "mig")
    capable = _boolean(raw.get("mig_capable", mig.get("supported")), "mig_capable")
    model = model_for(raw)
    label = model.name if model else str(raw.get("model") or raw.get("name") or "unknown model")
    index = raw.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"index {index!r} is not a GPU index (an integer >= 0)")
    error = raw.get(HOST_TABLE_KEY + "_error")
    if not error and HOST_TABLE_KEY in raw and not raw[HOST_TABLE_KEY] and capable:
        error = "NVML listed no GPU-instance profile"
    return GpuInfo(index, model, label, raw.get("model"), raw.get("name"), device_id, subsystem, capable,
                   str(error) if error else None)


_TRUE = ("true", "yes", "on", "1", "y", "t")
_FALSE = ("false", "no", "off", "0", "n", "f")


def _boolean(value: Any, field_name: str) -> bool | None:
    """A boolean as inventories give it: a bool, or one of Ansible's boolean strings (INI inventories)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"{field_name} {value!r} is not a boolean; use true or false")


def entry_matches(entry: LayoutEntry, gpu: GpuInfo) -> bool:
    """True when the layout entry selects this GPU: its devices, device filters and model all allow it."""
    if entry.devices != "all" and gpu.index not in entry.devices:
        return False
    if entry.device_filters:
        if gpu.pci_device_id is None:
            return False
        if not any(dev == gpu.pci_device_id and (sub is None or sub == gpu.pci_subsystem_id)
                   for dev, sub in entry.device_filters):
            return False
    if entry.model is not None:
        wanted = find_model(entry.model)
        if wanted is not None:
            return gpu.model is not None and gpu.model.name == wanted.name
        names = {str(n).upper() for n in (gpu.raw_model, gpu.raw_name) if n}
        return entry.model.upper() in names
    return True
