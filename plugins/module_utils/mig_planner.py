# Copyright: (c) 2025, gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""MIG planner: from what NVML reports and a validated desired layout to ordered, minimal actions per GPU.

``plan(current, desired)``: ``current`` is one dict per GPU as NVML reports it::

    {index, uuid, model | name | pci_device_id, mig: {supported, current, pending, gpu_instances?},
     gpu_instances: [{id, profile_id | profile | profile_name, start, size,
                      compute_instances: [{id, profile_id | profile | name | slices}]}]}

(``gpu_instances`` may sit at the top level or inside ``mig``, as ``nvml.Nvml.mig_state`` returns it.)

``desired`` is :func:`mig_layout.validate`'s result (objects or their ``to_dict()``). A GPU whose GPU instances
already form the desired multiset in a valid packing gets no action. Otherwise existing GPU instances that the
layout wants are kept when the missing ones can still be packed around them (the largest such set is kept);
the rest are destroyed (their compute instances first) and the missing ones created with explicit placements.
Compute instances of a kept GPU instance are rebuilt only when their set differs. Every action is a plain dict.
"""

from __future__ import annotations

import marshal
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, TypeAlias

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_gpus import sub_mapping
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_host import HOST_TABLE_KEY, model_for
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_layout import (
    GiSpec,
    GpuConfig,
    LayoutError,
    find_packing,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import (
    CI_ENUM_BY_SLICES,
    GpuModel,
    find_model,
    parse_profile_name,
)

_SLICES_BY_CI_ENUM = {enum: slices for slices, enum in CI_ENUM_BY_SLICES.items()}


@dataclass
class ExistingGi:
    """A GPU instance that NVML reports."""

    id: int
    profile: str | None
    profile_id: int | None
    start: int
    size: int
    ci_slices: tuple[int, ...]
    cis: list[dict[str, Any]]


@dataclass
class GpuPlan:
    """The ordered actions for one GPU."""

    index: int
    uuid: str | None
    model: str | None
    actions: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""

    @property
    def changed(self) -> bool:
        """True when there is anything to do."""
        return bool(self.actions)

    @property
    def reset_required(self) -> bool:
        """True when a MIG mode change needs a GPU reset (Ampere) before it takes effect."""
        return any(a.get("reset_required") for a in self.actions)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {"index": self.index, "uuid": self.uuid, "model": self.model, "changed": self.changed,
                "reset_required": self.reset_required, "note": self.note, "actions": list(self.actions)}


def _ci_slices(ci: Mapping[str, Any]) -> int:
    if ci.get("slices") is not None:
        return int(ci["slices"])
    name = ci.get("profile") or ci.get("name")
    if name:
        return parse_profile_name(str(name)).compute_slices
    if ci.get("size") is not None:
        return int(ci["size"])
    return _SLICES_BY_CI_ENUM.get(int(ci.get("profile_id", -1)), 0)


def _existing(model: GpuModel | None, raw: Mapping[str, Any]) -> ExistingGi:
    profile = None
    profile_id = raw.get("profile_id")
    name = raw.get("profile") or raw.get("profile_name")
    if name:
        profile = parse_profile_name(str(name)).gi_name
        if model is not None:  # a driver's variant name (GB200's early 1g.24gb) is the catalogue's profile
            profile = model.canonical_profile_name(profile)
        known = model.profile(profile) if model else None
        if known is not None and profile_id is None:
            profile_id = known.profile_id
    elif model is not None and profile_id is not None:
        found = model.profile_by_id(int(profile_id))
        profile = found.name if found else None
    size = raw.get("size")
    known = model.profile(profile) if model and profile else None
    if size is None and known is not None:
        size = known.memory_slices
    cis = [dict(ci) for ci in raw.get("compute_instances") or []]
    gi_slices = parse_profile_name(profile).gi_slices if profile else 0
    for ci in cis:
        ci["slices"] = _ci_slices(ci)
        ci["profile"] = ci.get("profile") or ci.get("name")
        if not ci["profile"] and profile:
            ci["profile"] = profile if ci["slices"] == gi_slices else f"{ci['slices']}c.{profile}"
    slices = tuple(sorted((ci["slices"] for ci in cis), reverse=True))
    return ExistingGi(int(raw.get("id", -1)), profile, None if profile_id is None else int(profile_id),
                      int(raw.get("start", 0)), int(size or 0), slices, cis)


def _raw_instances(gpu: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    mig = sub_mapping(gpu, "mig")
    return list(gpu.get("gpu_instances") or mig.get("gpu_instances") or [])


def read_instances(gpu: Mapping[str, Any]) -> list[ExistingGi]:
    """The GPU instances of a GPU as NVML reports them (profile names resolved through the model table)."""
    model = model_for(gpu)
    return [_existing(model, gi) for gi in _raw_instances(gpu)]


def _mode(raw: Mapping[str, Any]) -> tuple[int | None, int | None]:
    mig = sub_mapping(raw, "mig")
    if mig.get("supported") is False:
        return None, None
    current, pending = mig.get("current"), mig.get("pending")
    if current is None:
        return None, None
    return int(current), int(pending if pending is not None else current)


def _try_keep(model: GpuModel, keep: Sequence[ExistingGi], desired: Sequence[GiSpec]
              ) -> tuple[dict[int, int], list[tuple[int, int]]] | None:
    """Assign each kept GI to a desired GI and pack the rest around them; None when impossible."""
    free = list(range(len(desired)))
    assignment: dict[int, int] = {}
    for pos, gi in enumerate(keep):  # pinned desired GIs match only at their start
        for j in free:
            if desired[j].pinned and desired[j].profile == gi.profile and desired[j].start == gi.start:
                assignment[pos] = j
                free.remove(j)
                break
    for pos, gi in enumerate(keep):
        if pos in assignment:
            continue
        candidates = [j for j in free if not desired[j].pinned and desired[j].profile == gi.profile]
        if not candidates:
            return None
        same_cis = [j for j in candidates if tuple(ci.slices for ci in desired[j].compute_instances) == gi.ci_slices]
        chosen = (same_cis or candidates)[0]
        assignment[pos] = chosen
        free.remove(chosen)
    occupied = [(gi.start, gi.size) for gi in keep]
    mask = 0
    for start, size in occupied:
        bits = ((1 << size) - 1) << start
        if mask & bits:
            return None
        mask |= bits
    creates: list[tuple[int, int]] = []
    for j in [j for j in free if desired[j].pinned]:
        bits = ((1 << desired[j].size) - 1) << desired[j].start
        if mask & bits:
            return None
        mask |= bits
        occupied.append((desired[j].start, desired[j].size))
        creates.append((j, desired[j].start))
    unpinned = [j for j in free if not desired[j].pinned]
    profiles = [model.profile(desired[j].profile) for j in unpinned]
    if any(p is None for p in profiles):
        return None
    packing = find_packing(model, [p for p in profiles if p is not None], occupied)
    if packing is None:
        return None
    remaining = list(unpinned)
    for profile, start in packing:
        j = next(j for j in remaining if desired[j].profile == profile.name)
        remaining.remove(j)
        creates.append((j, start))
    return assignment, creates


def _gi_ref(gpu: int, gi_id: int | None, profile: str | None, start: int) -> dict[str, Any]:
    return {"gpu": gpu, "gi_id": gi_id, "gi_profile": profile, "gi_start": start}


def _destroy_gi(index: int, gi: ExistingGi) -> list[dict[str, Any]]:
    """Destroy a GI: its compute instances first (NVML refuses to destroy a GI that still has some)."""
    actions = _destroy_cis(index, gi)
    actions.append({"action": "destroy_gi", "gpu": index, "gi_id": gi.id, "profile": gi.profile,
                    "profile_id": gi.profile_id, "start": gi.start, "size": gi.size})
    return actions


def _destroy_cis(index: int, gi: ExistingGi) -> list[dict[str, Any]]:
    return [{"action": "destroy_ci", "ci_id": ci.get("id"), "profile": ci.get("profile"),
             **_gi_ref(index, gi.id, gi.profile, gi.start)} for ci in gi.cis]


def _create_cis(index: int, gi_id: int | None, spec: GiSpec, start: int) -> list[dict[str, Any]]:
    return [{"action": "create_ci", "profile": ci.profile, "profile_id": ci.profile_id, "slices": ci.slices,
             "start": ci.start, **_gi_ref(index, gi_id, spec.profile, start)} for ci in spec.compute_instances]


def _best_keep(model: GpuModel, existing: list[ExistingGi], desired: list[GiSpec]
               ) -> tuple[Sequence[ExistingGi], dict[int, int], list[tuple[int, int]]]:
    """The largest set of existing GIs that can stay (first in start order among equals)."""
    wanted: Counter[str | None] = Counter(gi.profile for gi in desired)
    candidates = [gi for gi in existing if gi.profile in wanted]
    for size in range(len(candidates), -1, -1):
        for combo in combinations(candidates, size):
            if Counter(gi.profile for gi in combo) - wanted:
                continue
            found = _try_keep(model, combo, desired)
            if found is not None:
                return combo, found[0], found[1]
    # unreachable for a validated desired config: the empty set always packs
    raise LayoutError([f"no placement on {model.name} for the desired GPU instances"])


def _plan_instances(index: int, model: GpuModel, existing: list[ExistingGi], desired: list[GiSpec]
                    ) -> list[dict[str, Any]]:
    existing = sorted(existing, key=lambda g: (g.start, g.id))
    kept, assignment, creates = _best_keep(model, existing, desired)
    actions: list[dict[str, Any]] = []
    kept_ids = {id(gi) for gi in kept}
    for gi in existing:
        if id(gi) not in kept_ids:
            actions += _destroy_gi(index, gi)
    for pos, gi in enumerate(kept):
        spec = desired[assignment[pos]]
        if tuple(ci.slices for ci in spec.compute_instances) != gi.ci_slices:
            actions += _destroy_cis(index, gi)
            actions += _create_cis(index, gi.id, spec, gi.start)
    creates.sort(key=lambda item: (-desired[item[0]].size, -desired[item[0]].compute_slices, item[1]))
    for j, start in creates:
        spec = desired[j]
        actions.append({"action": "create_gi", "gpu": index, "profile": spec.profile, "profile_id": spec.profile_id,
                        "start": start, "size": spec.size})
        actions += _create_cis(index, None, spec, start)
    return actions


# Fleets repeat the same (current state, desired config) pairs: plans by what the planner reads of the GPU's state
# (not its index, which only names the GPU in the actions, nor its UUID, nor the temperatures and clocks gpu_facts
# also reports) and the config's fingerprint. The key is marshalled, so it tells 1 from 1.0 and True as a repr
# would; input marshal cannot take (say a str subclass) falls back to repr. A refusal names its GPU, so it is reused
# for that GPU only. Callers get copies, with their own GPU's index; the UUID is the caller's.
# what one GPU's plan comes to: (model label, actions, note), or the refusal
_Known: TypeAlias = "tuple[str | None, list[dict[str, Any]], str] | LayoutError"
_PLANNED: dict[tuple[str | bytes, str | None], tuple[int, _Known]] = {}
_PLANNED_MAX = 8192


def _state_key(current: Mapping[str, Any]) -> tuple[Any, ...]:
    """Every value of ``current`` that :func:`_plan_gpu` reads (model_for, _mode, _raw_instances, _existing) but
    the index."""
    get = current.get
    mig = get("mig")
    if type(mig) is not dict:  # the exact type: the fast path for what gpu_facts returns
        mig = sub_mapping(current, "mig")
    table = get(HOST_TABLE_KEY)
    gis = get("gpu_instances") or mig.get("gpu_instances") or ()
    # an absent key reads as ... (which no JSON or YAML value is): the planner reads some with a default (a GI's id
    # as -1, its start as 0), so an absent one and a None are not the same state
    key: list[Any] = [get("model", ...), get("name", ...), get("pci_device_id", ...), table,
                      get("memory_total_mib", ...) if table else None,
                      mig.get("supported", ...), mig.get("current", ...), mig.get("pending", ...), len(gis)]
    for gi in gis:  # flat: each GI's six values and its CI count, then six values per CI
        cis = gi.get("compute_instances") or ()
        try:  # gpu_facts' own dicts have all but profile: subscripts, the fast way to read them
            if type(gi) is not dict:  # a subclass's __missing__ would answer for an absent key
                raise KeyError
            key += (gi["id"], gi["profile_id"], gi.get("profile", ...), gi["profile_name"], gi["start"], gi["size"],
                    len(cis))
        except KeyError:
            key += (gi.get("id", ...), gi.get("profile_id", ...), gi.get("profile", ...), gi.get("profile_name", ...),
                    gi.get("start", ...), gi.get("size", ...), len(cis))
        for ci in cis:
            try:
                if type(ci) is not dict:
                    raise KeyError
                key += (ci["id"], ci["profile_id"], ci.get("profile", ...), ci["name"], ci["slices"], ci["size"])
            except KeyError:
                key += (ci.get("id", ...), ci.get("profile_id", ...), ci.get("profile", ...), ci.get("name", ...),
                        ci.get("slices", ...), ci.get("size", ...))
    return tuple(key)


def _plan_key(current: Mapping[str, Any], config: GpuConfig | None) -> tuple[str | bytes, str | None] | None:
    """The state marshalled, beside the config's fingerprint: a str every copy of the config shares, whose hash
    Python keeps (marshalling it too would copy and hash hundreds of characters for every GPU)."""
    fingerprint = config and config.fingerprint
    try:
        state = _state_key(current)
    except (AttributeError, TypeError):  # malformed input: planned (and refused) uncached
        return None
    try:
        return marshal.dumps(state, 2), fingerprint
    except ValueError:
        try:
            return repr(state), fingerprint
        except RecursionError:
            return None


def plan_gpu(current: Mapping[str, Any], desired: GpuConfig | Mapping[str, Any] | None) -> GpuPlan:
    """Plan one GPU; ``desired`` None means the layout does not manage it."""
    return _plan_cached(current, _gpu_index(current), None if desired is None else GpuConfig.from_dict(desired))


def _gpu_index(gpu: Mapping[str, Any]) -> int:
    """The GPU's index as an int (gpu_facts gives one; an inventory may give "3"); anything else is refused."""
    value = gpu["index"]
    try:
        return int(value)
    except (OverflowError, ValueError, TypeError):  # inf, "x", None
        raise LayoutError([f"GPU index {value!r} is not a GPU index (an integer >= 0); give each GPU the index "
                           "gpu_facts reports"]) from None


def _plan_cached(current: Mapping[str, Any], index: int, config: GpuConfig | None) -> GpuPlan:
    key = _plan_key(current, config)
    cached = _PLANNED.get(key) if key is not None else None
    if cached is None or (cached[0] != index and isinstance(cached[1], LayoutError)):
        try:
            fresh = _plan_gpu(current, config)
            known: _Known = (fresh.model, fresh.actions, fresh.note)
        except LayoutError as exc:
            known = exc
        if key is not None:
            if len(_PLANNED) >= _PLANNED_MAX:
                _PLANNED.clear()
            _PLANNED[key] = (index, known)
    else:
        known = cached[1]
    if isinstance(known, LayoutError):
        raise LayoutError(known.problems)
    model, actions, note = known
    copies = []
    for action in actions:  # the caller's own dicts, naming the caller's GPU
        copy = action.copy()
        copy["gpu"] = index
        copies.append(copy)
    return GpuPlan(index, current.get("uuid"), model, copies, note)


def _plan_gpu(current: Mapping[str, Any], desired: GpuConfig | None) -> GpuPlan:
    index = int(current["index"])  # the GPU named in every action (plan_gpu's cache puts the caller's index there)
    model = model_for(current)  # the GPU's own profile table when it carries one
    label = model.name if model else current.get("model") or current.get("name")
    result = GpuPlan(index, current.get("uuid"), label)
    if desired is None:
        result.note = "not managed by the layout"
        return result
    config = desired
    if model is None and config.model:
        model = find_model(config.model)
        result.model = result.model or config.model
    mode, pending = _mode(current)
    if not config.mig_capable or mode is None:
        result.note = "not MIG-capable"
        return result
    reset = model.mode_change_requires_reset if model else config.mode_change_requires_reset
    existing = [_existing(model, gi) for gi in _raw_instances(current)]
    actions = result.actions
    if not config.mig_enabled:
        for gi in sorted(existing, key=lambda g: (g.start, g.id)):
            actions += _destroy_gi(index, gi)
        if mode or pending:
            actions.append({"action": "set_mig_mode", "gpu": index, "mode": 0, "reset_required": bool(mode and reset)})
        return result
    if model is None:
        raise LayoutError([f"GPU {index}: the desired layout names model {config.model!r}, which has no MIG "
                           "profile table"])
    if mode == 0:
        actions.append({"action": "set_mig_mode", "gpu": index, "mode": 1, "reset_required": reset})
        existing = []
    elif pending == 0:
        actions.append({"action": "set_mig_mode", "gpu": index, "mode": 1, "reset_required": False})
    actions += _plan_instances(index, model, existing, list(config.gpu_instances))
    return result


def plan(current: Sequence[Mapping[str, Any]], desired: Sequence[GpuConfig | Mapping[str, Any]]
         ) -> list[GpuPlan]:
    """Plan every GPU of a host; GPUs absent from ``desired`` get no action. Ordered by GPU index."""
    by_index = {}
    for item in desired:
        config = GpuConfig.from_dict(item)
        by_index[config.index] = config
    indexed = sorted(((_gpu_index(gpu), n, gpu) for n, gpu in enumerate(current)), key=lambda item: item[:2])
    missing = sorted(set(by_index).difference(index for index, _, _ in indexed))
    if missing:
        have = ", ".join(str(r) for r in sorted({index for index, _, _ in indexed})) or "none"
        raise LayoutError([f"GPU {i}: in the desired layout but NVML reports no such GPU (GPUs: {have})"
                           for i in missing])
    return [_plan_cached(gpu, index, by_index.get(index)) for index, _, gpu in indexed]


def _describe(action: Mapping[str, Any]) -> str:
    kind = action["action"]
    if kind == "set_mig_mode":
        verb = "enable" if action["mode"] else "disable"
        return f"{verb} MIG mode" + (" (GPU reset required)" if action.get("reset_required") else "")
    if kind == "destroy_gi":
        return f"destroy GPU instance {action['gi_id']} ({action['profile']} at {action['start']})"
    if kind == "create_gi":
        return f"create GPU instance {action['profile']} at memory slice {action['start']}"
    if action.get("gi_id") is not None:
        where = f"GPU instance {action['gi_id']}"
    else:
        where = f"the new {action['gi_profile']} at {action['gi_start']}"
    if kind == "destroy_ci":
        return f"destroy compute instance {action['ci_id']} ({action['profile']}) on {where}"
    return f"create compute instance {action['profile']} on {where}"


def summarize(plans: Sequence[GpuPlan | Mapping[str, Any]]) -> str:
    """A human summary, one line per GPU and one indented line per action."""
    lines = []
    for item in plans:
        data = item.to_dict() if isinstance(item, GpuPlan) else item
        title = f"GPU {data['index']} ({data.get('model') or 'unknown model'})"
        if not data["actions"]:
            note = f" ({data['note']})" if data.get("note") else ""
            lines.append(f"{title}: no change{note}")
            continue
        reset = ", GPU reset required" if data.get("reset_required") else ""
        lines.append(f"{title}: {len(data['actions'])} action(s){reset}")
        lines += [f"  - {_describe(action)}" for action in data["actions"]]
    return "\n".join(lines)
