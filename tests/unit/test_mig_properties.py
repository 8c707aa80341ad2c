"""Property tests of the MIG validator and planner (hypothesis), against an independent packing oracle."""

from __future__ import annotations

import sys
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_planner as mpl  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import (  # noqa: E402
    MODELS,
    GpuModel,
    get_model,
)

MODEL_NAMES = [m.name for m in MODELS]


def interval(start: int, size: int) -> set[int]:
    return set(range(start, start + size))


def oracle_packable(model: GpuModel, names: tuple[str, ...], taken: frozenset[int]) -> bool:
    """Exhaustive DP over (instance, occupied slots): independent of the validator's search."""

    @cache
    def go(i: int, occupied: frozenset[int]) -> bool:
        if i == len(names):
            return True
        profile = model.profile(names[i])
        assert profile is not None
        return any(go(i + 1, occupied | interval(s, profile.memory_slices))
                   for s in profile.starts if not occupied & interval(s, profile.memory_slices))

    return go(0, taken)


def oracle_accepts(model: GpuModel, counts: dict[str, int], pins: list[tuple[str, int]]) -> bool:
    names = [n for n, c in counts.items() for _ in range(c)]
    all_me = [n for n in names if n.endswith("+me.all")]  # NVML ALL_ME: every media engine; only NO_ME (-me) beside
    if len(all_me) > 1 or (all_me and any(not n.endswith(("+me.all", "-me")) for n in names)):
        return False
    for name, count in counts.items():
        profile = model.profile(name)
        assert profile is not None
        if count > profile.instance_count:
            return False
    if sum(model.profile(n).compute_slices * c for n, c in counts.items()) > model.compute_slices:  # type: ignore
        return False
    taken: set[int] = set()
    for name, start in pins:
        profile = model.profile(name)
        assert profile is not None
        if start not in profile.starts or taken & interval(start, profile.memory_slices):
            return False
        taken |= interval(start, profile.memory_slices)
    pinned = Counter(n for n, _ in pins)
    if any(pinned[n] > counts.get(n, 0) for n in pinned):
        return False
    rest = tuple(n for n, c in counts.items() for _ in range(c - pinned[n]))
    return oracle_packable(model, rest, frozenset(taken))


@st.composite
def layouts(draw: st.DrawFn) -> tuple[GpuModel, dict[str, int], list[tuple[str, int]]]:
    model = get_model(draw(st.sampled_from(MODEL_NAMES)))
    chosen = draw(st.lists(st.sampled_from(model.profile_names), min_size=1, max_size=4, unique=True))
    counts = {name: draw(st.integers(1, model.profile(name).instance_count + 1)) for name in chosen}  # type: ignore
    pins = draw(st.lists(st.tuples(st.sampled_from(chosen), st.integers(0, model.memory_slots - 1)), max_size=2))
    return model, counts, pins


@settings(max_examples=400, deadline=None, database=None)
@given(layouts())
def test_validator_agrees_with_oracle(case: tuple[GpuModel, dict[str, int], list[tuple[str, int]]]) -> None:
    model, counts, pins = case
    entries = [{"devices": "all", "mig_enabled": True, "gpu_instances": counts,
                "placements": [{"profile": n, "start": s} for n, s in pins]}]
    expected = oracle_accepts(model, counts, pins)
    if not expected:
        with pytest.raises(ml.LayoutError):
            ml.validate(entries, [{"index": 0, "model": model.name}])
        return
    config = ml.validate(entries, [{"index": 0, "model": model.name}])[0]
    assert Counter(gi.profile for gi in config.gpu_instances) == Counter(counts)
    occupied: set[int] = set()
    for gi in config.gpu_instances:
        profile = model.profile(gi.profile)
        assert profile is not None
        assert gi.start in profile.starts
        assert gi.size == profile.memory_slices
        assert not occupied & interval(gi.start, gi.size)
        occupied |= interval(gi.start, gi.size)
    assert sum(gi.compute_slices for gi in config.gpu_instances) <= model.compute_slices
    assert Counter(pins) <= Counter((gi.profile, gi.start) for gi in config.gpu_instances if gi.pinned)
    assert [(p, s) for p, s in ml.placements_for(config)] == [(gi.profile_id, gi.start)
                                                               for gi in config.gpu_instances]


@settings(max_examples=200, deadline=None, database=None)
@given(layouts())
def test_overflowing_slices_is_rejected(case: tuple[GpuModel, dict[str, int], list[tuple[str, int]]]) -> None:
    model, counts, _ = case
    profiles = {n: model.profile(n) for n in counts}
    compute = sum(profiles[n].compute_slices * c for n, c in counts.items())  # type: ignore[union-attr]
    memory = sum(profiles[n].memory_slices * c for n, c in counts.items())  # type: ignore[union-attr]
    assume(compute > model.compute_slices or memory > model.memory_slots)
    entries = [{"devices": "all", "mig_enabled": True, "gpu_instances": counts}]
    with pytest.raises(ml.LayoutError):
        ml.validate(entries, [{"index": 0, "model": model.name}])


def media_conflict(model: GpuModel, name: str, gis: list[dict[str, Any]]) -> bool:
    """NVML's ALL_ME profiles (+me.all) hold every media engine: only NO_ME (-me) instances fit beside one."""
    others = [model.profile_by_id(g["profile_id"]).name for g in gis]  # type: ignore[union-attr]
    if name.endswith("+me.all"):
        return any(not other.endswith("-me") for other in others)
    return not name.endswith("-me") and any(other.endswith("+me.all") for other in others)


@st.composite
def nvml_state(draw: st.DrawFn, model: GpuModel) -> list[dict[str, Any]]:
    """A random valid set of GPU instances as NVML would report it (random placements, random CIs)."""
    occupied: set[int] = set()
    compute = 0
    gis: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 7))):
        profile = model.profile(draw(st.sampled_from(model.profile_names)))
        assert profile is not None
        free = [s for s in profile.starts if not occupied & interval(s, profile.memory_slices)]
        used = sum(1 for g in gis if g["profile_id"] == profile.profile_id)
        if not free or compute + profile.compute_slices > model.compute_slices or used >= profile.instance_count:
            continue
        if media_conflict(model, profile.name, gis):
            continue
        start = draw(st.sampled_from(free))
        occupied |= interval(start, profile.memory_slices)
        compute += profile.compute_slices
        ci = draw(st.sampled_from(model.ci_profiles(profile)))
        gis.append({"id": len(gis) + 1, "profile_id": profile.profile_id, "start": start,
                    "size": profile.memory_slices,
                    "compute_instances": [{"id": 0, "profile_id": ci.profile_id, "slices": ci.compute_slices}]})
    return gis


def apply(model: GpuModel, gis: list[dict[str, Any]], actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply actions like NVML: no overlap, offered starts only, no GI destroyed while it holds CIs."""
    gis = [dict(g, compute_instances=list(g["compute_instances"])) for g in gis]
    for action in actions:
        if action["action"] == "destroy_ci":
            target = next(g for g in gis if g["id"] == action["gi_id"])
            target["compute_instances"] = [c for c in target["compute_instances"] if c["id"] != action["ci_id"]]
        elif action["action"] == "destroy_gi":
            target = next(g for g in gis if g["id"] == action["gi_id"])
            assert not target["compute_instances"]
            gis.remove(target)
        elif action["action"] == "create_gi":
            profile = model.profile_by_id(action["profile_id"])
            assert profile is not None
            assert action["start"] in profile.starts
            for other in gis:
                assert not interval(other["start"], other["size"]) & interval(action["start"], profile.memory_slices)
            gis.append({"id": 1000 + len(gis), "profile_id": profile.profile_id, "start": action["start"],
                        "size": profile.memory_slices, "compute_instances": []})
        elif action["action"] == "create_ci":
            target = next(g for g in gis if g["start"] == action["gi_start"])
            gi_profile = model.profile_by_id(target["profile_id"])
            assert gi_profile is not None
            ci_profile = model.ci_profile_by_id(gi_profile, action["profile_id"])
            assert ci_profile is not None
            assert action["start"] in ci_profile.starts
            mine = interval(action["start"], action["slices"])
            for other in target["compute_instances"]:
                assert not interval(other.get("start", 0), other["slices"]) & mine
            target["compute_instances"].append({"id": 100 + len(target["compute_instances"]), "start": action["start"],
                                                "profile_id": action["profile_id"], "slices": action["slices"]})
    return gis


def shape(gis: list[dict[str, Any]]) -> Counter[tuple[int, tuple[int, ...]]]:
    return Counter((g["profile_id"], tuple(sorted(c["profile_id"] for c in g["compute_instances"]))) for g in gis)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_plan_reaches_desired_and_keeps_what_fits(data: st.DataObject) -> None:
    model = get_model(data.draw(st.sampled_from(MODEL_NAMES)))
    before = data.draw(nvml_state(model))
    target = data.draw(nvml_state(model))
    counts = Counter(model.profile_by_id(g["profile_id"]).name for g in target)  # type: ignore[union-attr]
    cis = {}
    for g in target:
        gi_profile = model.profile_by_id(g["profile_id"])
        assert gi_profile is not None
        names = [ci.name for ci in model.ci_profiles(gi_profile)
                 if ci.profile_id == g["compute_instances"][0]["profile_id"]]
        cis.setdefault(gi_profile.name, []).append(names)
    entries = [{"devices": "all", "mig_enabled": True, "gpu_instances": dict(counts), "compute_instances": cis}]
    desired = ml.validate(entries, [{"index": 0, "model": model.name}])
    state = {"index": 0, "model": model.name, "mig": {"current": 1, "pending": 1}, "gpu_instances": before}
    actions = mpl.plan([state], desired)[0].actions
    after = apply(model, before, actions)
    assert shape(after) == shape(target)
    kept = {g["id"] for g in after}
    for g in before:  # an instance that stays never moves
        if g["id"] in kept:
            assert next(a for a in after if a["id"] == g["id"])["start"] == g["start"]
    again = {"index": 0, "model": model.name, "mig": {"current": 1, "pending": 1}, "gpu_instances": after}
    assert mpl.plan([again], desired)[0].actions == []
