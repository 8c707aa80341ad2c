"""The planner's and validator's caches (mig_planner._PLANNED, mig_layout._VALIDATED) never change an answer.

The planner keys its cache by the values of a GPU's state that it reads, so that a fleet's GPUs that differ only in
what the planner ignores (UUIDs, MIG device UUIDs, temperatures) share one plan. These tests plan every state twice,
once after a cold start and once with the cache warmed by states that differ in exactly one read value, and demand
equal answers: a key that misses a value the planner reads would hand one state another's plan.
"""

from __future__ import annotations

import collections
import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_planner as mpl  # noqa: E402

A100 = "A100-SXM4-80GB"
WANT = ml.validate([{"devices": "all", "gpu_instances": {"3g.40gb": 1, "1g.10gb": 4}}],
                   [{"index": 0, "model": A100}])[0]


def base() -> dict[str, Any]:
    """An A100 with 3g.40gb at 4 (kept) and 2g.20gb at 0 (destroyed: its ids are in the plan), each with one full
    CI, in nvml.Nvml.mig_state's shape."""
    return {"index": 0, "uuid": "GPU-a", "model": A100, "temperature_c": 41,
            "mig": {"supported": True, "current": True, "pending": True, "gpu_instances": [
                {"id": 2, "profile_id": 9, "profile_name": "3g.40gb", "start": 4, "size": 4, "slices": 3,
                 "compute_instances": [{"id": 0, "profile_id": 2, "name": "3g.40gb", "uuid": "MIG-a", "start": 0,
                                        "size": 3, "slices": 3}]},
                {"id": 3, "profile_id": 14, "profile_name": "2g.20gb", "start": 0, "size": 2, "slices": 2,
                 "compute_instances": [{"id": 0, "profile_id": 1, "name": "2g.20gb", "uuid": "MIG-b", "start": 0,
                                        "size": 2, "slices": 2}]}]}}


def _gi(state: dict[str, Any], n: int) -> dict[str, Any]:
    return state["mig"]["gpu_instances"][n]  # type: ignore[no-any-return]


def _set(path: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(state: dict[str, Any]) -> None:
        path(state)[key] = value
    return mutate


#: one change each to a value the planner reads (every one changes the plan of ``base``)
READ_CHANGES = {
    "index": _set(lambda s: s, "index", 1),
    "model": _set(lambda s: s, "model", "A30"),
    "mig.current": _set(lambda s: s["mig"], "current", False),
    "mig.pending": _set(lambda s: s["mig"], "pending", False),
    "mig.supported": _set(lambda s: s["mig"], "supported", False),
    "gi.start": _set(lambda s: _gi(s, 1), "start", 2),
    "gi.id": _set(lambda s: _gi(s, 1), "id", 7),
    "gi.profile_name": _set(lambda s: _gi(s, 1), "profile_name", "1g.10gb"),
    "ci.id": _set(lambda s: _gi(s, 1)["compute_instances"][0], "id", 1),
    "ci.slices": _set(lambda s: _gi(s, 0)["compute_instances"][0], "slices", 1),
    "ci.name": _set(lambda s: _gi(s, 1)["compute_instances"][0], "name", "1c.2g.20gb"),
    "ci.id as bool": _set(lambda s: _gi(s, 1)["compute_instances"][0], "id", False),
    "gi list at the top level": lambda s: s.update(gpu_instances=[_gi(s, 1)]),
    # keys beside nvml.Nvml.mig_state's shape, which take precedence over the shape's own
    "gi.profile beside profile_name": _set(lambda s: _gi(s, 1), "profile", "1g.10gb"),
    "ci.profile beside name": _set(lambda s: _gi(s, 1)["compute_instances"][0], "profile", "1c.2g.20gb"),
    "ci without a uuid key, renamed": lambda s: _gi(s, 1).update(compute_instances=[
        {k: v for k, v in _gi(s, 1)["compute_instances"][0].items() if k != "uuid"} | {"name": "1c.2g.20gb"}]),
}
#: changes to values the planner does not read (they must not change the plan, and share the cache entry)
IGNORED_CHANGES = {
    "uuid": _set(lambda s: s, "uuid", "GPU-b"),
    "temperature": _set(lambda s: s, "temperature_c", 80),
    "MIG device uuid": _set(lambda s: _gi(s, 0)["compute_instances"][0], "uuid", "MIG-z"),
}


def plan_cold(state: dict[str, Any]) -> list[dict[str, Any]] | str:
    mpl._PLANNED.clear()
    return plan_warm(state)


def plan_warm(state: dict[str, Any]) -> list[dict[str, Any]] | str:
    try:
        return mpl.plan_gpu(state, WANT).actions
    except ml.LayoutError as exc:
        return f"refused: {exc.problems}"


@pytest.mark.parametrize("change", sorted(READ_CHANGES))
def test_a_change_to_a_read_value_is_planned_afresh(change: str) -> None:
    changed = base()
    READ_CHANGES[change](changed)
    cold = repr(plan_cold(changed))  # repr: False and 0 are equal, but a plan that says False is not one saying 0
    assert cold != repr(plan_cold(base())), f"{change} should change the plan of the base state"
    plan_warm(base())  # the cache now holds the base state's plan
    assert repr(plan_warm(changed)) == cold


@pytest.mark.parametrize("change", sorted(IGNORED_CHANGES))
def test_a_value_the_planner_ignores_shares_the_cached_plan(change: str) -> None:
    changed = base()
    IGNORED_CHANGES[change](changed)
    assert plan_cold(changed) == plan_cold(base())
    size = len(mpl._PLANNED)
    plan_warm(changed)
    assert len(mpl._PLANNED) == size, "a state that differs only in what the planner ignores is planned again"


def test_a_plan_handed_out_is_the_callers_to_change() -> None:
    mpl._PLANNED.clear()
    first = mpl.plan_gpu(base(), WANT)
    first.actions[0]["gpu"] = 99
    first.actions.clear()
    assert mpl.plan_gpu(base(), WANT).actions == plan_cold(base())


def test_a_validated_config_handed_out_is_the_callers_to_change() -> None:
    gpus = [{"index": 0, "model": A100}]
    entries = [{"devices": "all", "gpu_instances": {"7g.80gb": 1}}]
    first = ml.validate(entries, gpus)[0]
    fingerprint = first.fingerprint
    first.gpu_instances.clear()
    first.mig_enabled = False
    assert first.fingerprint != fingerprint, "a changed config keeps the fingerprint of what it was"
    again = ml.validate(entries, gpus)[0]
    assert [gi.profile for gi in again.gpu_instances] == ["7g.80gb"]
    assert again.mig_enabled
    assert again.fingerprint == fingerprint


def test_a_str_subclass_in_the_layout_is_validated_like_a_str() -> None:
    """Ansible hands layouts over as AnsibleUnsafeText, which marshal refuses: the key falls back to repr."""

    class Unsafe(str):
        pass

    plain = ml.validate([{"devices": "all", "gpu_instances": {"3g.40gb": 2}}], [{"index": 0, "model": A100}])
    wrapped = ml.validate([{Unsafe("devices"): Unsafe("all"), "gpu_instances": {Unsafe("3g.40gb"): 2}}],
                          [{"index": 0, "model": A100}])
    assert [c.to_dict() for c in wrapped] == [c.to_dict() for c in plain]


_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 9) | st.sampled_from(["3g.40gb", "1g.10gb", "x"]),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["id", "profile_id", "profile", "profile_name", "start", "size", "name",
                                          "slices", "compute_instances"]),
                         inner, max_size=4), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(gis=st.lists(_json, max_size=3), current=st.sampled_from([0, 1, True, None, "1"]))
def test_warm_and_cold_plans_agree_on_any_state(gis: list[Any], current: Any) -> None:
    state = copy.deepcopy(base())
    state["mig"]["current"] = current
    state["mig"]["gpu_instances"] = gis
    try:
        cold = plan_cold(state)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # malformed input: refused, never cached
        with pytest.raises(type(exc)):
            plan_warm(state)
        return
    assert repr(plan_warm(copy.deepcopy(state))) == repr(cold)


def _state_with(gis: list[Any], current: Any) -> dict[str, Any]:
    state = copy.deepcopy(base())
    state["mig"]["current"] = current
    state["mig"]["gpu_instances"] = gis
    return state


def _outcome(state: dict[str, Any]) -> str:
    try:
        return repr(plan_warm(state))
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        return f"{type(exc).__name__}"


def _dicts(value: Any) -> list[dict[str, Any]]:
    """Every dict inside ``value``, outermost first."""
    if isinstance(value, dict):
        return [value, *(d for v in value.values() for d in _dicts(v))]
    if isinstance(value, list):
        return [d for v in value for d in _dicts(v)]
    return []


_LEAF = st.none() | st.booleans() | st.integers(-3, 9) | st.sampled_from(["3g.40gb", "1g.10gb", "x"])
_READ_KEYS = ["id", "profile_id", "profile", "profile_name", "start", "size", "name", "slices"]


@settings(max_examples=300, deadline=None)
@given(first=st.lists(_json, min_size=1, max_size=3), current=st.sampled_from([0, 1, True, None]), data=st.data())
def test_a_state_planned_after_its_neighbour_gets_its_own_plan(first: list[Any], current: Any,
                                                              data: st.DataObject) -> None:
    """A state, then the same state with one value of one GI or CI set anew (or a key taken out), planned with the
    cache the first left: a key that gave the two one entry (a value read by subscript that the planner reads with
    .get, say) fails here."""
    second = copy.deepcopy(first)
    inner = _dicts(second)
    if inner:
        target = data.draw(st.sampled_from(inner))
        key = data.draw(st.sampled_from(_READ_KEYS))
        if data.draw(st.booleans()):
            target[key] = data.draw(_LEAF)
        else:
            target.pop(key, None)
    mpl._PLANNED.clear()
    alone = _outcome(_state_with(second, current))
    mpl._PLANNED.clear()
    _outcome(_state_with(first, current))
    assert _outcome(_state_with(second, current)) == alone


def test_gpus_that_differ_only_in_index_share_one_plan_each_with_its_own_index() -> None:
    mpl._PLANNED.clear()
    plans = [mpl.plan_gpu({**base(), "index": i, "uuid": f"GPU-{i}"}, WANT) for i in range(4)]
    assert len(mpl._PLANNED) == 1
    assert [{a["gpu"] for a in p.actions} for p in plans] == [{0}, {1}, {2}, {3}]
    assert [p.index for p in plans] == [0, 1, 2, 3]


def test_a_refusal_names_its_own_gpu_when_another_gpu_was_refused_first() -> None:
    mpl._PLANNED.clear()
    unknown = ml.GpuConfig(index=0, model="NoSuchGPU", mig_enabled=True)
    state = {"index": 0, "name": "NVIDIA NoSuchGPU", "mig": {"supported": True, "current": 1, "pending": 1}}
    problems = []
    for index in (0, 1, 1):
        with pytest.raises(ml.LayoutError) as err:
            mpl.plan_gpu({**state, "index": index}, unknown)
        problems.append(err.value.problems)
    message = "the desired layout names model 'NoSuchGPU', which has no MIG profile table"
    assert problems == [[f"GPU 0: {message}"], [f"GPU 1: {message}"], [f"GPU 1: {message}"]]


def test_a_mapping_that_answers_for_absent_keys_is_read_as_the_planner_reads_it() -> None:
    """The key reads gpu_facts' own dicts by subscript; a defaultdict would answer 0 for an absent size there,
    while the planner's .get sees no size and takes the profile's. Warmed by a GI whose size really is 0, the
    defaultdict's GI must still get its own plan."""
    sized_zero = base()
    _gi(sized_zero, 1)["size"] = 0
    unsized = base()
    _gi(unsized, 1).pop("size")
    unsized["mig"]["gpu_instances"][1] = collections.defaultdict(int, _gi(unsized, 1))
    cold = repr(plan_cold(unsized))
    assert cold != repr(plan_cold(sized_zero)), "a GI of size 0 and one without a size should plan differently"
    plan_warm(sized_zero)
    assert repr(plan_warm(unsized)) == cold
