# Copyright: (c) 2025, gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""The host's own MIG profile table: what the driver says is the last word on a host.

On a host, ``read_gpu`` (:mod:`mig_read`) adds the GPU's profile table as NVML reports it
(``nvmlDeviceGetGpuInstanceProfileInfo`` for every profile enum, ``nvmlDeviceGetGpuInstancePossiblePlacements``
for each profile) under ``mig_profiles``: ``[{enum, id, name, slices, instances, memory_mib, placements:
[[start, size], ...]}]``. :func:`model_for` turns a GPU description into the :class:`GpuModel` that validates and
plans it:

* with a host table: a model built from that table alone (profile names as the driver prints them, ids,
  compute slices, instance counts, placements). The catalogue row of the same board, when there is one, gives
  only its name, its reset behaviour and its driver-name aliases (GB200's ``1g.24gb`` = ``1g.23gb``), mapped to
  whichever name this driver uses; so a GPU missing from the catalogue is planned from its own table, and a
  layout profile this driver does not offer is refused naming what it does offer.
* without one (the controller, an inventory): the catalogue row (:func:`mig_profiles.find_model`).

Compute-instance profiles follow go-nvlib's rule (:meth:`GpuModel.ci_profiles`): NVML lists them only inside an
existing GPU instance, so they cannot be read before the layout is applied; NVML refuses a CI it lacks at apply.

Host models are cached by their table (a fleet's GPUs share a few tables) and registered under a key of their
own (:func:`mig_profiles.register_model`), distinct from the catalogue row of the same name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import (
    GiProfile,
    GpuModel,
    ProfileSyntaxError,
    find_model,
    parse_profile_name,
    register_model,
)

HOST_TABLE_KEY = "mig_profiles"
HOST_TABLE_SOURCE = "the driver's MIG profile table (NVML)"

# one row of a host table: (name, enum, id, compute slices, memory slices, instances, MiB, starts)
HostRow = tuple[str, int, int, int, int, int, int, tuple[int, ...]]


def table_rows(raw: Any) -> tuple[HostRow, ...]:
    """The host table ``raw`` (``mig_profiles``) as hashable rows, sorted by profile id.

    A profile without placements cannot be created, and one whose name is not in NVIDIA's grammar cannot be named
    by a layout: both are left out. A malformed table raises ``ValueError`` saying what is wrong."""
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"{HOST_TABLE_KEY} must be a list of NVML GPU-instance profiles, got {type(raw).__name__}")
    rows = []
    for item in raw:
        try:
            name = str(item["name"])
            placements = [(int(p[0]), int(p[1])) for p in item.get("placements") or []]
            row = (name, int(item.get("enum", -1)), int(item["id"]), int(item["slices"]),
                   placements[0][1] if placements else 0, int(item["instances"]), int(item.get("memory_mib", 0)),
                   tuple(start for start, _ in placements))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"{HOST_TABLE_KEY}: profile {item!r} is not an NVML GPU-instance profile "
                             f"(need name, id, slices, instances, placements): {exc}") from None
        if not placements or len({size for _, size in placements}) != 1:
            continue
        try:
            parsed = parse_profile_name(name)
        except ProfileSyntaxError:
            continue
        if parsed.compute_slices != parsed.gi_slices:
            continue
        rows.append(row)
    return tuple(sorted(rows, key=lambda r: r[2]))


def _aliases(offline: GpuModel | None, names: set[str]) -> tuple[tuple[str, str], ...]:
    """The catalogue's driver-name aliases, pointed at the name this driver uses (either side of a pair)."""
    if offline is None:
        return ()
    result = []
    for alias, canonical in offline.profile_aliases:
        if canonical in names and alias not in names:
            result.append((alias, canonical))
        elif alias in names and canonical not in names:
            result.append((canonical, alias))
    return tuple(result)


@lru_cache(maxsize=256)
def _build(offline_name: str | None, label: str, memory_mib: int, rows: tuple[HostRow, ...]) -> GpuModel:
    offline = find_model(offline_name) if offline_name else None
    profiles = tuple(GiProfile(*row) for row in rows)
    digest = hashlib.sha1(repr((label, memory_mib, rows)).encode("utf-8")).hexdigest()[:12]
    model = GpuModel(
        name=offline.name if offline else label,
        pci_device_ids=offline.pci_device_ids if offline else (),
        nvml_names=offline.nvml_names if offline else (label,),
        aliases=(), memory_mib=memory_mib or (offline.memory_mib if offline else 0),
        memory_slots=max(start + p.memory_slices for p in profiles for start in p.starts),
        compute_slices=max(p.compute_slices for p in profiles),
        mode_change_requires_reset=offline.mode_change_requires_reset if offline else True,
        gi_profiles=profiles, profile_aliases=_aliases(offline, {p.name for p in profiles}),
        sources=(HOST_TABLE_SOURCE,), key=f"host:{digest}")
    register_model(model)
    return model


def model_for(raw: Mapping[str, Any]) -> GpuModel | None:
    """The model that validates and plans the GPU ``raw`` (a ``gpu_facts`` / ``read_gpu`` entry or an inventory
    description): its host table when it carries one, else the catalogue row, else None."""
    offline = find_model(raw.get("model"), raw.get("name"), raw.get("pci_device_id"))
    table = raw.get(HOST_TABLE_KEY)
    if not table:
        return offline
    rows = table_rows(table)
    if not rows:
        return offline
    label = str(raw.get("name") or raw.get("model") or "unknown model")
    memory = raw.get("memory_total_mib")
    return _build(offline.name if offline else None, label, int(memory) if isinstance(memory, int) else 0, rows)


def offers(model: GpuModel) -> str:
    """``1g.10gb x7, 1g.10gb+me x1, ...``: what a model offers (smallest first, with instance counts)."""
    ordered = sorted(model.gi_profiles, key=lambda p: (p.compute_slices, p.memory_slices, p.name))
    return ", ".join(f"{p.name} x{p.instance_count}" for p in ordered)
