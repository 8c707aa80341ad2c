"""The MIG planner (plugins/module_utils/mig_planner.py): minimal, ordered actions from NVML state to a layout."""

from __future__ import annotations

import copy
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_layout as ml  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_planner as mpl  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import get_model  # noqa: E402

A100 = "A100-SXM4-80GB"
H100 = "H100-SXM5-80GB"
BALANCED = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def desired(counts: dict[str, int], model: str = A100, count: int = 1, **extra: Any) -> list[ml.GpuConfig]:
    entries = [{"devices": "all", "mig_enabled": True, "gpu_instances": counts, **extra}]
    return ml.validate(entries, [{"index": i, "model": model} for i in range(count)])


def gi(gid: int, profile_id: int, start: int, ci_profile_ids: tuple[int, ...] | None = None) -> dict[str, Any]:
    """An NVML GPU instance; by default one CI filling it (CI profile id = CI enum)."""
    full = {19: 0, 15: 0, 20: 0, 14: 1, 9: 2, 5: 3, 0: 4}[profile_id]
    cis = [{"id": i, "profile_id": p} for i, p in enumerate(ci_profile_ids if ci_profile_ids is not None
                                                             else (full,))]
    size = {19: 1, 20: 1, 15: 2, 14: 2, 9: 4, 5: 4, 0: 8}[profile_id]
    return {"id": gid, "profile_id": profile_id, "start": start, "size": size, "compute_instances": cis}


def current(index: int, gis: list[dict[str, Any]], mode: int = 1, pending: int | None = None,
            model: str = A100) -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-{index}", "model": model,
            "mig": {"supported": True, "current": mode, "pending": mode if pending is None else pending},
            "gpu_instances": gis}


def apply(state: dict[str, Any], actions: list[dict[str, Any]]) -> dict[str, Any]:
    """A strict little driver: applies actions the way NVML would, refusing anything NVML would refuse."""
    state = copy.deepcopy(state)
    model = get_model(state["model"])
    gis = state["gpu_instances"]
    next_id = 100
    for action in actions:
        kind = action["action"]
        if kind == "set_mig_mode":
            state["mig"]["current"] = state["mig"]["pending"] = action["mode"]
        elif kind == "destroy_ci":
            target = next(g for g in gis if g["id"] == action["gi_id"])
            target["compute_instances"] = [c for c in target["compute_instances"] if c["id"] != action["ci_id"]]
        elif kind == "destroy_gi":
            target = next(g for g in gis if g["id"] == action["gi_id"])
            assert not target["compute_instances"], "NVML refuses to destroy a GI that has CIs (IN_USE)"
            gis.remove(target)
        elif kind == "create_gi":
            assert state["mig"]["current"] == 1, "NVML refuses GI creation with MIG off"
            profile = model.profile_by_id(action["profile_id"])
            assert profile is not None
            assert action["start"] in profile.starts
            bits = ((1 << profile.memory_slices) - 1) << action["start"]
            for other in gis:
                assert not bits & (((1 << other["size"]) - 1) << other["start"]), "INSUFFICIENT_RESOURCES"
            gis.append({"id": next_id, "profile_id": action["profile_id"], "start": action["start"],
                        "size": profile.memory_slices, "compute_instances": []})
            next_id += 1
        elif kind == "create_ci":
            target = next(g for g in gis if g["start"] == action["gi_start"])
            if action["gi_id"] is not None:
                assert target["id"] == action["gi_id"]
            target["compute_instances"].append({"id": len(target["compute_instances"]),
                                                "profile_id": action["profile_id"]})
        else:
            raise AssertionError(kind)
    return state


def shape(state: dict[str, Any]) -> Counter[tuple[int, tuple[int, ...]]]:
    return Counter((g["profile_id"], tuple(sorted(c["profile_id"] for c in g["compute_instances"])))
                   for g in state["gpu_instances"])


def desired_shape(config: ml.GpuConfig) -> Counter[tuple[int, tuple[int, ...]]]:
    return Counter((g.profile_id, tuple(sorted(c.profile_id for c in g.compute_instances)))
                   for g in config.gpu_instances)


@pytest.mark.parametrize("gis", [
    [gi(2, 9, 4), gi(3, 14, 0), gi(9, 19, 2), gi(10, 19, 3)],          # what the search would choose
    [gi(2, 9, 4), gi(4, 14, 2), gi(7, 19, 0), gi(8, 19, 1)],           # MIG guide `-cgi 9,19,14,19` placement
])
def test_matching_gpu_gets_no_action(gis: list[dict[str, Any]]) -> None:
    plans = mpl.plan([current(0, gis)], desired(BALANCED))
    assert plans[0].actions == []
    assert not plans[0].changed


def test_enable_from_scratch_uses_placements_in_order() -> None:
    want = desired(BALANCED)
    plans = mpl.plan([current(0, [], mode=0)], want)
    assert plans[0].actions[0] == {"action": "set_mig_mode", "gpu": 0, "mode": 1, "reset_required": True}
    creates = [(a["profile_id"], a["start"]) for a in plans[0].actions if a["action"] == "create_gi"]
    # Fixed data, NVIDIA MIG User Guide, A100-SXM4-80GB placements (profile id: starts, size in memory slices):
    # 3g.40gb (9): 0,4 x4; 2g.20gb (14): 0,2,4 x2; 1g.10gb (19): 0-6 x1. Largest first, lowest free start that
    # still leaves room: 3g at 4 (3g at 0 would leave 2g only 4, then 1g only 6: 1g x2 needs 6 and 7; 7 is no
    # 1g start), 2g at 0, 1g at 2 and 3.
    assert creates == [(9, 4), (14, 0), (19, 2), (19, 3)]
    table = {9: ((0, 4), 4), 14: ((0, 2, 4), 2), 19: (tuple(range(7)), 1)}
    used: set[int] = set()
    for profile_id, start in creates:
        starts, size = table[profile_id]
        assert start in starts
        assert not used & set(range(start, start + size))
        used |= set(range(start, start + size))
    assert plans[0].reset_required


def test_hopper_enable_needs_no_reset() -> None:
    plans = mpl.plan([current(0, [], mode=0, model=H100)], desired({"7g.80gb": 1}, model=H100))
    assert plans[0].actions == [
        {"action": "set_mig_mode", "gpu": 0, "mode": 1, "reset_required": False},
        {"action": "create_gi", "gpu": 0, "profile": "7g.80gb", "profile_id": 0, "start": 0, "size": 8},
        {"action": "create_ci", "profile": "7g.80gb", "profile_id": 4, "slices": 7, "start": 0, "gpu": 0,
         "gi_id": None, "gi_profile": "7g.80gb", "gi_start": 0},
    ]


def test_only_differing_gpus_change() -> None:
    matching = [gi(2, 9, 4), gi(3, 14, 0), gi(9, 19, 2), gi(10, 19, 3)]
    host = [current(i, copy.deepcopy(matching)) for i in range(8)]
    host[5] = current(5, [gi(0, 0, 0)])                                # 7g.80gb instead
    plans = mpl.plan(host, desired(BALANCED, count=8))
    assert [p.index for p in plans if p.changed] == [5]
    assert [a["action"] for a in plans[5].actions][:2] == ["destroy_ci", "destroy_gi"]


def test_keeps_compatible_instances() -> None:
    # 3g@4 stays; two of the four 1g stay; the other two make room for the 2g.
    state = current(0, [gi(7, 19, 0), gi(8, 19, 1), gi(9, 19, 2), gi(10, 19, 3), gi(2, 9, 4)])
    want = desired(BALANCED)
    actions = mpl.plan([state], want)[0].actions
    assert [(a["action"], a.get("gi_id"), a.get("start")) for a in actions if "gi" in a["action"]] == [
        ("destroy_gi", 9, 2), ("destroy_gi", 10, 3), ("create_gi", None, 2)]
    assert shape(apply(state, actions)) == desired_shape(want[0])


def test_rebuilds_when_nothing_can_stay() -> None:
    # 3g@0 + 2g@4 + 1g@6 cannot grow a second 1g (no 1g placement at 7): everything is rebuilt.
    state = current(0, [gi(1, 9, 0), gi(5, 14, 4), gi(13, 19, 6)])
    want = desired(BALANCED)
    actions = mpl.plan([state], want)[0].actions
    assert sum(a["action"] == "destroy_gi" for a in actions) == 3
    assert sum(a["action"] == "create_gi" for a in actions) == 4
    assert shape(apply(state, actions)) == desired_shape(want[0])


def test_only_compute_instances_change() -> None:
    state = current(0, [gi(1, 9, 0), gi(2, 9, 4)])
    want = desired({"3g.40gb": 2}, compute_instances={"3g.40gb": [["3g.40gb"], ["1c.3g.40gb", "2c.3g.40gb"]]})
    actions = mpl.plan([state], want)[0].actions
    assert [(a["action"], a.get("gi_id"), a.get("profile")) for a in actions] == [
        ("destroy_ci", 2, "3g.40gb"), ("create_ci", 2, "2c.3g.40gb"), ("create_ci", 2, "1c.3g.40gb")]
    assert shape(apply(state, actions)) == desired_shape(want[0])


def test_explicit_placement_moves_a_misplaced_instance() -> None:
    state = current(0, [gi(1, 9, 0)])
    want = desired({"3g.40gb": 1}, placements=[{"profile": "3g.40gb", "start": 4}])
    actions = mpl.plan([state], want)[0].actions
    assert [(a["action"], a.get("start")) for a in actions if "gi" in a["action"]] == [
        ("destroy_gi", 0), ("create_gi", 4)]


@pytest.mark.parametrize(("mode", "pending", "gis", "expected"), [
    (1, 1, [gi(1, 9, 0)], [("destroy_ci", None), ("destroy_gi", None), ("set_mig_mode", True)]),
    (0, 1, [], [("set_mig_mode", False)]),       # cancel a pending enable: no reset needed
    (1, 0, [], [("set_mig_mode", True)]),        # a pending disable still needs its reset
    (0, 0, [], []),
])
def test_disable(mode: int, pending: int, gis: list[dict[str, Any]], expected: list[tuple[str, Any]]) -> None:
    want = ml.validate([{"devices": "all", "mig_enabled": False}], [{"index": 0, "model": A100}])
    actions = mpl.plan([current(0, gis, mode=mode, pending=pending)], want)[0].actions
    assert [(a["action"], a.get("reset_required")) for a in actions] == expected
    assert all(a["mode"] == 0 for a in actions if a["action"] == "set_mig_mode")


def test_cancel_pending_disable_keeps_instances() -> None:
    state = current(0, [gi(2, 9, 4), gi(3, 14, 0), gi(9, 19, 2), gi(10, 19, 3)], mode=1, pending=0)
    actions = mpl.plan([state], desired(BALANCED))[0].actions
    assert actions == [{"action": "set_mig_mode", "gpu": 0, "mode": 1, "reset_required": False}]


def test_nvml_mig_state_shape_is_accepted() -> None:
    """The shape of nvml.Nvml.mig_state: booleans, names, gpu_instances inside ``mig``."""
    state = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA A100-SXM4-80GB", "mig": {
        "supported": True, "current": True, "pending": True, "gpu_instances": [
            {"id": 1, "profile_id": 0, "profile_name": "7g.80gb", "start": 0, "size": 8, "slices": 7,
             "compute_instances": [{"id": 0, "profile_id": 4, "name": "7g.80gb", "start": 0, "size": 7}]}]}}
    assert mpl.plan([state], desired({"7g.80gb": 1}))[0].actions == []


def test_unmanaged_and_not_capable_gpus() -> None:
    host = [current(0, []), {"index": 1, "name": "NVIDIA L40S", "mig": {"supported": False}}]
    want = ml.validate([{"devices": [1], "mig_enabled": False}],
                       [{"index": 0, "model": A100}, {"index": 1, "name": "NVIDIA L40S", "mig_capable": False}],
                       unmatched="ignore")
    plans = mpl.plan(host, want)
    assert [(p.index, p.changed, p.note) for p in plans] == [
        (0, False, "not managed by the layout"), (1, False, "not MIG-capable")]


def test_desired_gpu_missing_from_nvml() -> None:
    with pytest.raises(ml.LayoutError) as err:
        mpl.plan([current(0, [])], desired(BALANCED, count=2))
    assert err.value.problems == ["GPU 1: in the desired layout but NVML reports no such GPU (GPUs: 0)"]


def test_plan_is_json_serialisable_and_accepts_dicts() -> None:
    want = [c.to_dict() for c in desired(BALANCED)]
    want = json.loads(json.dumps(want))
    plans = ml.plan([current(0, [gi(1, 0, 0)])], want)
    text = json.dumps([p.to_dict() for p in plans])
    assert json.loads(text)[0]["changed"] is True


def test_summarize() -> None:
    host = [current(0, [gi(1, 0, 0)]), current(1, [gi(1, 0, 0)])]
    want = ml.validate([{"devices": [0], "gpu_instances": {"3g.40gb": 2}},
                        {"devices": [1], "gpu_instances": {"7g.80gb": 1}}],
                       [{"index": 0, "model": A100}, {"index": 1, "model": A100}])
    assert ml.summarize(ml.plan(host, want)) == "\n".join([
        "GPU 0 (A100-SXM4-80GB): 6 action(s)",
        "  - destroy compute instance 0 (7g.80gb) on GPU instance 1",
        "  - destroy GPU instance 1 (7g.80gb at 0)",
        "  - create GPU instance 3g.40gb at memory slice 0",
        "  - create compute instance 3g.40gb on the new 3g.40gb at 0",
        "  - create GPU instance 3g.40gb at memory slice 4",
        "  - create compute instance 3g.40gb on the new 3g.40gb at 4",
        "GPU 1 (A100-SXM4-80GB): no change",
    ])


@pytest.mark.parametrize("index", [float("inf"), float("nan"), "x", None])
def test_a_gpu_index_that_is_no_integer_is_refused_by_name(index: object) -> None:
    """Found by the filter fuzz: an infinite index raised OverflowError, which no caller expects."""
    with pytest.raises(ml.LayoutError, match=r"GPU index .* is not a GPU index \(an integer >= 0\)"):
        mpl.plan([{"index": index, "model": "A30", "mig": {"supported": True, "current": False, "pending": False}}], [])
