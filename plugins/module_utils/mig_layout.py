# Copyright: (c) 2025, gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Offline MIG layout model: parse named layouts, validate them against GPUs, find placements.

Pure Python (standard library only), used on the controller without a GPU by the ``gpufleet.nvidia.mig_*``
filters, by the ``nvidia_mig`` module, and by the planner (:mod:`mig_planner`). Layout format: ``docs/mig.md``.
``validate(entries, gpus)`` returns one :class:`GpuConfig` per GPU or raises :class:`LayoutError` that lists
every problem found, each naming the GPU, its model, the profile and the reason.
"""

from __future__ import annotations

import marshal
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_entries import (  # noqa: F401 (re-exported)
    ENTRY_KEYS,
    LayoutEntry,
    LayoutError,
    _describe_counts,
    _entry_counts,
    parse_entries,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_gpus import (  # noqa: F401 (re-exported)
    GpuInfo,
    entry_matches,
    gpu_info,
    sub_mapping,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_host import offers
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import (
    GiProfile,
    GpuModel,
    ProfileSyntaxError,
    describe_unknown,
    model_by_key,
)


@dataclass(frozen=True)
class CiSpec:
    """A compute instance to create inside a GPU instance, at ``start`` on its compute-slice axis."""

    profile: str
    profile_id: int
    slices: int
    start: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {"profile": self.profile, "profile_id": self.profile_id, "slices": self.slices, "start": self.start}


@dataclass(frozen=True)
class GiSpec:
    """A GPU instance of the desired layout, with its placement on the memory-slice axis."""

    profile: str
    profile_id: int
    start: int
    size: int
    compute_slices: int
    pinned: bool = False
    compute_instances: tuple[CiSpec, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {"profile": self.profile, "profile_id": self.profile_id, "start": self.start, "size": self.size,
                "compute_slices": self.compute_slices, "pinned": self.pinned,
                "compute_instances": [ci.to_dict() for ci in self.compute_instances]}


@dataclass
class GpuConfig:
    """The desired MIG state of one GPU (``gpu_instances`` in creation order: largest first)."""

    index: int
    model: str | None
    mig_enabled: bool
    entry: int | None = None
    mig_capable: bool = True
    mode_change_requires_reset: bool = True
    gpu_instances: list[GiSpec] = field(default_factory=list)
    # a layout's profile name -> the name the GPU's table uses for it, where they differ (a driver's alias)
    profile_names: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; :meth:`from_dict` reads it back."""
        return {"index": self.index, "model": self.model, "mig_enabled": self.mig_enabled, "entry": self.entry,
                "mig_capable": self.mig_capable, "mode_change_requires_reset": self.mode_change_requires_reset,
                "gpu_instances": [gi.to_dict() for gi in self.gpu_instances],
                "profile_names": dict(self.profile_names)}

    @classmethod
    def from_dict(cls, data: GpuConfig | Mapping[str, Any]) -> GpuConfig:
        """Accept a GpuConfig or its :meth:`to_dict` form (e.g. after a trip through Ansible variables)."""
        if isinstance(data, GpuConfig):
            return data
        gis = []
        for gi in data.get("gpu_instances") or []:
            cis = tuple(CiSpec(str(ci["profile"]), int(ci["profile_id"]), int(ci["slices"]), int(ci.get("start", 0)))
                        for ci in gi.get("compute_instances") or [])
            gis.append(GiSpec(str(gi["profile"]), int(gi["profile_id"]), int(gi["start"]), int(gi["size"]),
                              int(gi.get("compute_slices", 0)), bool(gi.get("pinned", False)), cis))
        return cls(index=int(data["index"]), model=data.get("model"), mig_enabled=bool(data["mig_enabled"]),
                   entry=data.get("entry"), mig_capable=bool(data.get("mig_capable", True)),
                   mode_change_requires_reset=bool(data.get("mode_change_requires_reset", True)),
                   gpu_instances=gis, profile_names=dict(data.get("profile_names") or {}))

    def copy(self) -> GpuConfig:
        """A copy that shares the immutable instance specs (and the fingerprint, while the copy is unchanged)."""
        self.fingerprint  # noqa: B018 (brought up to date on the original, then shared)
        return self._twin()

    def _twin(self) -> GpuConfig:
        # every attribute as it is (the fingerprint too: the property checks it against the twin's own state)
        attributes = self.__dict__.copy()
        attributes["gpu_instances"] = list(self.gpu_instances)
        attributes["profile_names"] = dict(self.profile_names)
        twin = object.__new__(GpuConfig)
        twin.__dict__ = attributes
        return twin

    def _state(self) -> tuple[Any, ...]:  # not the index: plan() matches it to a GPU, the planner never reads it
        return (self.model, self.mig_enabled, self.mig_capable, self.mode_change_requires_reset,
                tuple(self.gpu_instances))

    @property
    def fingerprint(self) -> str:
        """Everything the planner reads from this config, as one string (its cache key); recomputed when the
        config was changed since."""
        state = self._state()
        if getattr(self, "_fingerprint_of", None) != state:
            self._fingerprint, self._fingerprint_of = repr(state), state
        return self._fingerprint

    @property
    def profile_counts(self) -> dict[str, int]:
        """Requested GI profiles and how many of each."""
        return dict(Counter(gi.profile for gi in self.gpu_instances))


def placements_for(config: GpuConfig | Mapping[str, Any]) -> list[tuple[int, int]]:
    """The ``nvmlDeviceCreateGpuInstanceWithPlacement`` calls, in order, that build ``config`` on an empty GPU."""
    return [(gi.profile_id, gi.start) for gi in GpuConfig.from_dict(config).gpu_instances]



# --------------------------------------------------------------------------------------------------- packing
def _mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def sort_largest_first(profiles: Iterable[GiProfile]) -> list[GiProfile]:
    """Deterministic creation order: larger memory size, then more compute slices, then name."""
    return sorted(profiles, key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))


@lru_cache(maxsize=8192)
def _pack(model_key: str, names: tuple[str, ...], occupied: int) -> tuple[int, ...] | None:
    model = model_by_key(model_key)
    profiles = [model.profile(name) for name in names]
    free = model.memory_slots - bin(occupied & ((1 << model.memory_slots) - 1)).count("1")
    if sum(p.memory_slices for p in profiles if p) > free:
        return None
    starts: list[int] = []

    def place(i: int, mask: int) -> bool:
        if i == len(profiles):
            return True
        profile = profiles[i]
        assert profile is not None
        floor = starts[-1] if i and names[i - 1] == names[i] else -1  # identical instances: increasing starts
        for start in profile.starts:
            bits = _mask(start, profile.memory_slices)
            if start <= floor or mask & bits:
                continue
            starts.append(start)
            if place(i + 1, mask | bits):
                return True
            starts.pop()
        return False

    return tuple(starts) if place(0, occupied) else None


def find_packing(model: GpuModel, profiles: Sequence[GiProfile], occupied: Iterable[tuple[int, int]] = ()
                 ) -> list[tuple[GiProfile, int]] | None:
    """Place ``profiles`` around ``occupied`` ``(start, size)`` intervals: backtracking, largest first, lowest
    start first; deterministic. Returns ``[(profile, start)]`` in creation order, or None when no packing exists."""
    mask = 0
    for start, size in occupied:
        mask |= _mask(start, size)
    ordered = sort_largest_first(profiles)
    starts = _pack(model.cache_key, tuple(p.name for p in ordered), mask)
    if starts is None:
        return None
    return list(zip(ordered, starts, strict=False))


# --------------------------------------------------------------------------------------------------- validation
def _ci_specs(model: GpuModel, gi: GiProfile, names: list[str], where: str, problems: list[str]
              ) -> tuple[CiSpec, ...] | None:
    offered = {ci.name: ci for ci in model.ci_profiles(gi)}
    specs: list[CiSpec] = []
    for text in names:
        try:
            name = model.canonical_ci_name(text)  # a driver's alias of the GI -> the profile
        except ProfileSyntaxError as exc:
            problems.append(f"{where}: {exc}")
            return None
        if name not in offered:
            problems.append(f"{where}: compute instance '{text}' is not offered inside a {gi.name} GPU instance; "
                            f"valid: {', '.join(offered)}")
            return None
        ci = offered[name]
        specs.append(CiSpec(ci.name, ci.profile_id, ci.compute_slices))
    counts = Counter(spec.profile for spec in specs)
    for name, count in counts.items():
        if count > offered[name].instance_count:
            problems.append(f"{where}: {count} x {name} requested but a {gi.name} GPU instance holds at most "
                            f"{offered[name].instance_count}")
            return None
    used = sum(spec.slices for spec in specs)
    if used > gi.compute_slices:
        problems.append(f"{where}: compute instances {_describe_counts(counts)} do not fit a {gi.name} GPU instance: "
                        f"they need {used} compute slices, it has {gi.compute_slices}")
        return None
    ordered = [offered[s.profile] for s in sorted(specs, key=lambda s: (-s.slices, s.profile))]
    starts = model.pack_compute_instances(gi, ordered)
    if starts is None:
        problems.append(f"{where}: compute instances {_describe_counts(counts)} cannot be placed together inside a "
                        f"{gi.name} GPU instance (offered starts: " + "; ".join(
                            f"{c.name} {','.join(map(str, c.starts))}" for c in dict.fromkeys(ordered)) + ")")
        return None
    return tuple(CiSpec(c.name, c.profile_id, c.compute_slices, s) for c, s in zip(ordered, starts, strict=True))


def _validate_gpu(entry: LayoutEntry, gpu: GpuInfo, problems: list[str]) -> GpuConfig | None:
    model = gpu.model
    reset = model.mode_change_requires_reset if model else True
    if gpu.mig_capable is False:
        if entry.mig_enabled and entry.devices != "all":
            problems.append(f"{gpu.title}: not MIG-capable, but {entry.label} enables MIG on it; remove it from "
                            "devices")
            return None
        return GpuConfig(gpu.index, gpu.label, False, entry.position, False, reset)
    if not entry.mig_enabled:
        return GpuConfig(gpu.index, gpu.label, False, entry.position, True, reset)
    if model is None:
        unknown = describe_unknown(gpu.raw_model, gpu.raw_name, gpu.pci_device_id)
        if gpu.table_error:
            unknown += (f"; and its driver's MIG profile table could not be read ({gpu.table_error}), so it cannot "
                        "be planned from that either; check that `nvidia-smi mig -lgip` lists its profiles and run "
                        "again")
        problems.append(f"GPU {gpu.index}: {unknown}")
        return None
    before = len(problems)
    counts = dict(entry.gpu_instances)
    profiles: dict[str, GiProfile] = {}
    renamed: dict[str, str] = {}
    for name, count in counts.items():
        profile = model.profile(name)
        if profile is None:
            problems.append(_not_offered(gpu, model, name))
            continue
        profiles[name] = profile
        if profile.name != name:
            renamed[name] = profile.name
        if count > profile.instance_count:
            problems.append(f"{gpu.title}: {count} x {name} requested, but {model.name} offers at most "
                            f"{profile.instance_count} x {name}")
    _check_media_engines(gpu, profiles, problems)
    compute = sum(profiles[n].compute_slices * c for n, c in counts.items() if n in profiles)
    if len(profiles) == len(counts) and compute > model.compute_slices:
        problems.append(f"{gpu.title}: {_describe_counts(counts)} need {compute} compute slices; {model.name} has "
                        f"{model.compute_slices}")
    pinned = _check_pins(entry, gpu, model, profiles, problems)
    cis: dict[str, list[tuple[CiSpec, ...]]] = {}
    for name, lists in entry.compute_instances.items():
        where = f"{gpu.title}: compute_instances for {name}"
        if name not in profiles:
            if name not in counts:
                problems.append(f"{where}: {entry.label} does not request {name} GPU instances")
            continue
        if len(lists) > 1 and len(lists) != counts[name]:
            problems.append(f"{where}: {len(lists)} lists given for {counts[name]} GPU instances")
            continue
        parsed_cis = [_ci_specs(model, profiles[name], one, where, problems) for one in lists]
        if all(s is not None for s in parsed_cis):
            cis[profiles[name].name] = [s for s in parsed_cis if s is not None]  # a driver's alias -> the profile
    if len(problems) > before:
        return None
    occupied = [(start, profiles[name].memory_slices) for name, start in pinned]
    free: list[GiProfile] = []
    for name, count in counts.items():
        free += [profiles[name]] * (count - sum(1 for n, _ in pinned if n == name))
    packing = find_packing(model, free, occupied)
    if packing is None:
        problems.append(_no_packing_message(gpu, model, counts, profiles, pinned))
        return None
    placed = [(profiles[name], start, True) for name, start in pinned] + [(p, s, False) for p, s in packing]
    placed.sort(key=lambda item: (-item[0].memory_slices, -item[0].compute_slices, item[0].name, item[1]))
    seen: Counter[str] = Counter()
    gis = []
    for profile, start, is_pinned in placed:
        specs = cis.get(profile.name)
        if specs is None:
            default = model.ci_profiles(profile)[-1]
            ci_tuple: tuple[CiSpec, ...] = (CiSpec(default.name, default.profile_id, default.compute_slices, 0),)
        else:
            ci_tuple = specs[seen[profile.name]] if len(specs) > 1 else specs[0]
        seen[profile.name] += 1
        gis.append(GiSpec(profile.name, profile.profile_id, start, profile.memory_slices, profile.compute_slices,
                          is_pinned, ci_tuple))
    return GpuConfig(gpu.index, model.name, True, entry.position, True, reset, gis, renamed)


# One entry on one model gives the same config on every GPU (and host) it matches: accepted configs by the raw
# entry (marshalled, as _input_key does) and what the validator reads of the GPU, reused with the GPU's index.
# Refusals are not kept (their messages name the GPU).
_GPU_CONFIGS: dict[tuple[str | bytes, str | None, bool | None, str], GpuConfig] = {}


def _validate_gpu_cached(raw: Any, entry: LayoutEntry, gpu: GpuInfo, problems: list[str]) -> GpuConfig | None:
    raw_key = _input_key(raw)
    if raw_key is None:
        return _validate_gpu(entry, gpu, problems)
    key = (raw_key, gpu.model.cache_key if gpu.model else None, gpu.mig_capable, gpu.label)
    template = _GPU_CONFIGS.get(key)
    if template is None:
        before = len(problems)
        config = _validate_gpu(entry, gpu, problems)
        if config is not None and len(problems) == before:
            if len(_GPU_CONFIGS) >= _VALIDATED_MAX:
                _GPU_CONFIGS.clear()
            _GPU_CONFIGS[key] = config.copy()
        return config
    config = template.copy()
    config.index = gpu.index
    return config


def _check_media_engines(gpu: GpuInfo, profiles: Mapping[str, GiProfile], problems: list[str]) -> None:
    """A ``+me.all`` GPU instance holds all of the GPU's decode, encode, JPEG and OFA engines (NVML API reference,
    NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME / 2_SLICE_ALL_ME), so only ``-me`` instances (no media engines,
    NVML_GPU_INSTANCE_PROFILE_*_NO_ME) can sit beside it."""
    all_me = [p.name for p in profiles.values() if p.name.endswith("+me.all")]
    others = [p.name for p in profiles.values() if not p.name.endswith(("+me.all", "-me"))]
    if all_me and others:
        problems.append(f"{gpu.title}: {all_me[0]} takes all of the GPU's media engines (decode, encode, JPEG, OFA), "
                        f"so the other GPU instances beside it must be -me profiles (no media engines); "
                        f"{', '.join(others)} {'is' if len(others) == 1 else 'are'} not")
    elif len(all_me) > 1:
        problems.append(f"{gpu.title}: {' and '.join(all_me)} each take all of the GPU's media engines; request one "
                        "+me.all GPU instance at most")


def _not_offered(gpu: GpuInfo, model: GpuModel, name: str) -> str:
    if model.from_host:
        return (f"{gpu.title}: profile '{name}' is not offered by this GPU (its driver's MIG profile table); it "
                f"offers: {offers(model)}")
    return f"{gpu.title}: profile '{name}' is not offered by {model.name}; valid profiles: " \
           f"{', '.join(model.profile_names)}"


def _check_pins(entry: LayoutEntry, gpu: GpuInfo, model: GpuModel, profiles: Mapping[str, GiProfile],
                problems: list[str]) -> list[tuple[str, int]]:
    pinned: list[tuple[str, int]] = []
    for name, start in entry.placements:
        profile = profiles.get(name)
        if profile is None:
            if name not in entry.gpu_instances:
                problems.append(f"{gpu.title}: placement of {name} at {start}, but {entry.label} does not request "
                                f"{name}")
            continue
        if start not in profile.starts:
            offered = ", ".join(str(s) for s in profile.starts)
            problems.append(f"{gpu.title}: {name} cannot start at memory slice {start} on {model.name}; offered "
                            f"starts: {offered}")
            continue
        for other, other_start in pinned:
            size = profiles[other].memory_slices
            if start < other_start + size and other_start < start + profile.memory_slices:
                problems.append(f"{gpu.title}: explicit placements overlap: {other} at {_span(other_start, size)} "
                                f"and {name} at {_span(start, profile.memory_slices)}")
                break
        else:
            pinned.append((name, start))
    for name, count in Counter(n for n, _ in pinned).items():
        if count > entry.gpu_instances.get(name, 0):
            problems.append(f"{gpu.title}: {count} placements given for {name} but only "
                            f"{entry.gpu_instances.get(name, 0)} requested")
    return pinned


def _span(start: int, size: int) -> str:
    return f"slice {start}" if size == 1 else f"slices {start}-{start + size - 1}"


def _no_packing_message(gpu: GpuInfo, model: GpuModel, counts: Mapping[str, int],
                        profiles: Mapping[str, GiProfile], pinned: Sequence[tuple[str, int]]) -> str:
    need = sum(profiles[n].memory_slices * c for n, c in counts.items())
    head = f"{gpu.title}: {_describe_counts(counts)} cannot be placed together"
    if need > model.memory_slots:
        return f"{head}: they need {need} of the {model.memory_slots} memory slices"
    offers = "; ".join(f"{n} starts {','.join(str(s) for s in profiles[n].starts)} size {profiles[n].memory_slices}"
                       for n in counts)
    around = ""
    if pinned:
        around = " around the explicit placements " + ", ".join(f"{n}@{s}" for n, s in pinned)
    return f"{head}: no non-overlapping placement exists on the {model.memory_slots} memory slices{around} ({offers})"


def validate(entries: Any, gpus: Sequence[Mapping[str, Any]], unmatched: str = "error",
             absent: Sequence[int] = ()) -> list[GpuConfig]:
    """Validate a layout against a host's GPUs; return one :class:`GpuConfig` per GPU, ordered by index.

    ``unmatched``: ``error`` (default) rejects a GPU that no entry matches; ``ignore`` leaves it out of the
    result (the planner then leaves that GPU alone). ``absent``: indexes of GPUs the host has but that cannot be
    read (lost); entries may name them, they get no config. Raises :class:`LayoutError` with every problem found.
    """
    if unmatched not in ("error", "ignore"):
        raise ValueError(f"unmatched must be 'error' or 'ignore', got {unmatched!r}")
    key = _input_key((entries, gpus, unmatched, tuple(absent)))
    known = _VALIDATED.get(key) if key is not None else None
    if known is None:
        try:
            known = _validate(entries, gpus, unmatched, absent)
        except LayoutError as exc:
            known = exc
        except RecursionError:
            known = LayoutError(["the layout or the GPU list is nested too deeply; a layout is a list of entries "
                                 "whose values are mappings of profile to count"])
        if key is not None:
            if len(_VALIDATED) >= _VALIDATED_MAX:
                _VALIDATED.clear()
            _VALIDATED[key] = known
        if not isinstance(known, LayoutError):
            for config in known:
                config.fingerprint  # noqa: B018 (once, while cached: every copy handed out shares it)
    if isinstance(known, LayoutError):
        raise LayoutError(known.problems)
    return [config._twin() for config in known]


# Fleets share layouts and GPU tables: validate's verdicts by its inputs, marshalled (JSON-like data, whose marshal
# tells every difference that matters: types, order, values), else by their repr (a str subclass, say, which marshal
# refuses). Callers get copies.
_VALIDATED: dict[str | bytes, list[GpuConfig] | LayoutError] = {}
_VALIDATED_MAX = 4096


def clear_caches() -> None:
    """Forget every verdict, parsed layout, GPU description and packing kept so far (a cold start, for the
    benchmark and tests)."""
    for cache in (_VALIDATED, _GPU_CONFIGS, _PARSED, _GPU_INFOS):
        cache.clear()
    _pack.cache_clear()


def _input_key(data: Any) -> str | bytes | None:
    """A cache key that tells every difference of JSON-like ``data``; None when it is nested too deeply."""
    try:
        return marshal.dumps(data, 2)
    except ValueError:
        try:
            return repr(data)
        except RecursionError:
            return None


# A fleet's hosts repeat the same layouts and the same GPU descriptions in new combinations: parsed layouts and GPU
# descriptions by their marshal (never a refusal, whose message names its input). Both are only read once made.
_PARSED: dict[bytes | str, list[LayoutEntry]] = {}
_T = TypeVar("_T")
_GPU_INFOS: dict[bytes | str, GpuInfo] = {}


def _kept(cache: dict[bytes | str, _T], data: Any, make: Callable[[Any], _T]) -> _T:
    """``make(data)``, kept in ``cache`` by data's marshal; a refusal (``make`` raises) is not kept."""
    key = _input_key(data)
    known = cache.get(key) if key is not None else None
    if known is None:
        known = make(data)
        if key is not None:
            if len(cache) >= _VALIDATED_MAX:
                cache.clear()
            cache[key] = known
    return known


def _validate(entries: Any, gpus: Sequence[Mapping[str, Any]], unmatched: str, absent: Sequence[int]
              ) -> list[GpuConfig]:
    parsed = _kept(_PARSED, entries, parse_entries)
    problems: list[str] = []
    infos = []
    if not isinstance(gpus, (list, tuple)):
        raise LayoutError([f"the GPUs must be a list of GPU descriptions (gpu_facts' gpus), got {_short(gpus)}"])
    seen: set[int] = set()
    for raw in gpus:
        if not isinstance(raw, Mapping):
            problems.append(f"GPU {_short(raw)}: a GPU description must be a mapping with index, model or name, "
                            "pci_device_id")
            continue
        try:
            info = _kept(_GPU_INFOS, raw, gpu_info)
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"GPU {_short(raw)}: cannot read its description ({exc}); need index, model or name, "
                            "pci_device_id")
            continue
        if info.index in seen:
            problems.append(f"GPU {info.index}: listed more than once in the GPU descriptions; give each index once")
            continue
        seen.add(info.index)
        infos.append(info)
    result = []
    for gpu in sorted(infos, key=lambda g: g.index):
        matches = [e for e in parsed if entry_matches(e, gpu)]
        if len(matches) > 1:
            which = ", ".join(f"entry[{e.position}]" for e in matches)
            problems.append(f"{gpu.title}: matched by more than one layout entry ({which}); each GPU must be "
                            "matched by exactly one")
            continue
        if not matches:
            if unmatched == "error":
                problems.append(f"{gpu.title}: no layout entry matches it; add an entry for it or use devices: all")
            continue
        config = _validate_gpu_cached(entries[matches[0].position], matches[0], gpu, problems)
        if config is not None:
            result.append(config)
    known = {g.index for g in infos} | set(absent)
    for entry in parsed:
        if entry.devices != "all":
            for index in entry.devices:
                if index not in known:
                    have = ", ".join(str(i) for i in sorted(known)) or "none"
                    problems.append(f"{entry.label}: names GPU {index}, which the host does not have (GPUs: {have})")
    if problems:
        raise LayoutError(problems)
    return result


def _short(value: Any, limit: int = 120) -> str:
    """``repr`` cut to ``limit`` characters (inputs can be huge or deeply nested)."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<{type(value).__name__} nested too deeply>"
    return text if len(text) <= limit else text[:limit] + "..."


def plan(current: Sequence[Mapping[str, Any]], desired: Sequence[GpuConfig | Mapping[str, Any]]) -> list[Any]:
    """Per-GPU ordered actions; see :func:`mig_planner.plan` (imported lazily: the planner imports this module)."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_planner import plan as _plan

    return _plan(current, desired)


def summarize(plans: Sequence[Any]) -> str:
    """A human summary of a plan; see :func:`mig_planner.summarize`."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_planner import summarize as _summarize

    return _summarize(plans)
