"""Pure logic of the nvidia_mig module (plugins/module_utils/mig_apply.py): busy detection, check-mode
prediction, verification, diff text and layout resolution, as tables of cases."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import mig_apply as ma  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_planner import GpuPlan  # noqa: E402


def gpu(index: int = 0, current: int = 1, pending: int | None = None, gis: list[dict[str, Any]] | None = None,
        procs: list[dict[str, Any]] | None = None, supported: bool = True) -> dict[str, Any]:
    """A GPU in planner form."""
    return {
        "index": index, "uuid": f"GPU-{index}", "model": "A100-SXM4-80GB", "name": "NVIDIA A100-SXM4-80GB",
        "pci_bus_id": f"00000000:{7 + index:02X}:00.0",
        "mig": {"supported": supported, "current": current, "pending": current if pending is None else pending},
        "gpu_instances": gis or [], "processes": procs or [],
    }


def proc(pid: int, gi: int | None = None, ci: int | None = None, name: str | None = "python3") -> dict[str, Any]:
    return {"pid": pid, "name": name, "used_memory_mib": 512, "gi_id": gi, "ci_id": ci}


def gi(gi_id: int, profile: str, start: int, cis: list[str] | None = None) -> dict[str, Any]:
    size = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4, "7g.80gb": 8}[profile]
    return {"id": gi_id, "profile": profile, "start": start, "size": size,
            "compute_instances": [{"id": i, "profile": name, "uuid": f"MIG-{gi_id}-{i}"}
                                  for i, name in enumerate(cis if cis is not None else [profile])]}


SET_ON = {"action": "set_mig_mode", "gpu": 0, "mode": 1, "reset_required": True}
SET_OFF = {"action": "set_mig_mode", "gpu": 0, "mode": 0, "reset_required": True}
DESTROY_GI1 = {"action": "destroy_gi", "gpu": 0, "gi_id": 1, "profile": "3g.40gb", "start": 0, "size": 4}
DESTROY_CI1 = {"action": "destroy_ci", "gpu": 0, "gi_id": 1, "ci_id": 0, "profile": "3g.40gb"}
CREATE_GI = {"action": "create_gi", "gpu": 0, "profile": "3g.40gb", "profile_id": 9, "start": 4, "size": 4}


def plan_of(*actions: dict[str, Any], index: int = 0) -> GpuPlan:
    return GpuPlan(index, f"GPU-{index}", "A100-SXM4-80GB", [dict(a, gpu=index) for a in actions])


# --------------------------------------------------------------------------------------------------- busy
BUSY_CASES = [
    # (id, plan actions, processes, expected pids or None, expected reason fragment)
    ("idle GPU", [DESTROY_CI1, DESTROY_GI1], [], None, ""),
    ("no actions", [], [proc(10, 1, 0)], None, ""),
    ("process in destroyed GI", [DESTROY_CI1, DESTROY_GI1], [proc(10, 1, 0)], [10], "MIG instances"),
    ("process in a kept GI", [DESTROY_CI1, DESTROY_GI1, CREATE_GI], [proc(11, 2, 0)], None, ""),
    ("process in destroyed CI only", [DESTROY_CI1], [proc(12, 1, 0)], [12], "MIG instances"),
    ("process in another CI of the GI", [DESTROY_CI1], [proc(13, 1, 1)], None, ""),
    ("unattributed process blocks destruction", [DESTROY_GI1], [proc(14)], [14], "MIG instances"),
    ("unattributed process, only creates", [CREATE_GI], [proc(15)], None, ""),
    ("mode change needs the whole GPU", [SET_ON, CREATE_GI], [proc(16), proc(17)], [16, 17], "mode change"),
    ("mode off with a process in a kept GI", [DESTROY_CI1, DESTROY_GI1, SET_OFF], [proc(18, 5, 0)], [18],
     "mode change"),
]


@pytest.mark.parametrize(("actions", "procs", "pids", "reason"), [c[1:] for c in BUSY_CASES],
                         ids=[c[0] for c in BUSY_CASES])
def test_find_busy(actions: list[dict[str, Any]], procs: list[dict[str, Any]], pids: list[int] | None,
                   reason: str) -> None:
    busy = ma.find_busy([plan_of(*actions)], [gpu(procs=procs)])
    if pids is None:
        assert busy == []
    else:
        assert [b["pids"] for b in busy] == [pids]
        assert reason in busy[0]["reason"]
        assert busy[0]["gpu"] == 0


def test_find_busy_names_only_busy_gpus() -> None:
    plans = [plan_of(DESTROY_GI1, index=0), plan_of(DESTROY_GI1, index=1), plan_of(DESTROY_GI1, index=2)]
    gpus = [gpu(0), gpu(1, procs=[proc(20, 1, 0)]), gpu(2, procs=[proc(21, 9, 0)])]
    assert [(b["gpu"], b["pids"]) for b in ma.find_busy(plans, gpus)] == [(1, [20])]


def test_busy_message_exact() -> None:
    busy = ma.find_busy([plan_of(SET_ON), plan_of(DESTROY_GI1, index=3)],
                        [gpu(0, procs=[proc(4242)]), gpu(3, procs=[proc(77, 1, 0, name=None)])])
    assert ma.busy_message(busy) == (
        "refusing to change MIG while processes use the GPUs, nothing was changed: "
        "GPU 0 (a MIG mode change needs the whole GPU idle): PIDs 4242 (python3); "
        "GPU 3 (they run on MIG instances that the layout removes): PIDs 77; "
        "drain the workloads (or set force_destroy_busy: true) and retry")


# --------------------------------------------------------------------------------------------------- predict
PREDICT_CASES = [
    # (id, actions, current, pending, allow_reset, changed, waiting)
    ("nothing to do", [], 1, 1, True, [], []),
    ("instances only", [DESTROY_CI1, DESTROY_GI1, CREATE_GI], 1, 1, True, [0], []),
    ("enable with reset", [SET_ON, CREATE_GI], 0, 0, True, [0], []),
    ("enable, reset refused", [SET_ON, CREATE_GI], 0, 0, False, [0], [0]),
    ("already pending, reset refused: no change", [SET_ON, CREATE_GI], 0, 1, False, [], [0]),
    ("already pending, reset allowed", [SET_ON, CREATE_GI], 0, 1, True, [0], []),
    ("hopper enable (no reset)", [dict(SET_ON, reset_required=False), CREATE_GI], 0, 0, False, [0], []),
    ("disable, reset refused, instances destroyed", [DESTROY_CI1, DESTROY_GI1, SET_OFF], 1, 1, False, [0], [0]),
    ("disable already pending, nothing left", [SET_OFF], 1, 0, False, [], [0]),
]


@pytest.mark.parametrize(("actions", "current", "pending", "allow_reset", "changed", "waiting"),
                         [c[1:] for c in PREDICT_CASES], ids=[c[0] for c in PREDICT_CASES])
def test_predict(actions: list[dict[str, Any]], current: int, pending: int, allow_reset: bool, changed: list[int],
                 waiting: list[int]) -> None:
    assert ma.predict([plan_of(*actions)], [gpu(current=current, pending=pending)], allow_reset) == (changed, waiting)


# --------------------------------------------------------------------------------------------------- verify
VERIFY_CASES = [
    # (id, actions left after applying, GPU awaits reset, current, pending, problem expected)
    ("converged", [], False, 1, 1, False),
    ("leftover create", [CREATE_GI], False, 1, 1, True),
    ("awaiting reset, pending right", [SET_ON, CREATE_GI], True, 0, 1, False),
    ("awaiting reset, pending wrong", [SET_ON, CREATE_GI], True, 0, 0, True),
    ("awaiting disable, instances left", [DESTROY_CI1, DESTROY_GI1, SET_OFF], True, 1, 0, True),
    ("awaiting disable, clean", [SET_OFF], True, 1, 0, False),
]


@pytest.mark.parametrize(("actions", "awaiting", "current", "pending", "problem"), [c[1:] for c in VERIFY_CASES],
                         ids=[c[0] for c in VERIFY_CASES])
def test_verify(actions: list[dict[str, Any]], awaiting: bool, current: int, pending: int, problem: bool) -> None:
    problems = ma.verify([plan_of(*actions)], [0] if awaiting else [], [gpu(current=current, pending=pending)])
    assert bool(problems) is problem
    if problem:
        assert problems[0].startswith("GPU 0 (A100-SXM4-80GB):")


# --------------------------------------------------------------------------------------------------- diff text
DESCRIBE_CASES = [
    ("not supported", gpu(current=0, supported=False), "MIG not supported"),
    ("off", gpu(current=0), "MIG off"),
    ("pending on", gpu(current=0, pending=1), "MIG off (pending on after a GPU reset)"),
    ("on, empty", gpu(current=1), "MIG on"),
    ("on, two GIs", gpu(gis=[gi(2, "3g.40gb", 4, ["1c.3g.40gb", "2c.3g.40gb"]), gi(13, "1g.10gb", 6)]),
     "MIG on: 3g.40gb@4 [1c.3g.40gb, 2c.3g.40gb], 1g.10gb@6 [1g.10gb]"),
]


@pytest.mark.parametrize(("state", "text"), [c[1:] for c in DESCRIBE_CASES], ids=[c[0] for c in DESCRIBE_CASES])
def test_describe_gpu(state: dict[str, Any], text: str) -> None:
    assert ma.describe_gpu(state) == text


def test_diff_of_lists_every_gpu() -> None:
    before = [gpu(0, current=0), gpu(1, current=0)]
    after = [gpu(0, gis=[gi(1, "7g.80gb", 0)]), gpu(1, current=0)]
    assert ma.diff_of(before, after) == {
        "before": "GPU 0 (A100-SXM4-80GB): MIG off\nGPU 1 (A100-SXM4-80GB): MIG off\n",
        "after": "GPU 0 (A100-SXM4-80GB): MIG on: 7g.80gb@0 [7g.80gb]\nGPU 1 (A100-SXM4-80GB): MIG off\n",
    }


def test_achieved_carries_mig_device_uuids() -> None:
    layout = ma.achieved([gpu(gis=[gi(1, "3g.40gb", 0, ["1c.3g.40gb", "1c.3g.40gb"])])])
    assert layout[0]["gpu_instances"][0]["compute_instances"] == [
        {"name": "1c.3g.40gb", "ci_id": 0, "uuid": "MIG-1-0"},
        {"name": "1c.3g.40gb", "ci_id": 1, "uuid": "MIG-1-1"},
    ]
    assert layout[0]["gpu_instances"][0]["profile_name"] == "3g.40gb"
    assert (layout[0]["enabled"], layout[0]["pending"]) == (True, True)


# --------------------------------------------------------------------------------------------------- inputs
MIG_PARTED = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
}}

RESOLVE_ERRORS = [
    ("neither", None, None, None, "give exactly one of layout or mig_parted_config"),
    ("both", [{"devices": "all", "mig_enabled": False}], MIG_PARTED, None,
     "give exactly one of layout or mig_parted_config"),
    ("unknown label", None, MIG_PARTED, "all-7g",
     "selected mig-config 'all-7g' not found; available: all-disabled, all-3g"),
    ("label needed", None, MIG_PARTED, None,
     "the mig-parted config has 2 labels (all-disabled, all-3g); choose one with selected"),
]


@pytest.mark.parametrize(("layout", "config", "selected", "message"), [c[1:] for c in RESOLVE_ERRORS],
                         ids=[c[0] for c in RESOLVE_ERRORS])
def test_resolve_layout_errors(layout: Any, config: Any, selected: str | None, message: str) -> None:
    with pytest.raises(ma.InvalidLayout) as err:
        ma.resolve_layout(layout, config, selected)
    assert str(err.value) == message


def test_resolve_layout_from_mig_parted() -> None:
    entries = ma.resolve_layout(None, MIG_PARTED, "all-3g")
    assert entries[0]["mig_enabled"] is True
    assert entries[0]["gpu_instances"] == {"3g.40gb": 2}


def test_desired_for_filters_indexes_and_reports_invalid() -> None:
    gpus = [gpu(0), gpu(1)]
    layout = [{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.40gb": 2}}]
    assert [c.index for c in ma.desired_for(layout, gpus, [1])] == [1]
    with pytest.raises(ma.InvalidLayout) as err:
        ma.desired_for([{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.40gb": 3}}], gpus, None)
    assert "3 x 3g.40gb requested, but A100-SXM4-80GB offers at most 2 x 3g.40gb" in str(err.value)


# --------------------------------------------------------------------------------------------------- check-mode diff
SIMULATE_CASES = [
    # (id, GPU before, actions, reset allowed, expected description after)
    ("enable and build", gpu(current=0), [SET_ON, CREATE_GI, {"action": "create_ci", "profile": "3g.40gb",
                                                               "gi_id": None, "gi_profile": "3g.40gb", "gi_start": 4}],
     True, "MIG on: 3g.40gb@4 [3g.40gb]"),
    ("enable without reset waits", gpu(current=0), [SET_ON, CREATE_GI], False,
     "MIG off (pending on after a GPU reset)"),
    ("swap an instance", gpu(gis=[gi(1, "3g.40gb", 0)]), [DESTROY_CI1, DESTROY_GI1, CREATE_GI], True,
     "MIG on: 3g.40gb@4 []"),
    ("disable", gpu(gis=[gi(1, "3g.40gb", 0)]), [DESTROY_CI1, DESTROY_GI1, SET_OFF], True, "MIG off"),
]


@pytest.mark.parametrize(("before", "actions", "reset", "text"), [c[1:] for c in SIMULATE_CASES],
                         ids=[c[0] for c in SIMULATE_CASES])
def test_simulate_predicts_the_check_mode_diff(before: dict[str, Any], actions: list[dict[str, Any]], reset: bool,
                                               text: str) -> None:
    after = ma.simulate(before, [dict(a, gpu=0) for a in actions], reset)
    assert ma.describe_gpu(after) == text
    assert before["gpu_instances"] == [] or before["gpu_instances"][0]["id"] == 1  # the input is not changed
