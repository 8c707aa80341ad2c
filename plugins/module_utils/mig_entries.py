# Copyright: (c) 2025, gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""MIG layout entries: the syntax of a named layout (``docs/mig.md``), parsed without any GPU.

Split from :mod:`mig_layout` (which validates parsed entries against GPUs and re-exports these names):
``parse_entries(entries)`` returns one :class:`LayoutEntry` per entry or raises :class:`LayoutError` listing
every syntax problem. ``devices`` (``all`` or indexes), ``model`` and ``device_filter`` select GPUs the way
mig-parted's ``devices`` and ``device-filter`` do (PCI ids read by :func:`mig_profiles.parse_device_id`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import (
    ProfileSyntaxError,
    parse_device_id,
    parse_profile_name,
)

ENTRY_KEYS = ("devices", "model", "device_filter", "mig_enabled", "gpu_instances", "placements", "compute_instances")

class LayoutError(ValueError):
    """A layout cannot be applied; ``problems`` holds one actionable sentence per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        if len(self.problems) == 1:
            message = self.problems[0]
        else:
            listed = "\n- ".join(self.problems)
            message = f"{len(self.problems)} problems in the MIG layout:\n- {listed}"
        super().__init__(message)


# --------------------------------------------------------------------------------------------------- entries
@dataclass
class LayoutEntry:
    """One parsed entry of a named layout."""

    position: int
    devices: str | tuple[int, ...] = "all"
    model: str | None = None
    device_filters: tuple[tuple[int, int | None], ...] = ()
    mig_enabled: bool = False
    gpu_instances: dict[str, int] = field(default_factory=dict)
    placements: list[tuple[str, int]] = field(default_factory=list)
    compute_instances: dict[str, list[list[str]]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How messages name this entry."""
        return f"layout entry[{self.position}]"


def _parse_filter(value: Any) -> tuple[int, int | None]:
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ValueError(f"device_filter {value!r} is not a PCI id; give '0xDDDDVVVV' or '0xDDDDVVVV:0xSSSSVVVV', "
                         "e.g. '0x20B210DE'")
    text = str(value).strip()
    parts = text.split(":")
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"device_filter '{text}' is not '0xDDDDVVVV' or '0xDDDDVVVV:0xSSSSVVVV'; give a PCI id "
                         "such as '0x20B210DE'")
    ids = [parse_device_id(part, "device_filter") for part in parts]
    return ids[0], (ids[1] if len(ids) == 2 else None)


def _gi_name(text: Any, where: str, problems: list[str]) -> str | None:
    try:
        parsed = parse_profile_name(text)
    except ProfileSyntaxError as exc:
        problems.append(f"{where}: {exc}")
        return None
    if parsed.compute_slices != parsed.gi_slices:
        problems.append(f"{where}: '{text}' names a compute instance; request the GPU instance "
                        f"'{parsed.gi_name}' and list '{parsed.name}' under compute_instances")
        return None
    return parsed.gi_name


def _parse_counts(entry: LayoutEntry, raw: Any, problems: list[str]) -> None:
    if not isinstance(raw, Mapping):
        problems.append(f"{entry.label}: gpu_instances must be a mapping of profile to count, got {raw!r}")
        return
    for key, count in raw.items():
        name = _gi_name(key, f"{entry.label}: gpu_instances", problems)
        if name is None:
            continue
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            problems.append(f"{entry.label}: gpu_instances count for {name} must be an integer >= 0, got {count!r}")
        elif count:
            entry.gpu_instances[name] = entry.gpu_instances.get(name, 0) + count


def _parse_placements(entry: LayoutEntry, raw: Any, problems: list[str]) -> None:
    if not isinstance(raw, list):
        problems.append(f"{entry.label}: placements must be a list of {{profile, start}}, got {raw!r}")
        return
    for item in raw:
        ok = isinstance(item, Mapping) and set(item) == {"profile", "start"}
        start = item.get("start") if isinstance(item, Mapping) else None
        if not ok or isinstance(start, bool) or not isinstance(start, int):
            problems.append(f"{entry.label}: placement {item!r} must be {{profile: <GI profile>, start: <int>}}")
            continue
        name = _gi_name(item["profile"], f"{entry.label}: placements", problems)
        if name is not None:
            entry.placements.append((name, start))


def _parse_cis(entry: LayoutEntry, raw: Any, problems: list[str]) -> None:
    if not isinstance(raw, Mapping):
        problems.append(f"{entry.label}: compute_instances must map a GI profile to a list of CI profiles")
        return
    for key, value in raw.items():
        name = _gi_name(key, f"{entry.label}: compute_instances", problems)
        if name is None:
            continue
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            lists = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            lists = [value]
        else:
            problems.append(f"{entry.label}: compute_instances for {name} must be a list of CI profiles (or one "
                            f"list per GPU instance), got {value!r}")
            continue
        entry.compute_instances[name] = [[str(v) for v in one] for one in lists]


def parse_entries(entries: Any) -> list[LayoutEntry]:
    """Parse a layout (a list of entries); raise :class:`LayoutError` listing every syntax problem."""
    if not isinstance(entries, list) or not entries:
        raise LayoutError([f"a MIG layout must be a non-empty list of entries, got {entries!r}"])
    problems: list[str] = []
    result = []
    for position, raw in enumerate(entries):
        entry = LayoutEntry(position)
        if not isinstance(raw, Mapping):
            problems.append(f"{entry.label}: must be a mapping, got {raw!r}")
            continue
        unknown = sorted(str(k) for k in raw if k not in ENTRY_KEYS)
        if unknown:
            problems.append("{}: unknown key(s) {}; allowed: {}".format(entry.label, ", ".join(unknown),
                                                                     ", ".join(ENTRY_KEYS)))
        devices = raw.get("devices", "all")
        if devices == "all":
            entry.devices = "all"
        elif isinstance(devices, list) and devices and all(isinstance(d, int) and not isinstance(d, bool)
                                                           and d >= 0 for d in devices):
            entry.devices = tuple(devices)
        else:
            problems.append(f"{entry.label}: devices must be 'all' or a non-empty list of GPU indexes, got {devices!r}")
        if raw.get("model") is not None:
            entry.model = str(raw["model"])
        filters = raw.get("device_filter")
        # an empty string here is refused (a template that rendered empty must not select every GPU); a mig-parted
        # config's empty device-filter is no filter, as mig-parted reads it, and is dropped on import
        for value in ([] if filters is None else filters if isinstance(filters, list) else [filters]):
            try:
                entry.device_filters += (_parse_filter(value),)
            except ValueError as exc:
                problems.append(f"{entry.label}: {exc}")
        wants_instances = bool(raw.get("gpu_instances") or raw.get("placements"))
        enabled = raw.get("mig_enabled", True if wants_instances else None)
        if not isinstance(enabled, bool):
            problems.append(f"{entry.label}: mig_enabled is required and must be true or false, got {enabled!r}")
        entry.mig_enabled = bool(enabled)
        if "gpu_instances" in raw and raw["gpu_instances"] is None:
            problems.append(f"{entry.label}: gpu_instances is empty (null); list the GPU instances, e.g. "
                            "gpu_instances: {'3g.40gb': 2}, or leave the key out (mig-parted refuses the same)")
        if raw.get("gpu_instances") is not None:
            _parse_counts(entry, raw["gpu_instances"], problems)
        if raw.get("placements") is not None:
            _parse_placements(entry, raw["placements"], problems)
        if raw.get("compute_instances") is not None:
            _parse_cis(entry, raw["compute_instances"], problems)
        if enabled is False and (entry.gpu_instances or entry.placements):
            problems.append(f"{entry.label}: mig_enabled is false but GPU instances are requested "
                            f"({_describe_counts(_entry_counts(entry))}); remove them or set mig_enabled: true")
        if not entry.gpu_instances and entry.placements:
            entry.gpu_instances = dict(Counter(name for name, _ in entry.placements))
        result.append(entry)
    if problems:
        raise LayoutError(problems)
    return result


def _entry_counts(entry: LayoutEntry) -> dict[str, int]:
    return entry.gpu_instances or dict(Counter(name for name, _ in entry.placements))


def _describe_counts(counts: Mapping[str, int]) -> str:
    return " + ".join(f"{name} x{n}" for name, n in counts.items())
