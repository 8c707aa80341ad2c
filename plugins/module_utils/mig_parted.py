# Copyright: (c) 2025, gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Import and export NVIDIA mig-parted configs (``version: v1`` / ``mig-configs``).

The checks and their messages follow mig-parted's own unmarshaller (api/spec/v1/spec.go, pkg/types), prefixed
with where the problem is (``mig-configs.<label>[<i>]``). ``mig-devices`` keys that name compute instances
(``1c.3g.20gb``) are grouped into GPU instances exactly as ``mig-parted apply`` does: profiles sorted largest GI
first, then larger CI; a compute instance goes into the GPU instance created just before it when that has the
same GI profile and room left, otherwise into a new one. Export refuses what mig-parted cannot express
(explicit placements, GPU instances without compute instances, CI sets that ``apply`` would group differently)
unless ``allow_lossy=True``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_planner import read_instances
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import (
    MODELS,
    ProfileName,
    ProfileSyntaxError,
    find_model,
    format_pci_id,
    parse_device_id,
    parse_pci_id,
    parse_profile_name,
)

ENTRY_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")


# No GPU model has more compute slices than this, so no GPU holds more MIG devices (checked before expanding).
MAX_MIG_DEVICES = max(model.compute_slices for model in MODELS)


class MigPartedError(ValueError):
    """A mig-parted config is invalid, or a layout cannot be written as one."""


# NVIDIA's largest published mig-parted config, gpu-operator's default (tests/data/gpu-operator), is 11.6 KB; a
# text 90 times that is not a MIG config, and PyYAML would take minutes and gigabytes over a 10 MB one.
MAX_TEXT_BYTES = 1024 * 1024


def too_large(size: int) -> str | None:
    """Why a mig-parted text of ``size`` bytes is refused, or None."""
    if size <= MAX_TEXT_BYTES:
        return None
    return (f"unable to parse mig-parted config: it is {size} bytes, more than the {MAX_TEXT_BYTES} this reads "
            "(NVIDIA's own default config is about 12 KB); check that the file is the mig-parted config")


def _load(doc: Any) -> Any:
    if isinstance(doc, (str, bytes)):
        import yaml  # PyYAML ships with ansible-core; only needed for text input

        problem = too_large(len(doc.encode("utf-8") if isinstance(doc, str) else doc))
        if problem:
            raise MigPartedError(problem)
        try:
            # PyYAML's pure-Python loader, not libyaml's CSafeLoader: the C one crashes the process (SIGSEGV) on a
            # deeply nested text where this one raises RecursionError; the size limit above bounds its time
            return yaml.safe_load(doc)
        except yaml.YAMLError as exc:
            raise MigPartedError(f"unable to parse mig-parted config: {exc}") from None
        except RecursionError:
            raise MigPartedError("unable to parse mig-parted config: it is nested too deeply; a mig-parted config "
                                 "is version, mig-configs, label, a list of entries, mig-devices") from None
    return doc


def _check_filter(value: Any, where: str) -> list[str]:
    """The device ids of a ``device-filter`` (string or list of strings). mig-parted's MatchesDeviceFilter
    (api/spec/v1/helpers.go) treats an empty string and an empty list as no filter at all: so does this ([])."""
    if value == "" or value == []:
        return []
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in values):
        raise MigPartedError(f"{where}: 'device-filter' must be a string or a list of strings, got {value!r}")
    if not all(v.strip() for v in values):
        # in a list, mig-parted parses '' to the zero DeviceID (the error ignored), which no GPU has: the entry
        # would silently match nothing. Only '' alone and [] mean "no filter" there.
        raise MigPartedError(f"{where}: 'device-filter' {value!r} holds an empty id: mig-parted would match no GPU "
                             "with it (only '' alone or [] mean no filter); remove the empty id, or the filter")
    result = []
    for text in values:
        parts = text.split(":")
        if len(parts) > 2:
            raise MigPartedError(f"{where}: invalid DeviceID format '{text}': expected '<devicevendor>' or "
                                 "'<devicevendor>:<subdevicevendor>'")
        try:
            ids = [parse_device_id(p, "device-filter") for p in parts]
        except ValueError as exc:
            raise MigPartedError(f"{where}: unable to create DeviceID from string '{text}': {exc}") from None
        result.append(":".join(format_pci_id(i) for i in ids if i is not None))
    return result


def _check_mig_devices(value: Any, where: str) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise MigPartedError(f"{where}: 'mig-devices' must be a map of MIG profile to count, got {value!r}")
    prefix = f"{where}: error validating values in 'mig-devices' field"
    result: dict[str, int] = {}
    for key, count in value.items():
        try:
            name = parse_profile_name(str(key)).name
        except ProfileSyntaxError as exc:
            raise MigPartedError(f"{prefix}: invalid format for '{key}': {exc}") from None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise MigPartedError(f"{prefix}: invalid count for '{key}': {count!r}")
        if count > MAX_MIG_DEVICES:
            raise MigPartedError(f"{prefix}: count {count} for '{key}' is more MIG devices than any GPU has (at most "
                                 f"{MAX_MIG_DEVICES}, one per compute slice)")
        result[name] = result.get(name, 0) + count
    if result and not any(result.values()):
        raise MigPartedError(f"{prefix}: all counts for all MigProfiles are 0")
    return {k: v for k, v in result.items() if v}


def parse_spec(doc: Any) -> dict[str, list[dict[str, Any]]]:
    """Check a mig-parted config (parsed dict or YAML/JSON text) the way mig-parted does.

    Returns ``{label: [{devices, device-filter (list or absent), mig-enabled, mig-devices}]}`` normalised."""
    try:
        return _parse_spec(doc)
    except RecursionError:
        raise MigPartedError("unable to parse mig-parted config: it is nested too deeply; a mig-parted config is "
                             "version, mig-configs, label, a list of entries, mig-devices") from None


def _parse_spec(doc: Any) -> dict[str, list[dict[str, Any]]]:
    doc = _load(doc)
    if not isinstance(doc, Mapping):
        raise MigPartedError(f"unable to parse mig-parted config: expected a mapping, got {doc!r}")
    if "version" not in doc and doc:
        raise MigPartedError("unable to parse with missing 'version' field")
    if doc.get("version") != "v1":
        raise MigPartedError("unknown version: %s" % (doc.get("version") if doc.get("version") is not None else ""))
    for key in doc:
        if key not in ("version", "mig-configs"):
            raise MigPartedError(f"unexpected field: {key}")
    configs = doc.get("mig-configs")
    if not isinstance(configs, Mapping) or not configs:
        raise MigPartedError("at least one entry in 'mig-configs' is required")
    result: dict[str, list[dict[str, Any]]] = {}
    for label, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            raise MigPartedError(f"at least one entry in '{label}' is required")
        result[str(label)] = [_parse_entry(raw, f"mig-configs.{label}[{i}]") for i, raw in enumerate(entries)]
    return result


def _parse_entry(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise MigPartedError(f"{where}: expected a mapping, got {raw!r}")
    for required in ("devices", "mig-enabled"):
        if required not in raw:
            raise MigPartedError(f"{where}: missing required field: {required}")
    for key in raw:
        if key not in ENTRY_FIELDS:
            raise MigPartedError(f"{where}: unexpected field: {key}")
    entry: dict[str, Any] = {}
    devices = raw["devices"]
    if isinstance(devices, str):
        if devices != "all":
            raise MigPartedError(f"{where}: invalid string input for 'devices': {devices}")
    elif not (isinstance(devices, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in devices)):
        raise MigPartedError(f"{where}: 'devices' must be \"all\" or a list of GPU indexes, got {devices!r}")
    entry["devices"] = devices if isinstance(devices, str) else list(devices)
    if raw.get("device-filter") is not None and _check_filter(raw["device-filter"], where):
        entry["device-filter"] = _check_filter(raw["device-filter"], where)
    if not isinstance(raw["mig-enabled"], bool):
        raise MigPartedError("{}: 'mig-enabled' must be true or false, got {!r}".format(where, raw["mig-enabled"]))
    entry["mig-enabled"] = raw["mig-enabled"]
    devices_map = raw.get("mig-devices")
    if devices_map is not None:
        entry["mig-devices"] = _check_mig_devices(devices_map, where)
    if entry["mig-enabled"] and devices_map is None:
        raise MigPartedError(f"{where}: missing required field 'mig-devices' when 'mig-enabled' is true")
    if not entry["mig-enabled"] and entry.get("mig-devices"):
        raise MigPartedError(f"{where}: MIG devices included when 'mig-enabled' is false")
    return entry


def group_mig_devices(mig_devices: Mapping[str, int]) -> list[tuple[str, tuple[str, ...]]]:
    """Group a ``mig-devices`` map into GPU instances the way ``mig-parted apply`` creates them.

    Returns ``[(gi_profile, (ci_profile, ...)), ...]`` in creation order."""
    flat: list[ProfileName] = []
    for key, count in mig_devices.items():
        flat += [parse_profile_name(key)] * count
    flat.sort(key=lambda p: (-p.gi_slices, -p.compute_slices, p.suffix, p.gb))
    groups: list[tuple[str, list[ProfileName]]] = []
    for profile in flat:
        if groups and groups[-1][0] == profile.gi_name and _fits(groups[-1][1], profile):
            groups[-1][1].append(profile)
        else:
            groups.append((profile.gi_name, [profile]))
    return [(gi, tuple(p.name for p in cis)) for gi, cis in groups]


def _fits(cis: Sequence[ProfileName], new: ProfileName) -> bool:
    used = sum(p.compute_slices for p in cis)
    same = sum(1 for p in cis if p.compute_slices == new.compute_slices)
    return used + new.compute_slices <= new.gi_slices and same < new.gi_slices // new.compute_slices


def _entry_from_spec(entry: Mapping[str, Any], as_list: bool = False) -> dict[str, Any]:
    layout: dict[str, Any] = {"devices": entry["devices"]}
    if entry.get("device-filter"):
        filters = entry["device-filter"]
        layout["device_filter"] = filters[0] if len(filters) == 1 and not as_list else list(filters)
    layout["mig_enabled"] = entry["mig-enabled"]
    if not entry["mig-enabled"]:
        return layout
    groups = group_mig_devices(entry.get("mig-devices") or {})
    counts: dict[str, int] = {}
    lists: dict[str, list[list[str]]] = {}
    for gi, cis in groups:
        counts[gi] = counts.get(gi, 0) + 1
        lists.setdefault(gi, []).append(list(cis))
    layout["gpu_instances"] = counts
    cis_map: dict[str, Any] = {}
    for gi, per_gi in lists.items():
        if all(one == [gi] for one in per_gi):
            continue
        cis_map[gi] = per_gi[0] if all(one == per_gi[0] for one in per_gi) else per_gi
    if cis_map:
        layout["compute_instances"] = cis_map
    return layout


def from_mig_parted(doc: Any, config: str | None = None) -> dict[str, list[dict[str, Any]]] | list[dict[str, Any]]:
    """mig-parted config -> gpufleet layouts ``{label: [entry, ...]}``; with ``config``, that label's entries."""
    doc = _load(doc)
    spec = parse_spec(doc)
    # a device-filter written as a list stays a list (a one-id list too), so an export writes it back the same way
    layouts = {label: [_entry_from_spec(e, isinstance(r.get("device-filter"), list))
                       for e, r in zip(entries, raw_entries, strict=True)]
               for (label, entries), raw_entries in zip(spec.items(), doc["mig-configs"].values(), strict=True)}
    if config is None:
        return layouts
    if config not in layouts:
        raise MigPartedError("selected mig-config '{}' not found; available: {}".format(config, ", ".join(layouts)))
    return layouts[config]


# --------------------------------------------------------------------------------------------------- export
def _gi_lists(counts: Mapping[str, int], cis: Mapping[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    result = []
    for gi, count in counts.items():
        value = cis.get(gi)
        if value is None:
            per_gi = [[gi]] * count
        elif value and all(isinstance(v, list) for v in value):
            per_gi = value
        else:
            per_gi = [value] * count
        result += [(parse_profile_name(gi).gi_name, tuple(parse_profile_name(c).name for c in one))
                   for one in per_gi]
    return result


def mig_devices_for(gis: Sequence[tuple[str, Sequence[str]]], where: str, allow_lossy: bool = False
                    ) -> dict[str, int]:
    """``[(gi_profile, [ci_profile, ...])]`` -> ``mig-devices``; refuses sets that ``apply`` would regroup."""
    devices: Counter[str] = Counter()
    for gi, cis in gis:
        if not cis and not allow_lossy:
            raise MigPartedError(f"{where}: a {gi} GPU instance without compute instances cannot be written as a "
                                 "mig-parted config; pass allow_lossy=True to drop it")
        devices.update(cis)
    result = dict(sorted(devices.items(), key=lambda kv: _sort_key(kv[0])))
    wanted = sorted((gi, tuple(sorted(cis))) for gi, cis in gis if cis)
    regrouped = sorted((gi, tuple(sorted(cis))) for gi, cis in group_mig_devices(result))
    if wanted != regrouped and not allow_lossy:
        raise MigPartedError(f"{where}: mig-parted would group these compute instances into GPU instances differently "
                             f"({regrouped} instead of {wanted}); pass allow_lossy=True to accept")
    return result


def _sort_key(name: str) -> tuple[int, int, int, str]:
    parsed = parse_profile_name(name)
    return (parsed.gi_slices, parsed.compute_slices, parsed.gb, parsed.suffix)


def _filters_for(entry: Mapping[str, Any], where: str) -> list[str] | None:
    filters = entry.get("device_filter")
    values = [] if filters is None else filters if isinstance(filters, list) else [filters]
    result = [found for v in values for found in _check_filter(v, where)]
    if entry.get("model") is not None:
        model = find_model(entry["model"])
        if model is None:
            raise MigPartedError(f"{where}: model '{entry['model']}' has no known PCI device id to write as a "
                                 "device-filter")
        ids = [format_pci_id(i) for i in model.pci_device_ids]
        result = [f for f in result if f.split(":")[0] in ids] if result else ids
        if not result:
            raise MigPartedError(f"{where}: device_filter and model '{entry['model']}' select no GPU together")
    return result or None


def _spec_entry(entry: Mapping[str, Any], where: str, allow_lossy: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    filters = _filters_for(entry, where)
    if filters:
        as_list = isinstance(entry.get("device_filter"), list)
        out["device-filter"] = filters[0] if len(filters) == 1 and not as_list else filters
    out["devices"] = entry.get("devices", "all")
    enabled = entry.get("mig_enabled", bool(entry.get("gpu_instances") or entry.get("placements")))
    out["mig-enabled"] = bool(enabled)
    if entry.get("placements") and not allow_lossy:
        raise MigPartedError(f"{where}: explicit placements cannot be written as a mig-parted config; pass "
                             "allow_lossy=True to drop them")
    if enabled:
        counts = dict(entry.get("gpu_instances") or Counter(p["profile"] for p in entry.get("placements") or []))
        gis = _gi_lists(counts, entry.get("compute_instances") or {})
        out["mig-devices"] = mig_devices_for(gis, where, allow_lossy)
    return out


def to_mig_parted(layouts: Mapping[str, Sequence[Mapping[str, Any]]], allow_lossy: bool = False) -> dict[str, Any]:
    """gpufleet layouts ``{name: [entry, ...]}`` -> a mig-parted ``version: v1`` config (a dict)."""
    configs = {}
    for name, entries in layouts.items():
        configs[name] = [_spec_entry(e, f"layout '{name}' entry[{i}]", allow_lossy)
                         for i, e in enumerate(entries)]
    result = {"version": "v1", "mig-configs": configs}
    parse_spec(result)  # what we write must read back
    return result


def export_gpus(gpus: Sequence[Mapping[str, Any]], label: str = "current", allow_lossy: bool = False
                ) -> dict[str, Any]:
    """Per-GPU state (validated configs or NVML ``current`` dicts) -> a one-label mig-parted config.

    Like ``mig-parted export``: GPUs with identical settings are merged into one entry; ``devices: all`` when
    every GPU is the same; a device-filter only when the host mixes GPU models."""
    groups: list[tuple[tuple[Any, ...], list[int], set[str]]] = []
    for gpu in sorted(gpus, key=lambda g: int(g["index"])):
        enabled = gpu.get("mig_enabled")
        if enabled is None:
            mig = gpu.get("mig") or {}
            enabled = bool(mig.get("current"))
        where = "GPU {}".format(gpu["index"])
        gis = []
        for gi in read_instances(gpu):
            if gi.profile is None:
                raise MigPartedError(f"{where}: GPU instance {gi.id} has profile id {gi.profile_id}, unknown for "
                                     "its model")
            gis.append((gi.profile, tuple(str(ci["profile"]) for ci in gi.cis)))
        devices = tuple(sorted(mig_devices_for(gis, where, allow_lossy).items())) if enabled else ()
        model = find_model(gpu.get("model"), gpu.get("name"), gpu.get("pci_device_id"))
        ids = {format_pci_id(i) for i in model.pci_device_ids} if model else set()
        if not ids and gpu.get("pci_device_id") is not None:
            ids = {format_pci_id(parse_pci_id(gpu["pci_device_id"]) or 0)}
        key = (bool(enabled), devices)
        for group in groups:
            if group[0] == key:
                group[1].append(int(gpu["index"]))
                group[2].update(ids)
                break
        else:
            groups.append((key, [int(gpu["index"])], set(ids)))
    entries = []
    all_ids = set().union(*(group[2] for group in groups)) if groups else set()
    for (enabled, devices), indexes, ids in groups:
        entry: dict[str, Any] = {}
        if len(groups) > 1 and ids and len(all_ids) > 1:
            entry["device-filter"] = sorted(ids)[0] if len(ids) == 1 else sorted(ids)
        entry["devices"] = "all" if len(groups) == 1 else indexes
        entry["mig-enabled"] = enabled
        if enabled:
            entry["mig-devices"] = dict(devices)
        entries.append(entry)
    return {"version": "v1", "mig-configs": {label: entries}}
