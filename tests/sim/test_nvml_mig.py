"""Simulated NVML: MIG mode and GPU instances (profiles, placements, creation, ids, capacity, destruction)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet_sim.models import load_model

# nvmlGpuInstanceProfileInfo_v3_t from nvml.h (not in the pinned pynvml): same size as v2, other layout
V3_STRUCT = """
class GIv3(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("id", ctypes.c_uint), ("sliceCount", ctypes.c_uint),
                ("instanceCount", ctypes.c_uint), ("multiprocessorCount", ctypes.c_uint),
                ("copyEngineCount", ctypes.c_uint), ("decoderCount", ctypes.c_uint), ("encoderCount", ctypes.c_uint),
                ("jpegCount", ctypes.c_uint), ("ofaCount", ctypes.c_uint), ("memorySizeMB", ctypes.c_ulonglong),
                ("name", ctypes.c_char * 96), ("capabilities", ctypes.c_uint)]
"""


def test_enable_is_pending_until_reset_on_ampere(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("2xA100-40GB")
    r = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        R["before"] = N.nvmlDeviceGetMigMode(h)
        R["activation"] = N.nvmlDeviceSetMigMode(h, 1)
        R["pending"] = N.nvmlDeviceGetMigMode(h)
        R["create_while_pending"] = err(N.nvmlDeviceCreateGpuInstance, h, 9)
        doc = state(); mig = doc["gpus"][0]["mig"]; mig["current"] = mig["pending"]; save(doc)   # GPU reset
        R["after_reset"] = N.nvmlDeviceGetMigMode(h)
        gi = N.nvmlDeviceCreateGpuInstance(h, 9)
        R["created"] = N.nvmlGpuInstanceGetInfo(gi).profileId
        R["disable_with_gi"] = err(N.nvmlDeviceSetMigMode, h, 0)
        N.nvmlGpuInstanceDestroy(gi)
        R["disable"] = [N.nvmlDeviceSetMigMode(h, 0), N.nvmlDeviceGetMigMode(h)]
        R["cancel"] = [N.nvmlDeviceSetMigMode(h, 1), N.nvmlDeviceGetMigMode(h)]
        R["bad_mode"] = code(N.nvmlDeviceSetMigMode, h, 2)
    """)
    assert r == {
        "before": [0, 0], "activation": 19, "pending": [0, 1], "create_while_pending": [3, "Not Supported"],
        "after_reset": [1, 1], "created": 9, "disable_with_gi": [19, "In use by another client"],
        "disable": [19, [1, 0]], "cancel": [0, [1, 1]], "bad_mode": 2,
    }


def test_hopper_applies_at_once_unless_a_live_client_holds_the_gpu(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("8xH100-NVSwitch")
    finished = subprocess.Popen(["true"])  # a client whose pid has exited
    finished.wait()
    with sim.edit() as doc:
        doc["clients"] = [{"pid": finished.pid, "name": "nvidia-persistenced"}]
    r = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        R["dead_client"] = [N.nvmlDeviceSetMigMode(h, 1), N.nvmlDeviceGetMigMode(h)]
        doc = state(); doc["clients"] = [{"pid": os.getpid(), "name": "nv-hostengine"}]; save(doc)
        h1 = N.nvmlDeviceGetHandleByIndex(1)
        R["live_client"] = [N.nvmlDeviceSetMigMode(h1, 1), N.nvmlDeviceGetMigMode(h1)]
        doc = state(); doc["clients"] = []; doc["gpus"][2]["processes"] = [{"pid": 7, "name": "x",
            "used_memory_mib": 1, "gi_id": None, "ci_id": None}]; save(doc)
        h2 = N.nvmlDeviceGetHandleByIndex(2)
        R["busy_gpu"] = [N.nvmlDeviceSetMigMode(h2, 1), N.nvmlDeviceGetMigMode(h2)]
    """)
    assert r == {"dead_client": [0, [1, 1]], "live_client": [19, [0, 1]], "busy_gpu": [19, [0, 1]]}


def test_profile_info_index_versus_id(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim("8xA100").run(setup=V3_STRUCT, script="""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        v1 = N.nvmlDeviceGetGpuInstanceProfileInfo(h, N.NVML_GPU_INSTANCE_PROFILE_7_SLICE, version=1)
        R["v1_7g"] = [v1.id, v1.sliceCount, v1.instanceCount, v1.multiprocessorCount, v1.memorySizeMB]
        v2 = N.nvmlDeviceGetGpuInstanceProfileInfo(h, N.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
        R["v2_1g"] = [v2.id, v2.name, v2.copyEngineCount, v2.memorySizeMB]
        v2 = N.nvmlDeviceGetGpuInstanceProfileInfo(h, N.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)
        R["v2_1g_rev2"] = [v2.id, v2.name, v2.instanceCount]
        v3 = GIv3(); v3.version = (3 << 24) | ctypes.sizeof(GIv3)
        R["v3_size"] = ctypes.sizeof(GIv3)
        R["v3"] = raw("nvmlDeviceGetGpuInstanceProfileInfoV")(h, 2, ctypes.byref(v3))
        R["v3_3g"] = [v3.id, v3.sliceCount, v3.memorySizeMB, v3.name.decode(), v3.capabilities]
        bogus = N.c_nvmlGpuInstanceProfileInfo_v2_t(); bogus.version = 0x09000098
        R["bogus_version"] = raw("nvmlDeviceGetGpuInstanceProfileInfoV")(h, 2, ctypes.byref(bogus))
        R["6_slice"] = err(N.nvmlDeviceGetGpuInstanceProfileInfo, h, N.NVML_GPU_INSTANCE_PROFILE_6_SLICE)
        R["past_count"] = err(N.nvmlDeviceGetGpuInstanceProfileInfo, h, N.NVML_GPU_INSTANCE_PROFILE_COUNT)
        byid = N.nvmlDeviceGetGpuInstanceProfileInfoById(h, 14)
        R["by_id_14"] = [byid.id, byid.name, byid.sliceCount]
        R["by_id_unknown"] = code(N.nvmlDeviceGetGpuInstanceProfileInfoById, h, 1)
    """)
    assert r == {
        "v1_7g": [0, 7, 1, 98, 80896], "v2_1g": [19, "MIG 1g.10gb", 1, 9728], "v2_1g_rev2": [15, "MIG 1g.20gb", 4],
        "v3_size": 152, "v3": 0, "v3_3g": [9, 3, 40192, "MIG 3g.40gb", 0], "bogus_version": 25,
        "6_slice": [3, "Not Supported"], "past_count": [2, "Invalid Argument"],
        "by_id_14": [14, "MIG 2g.20gb", 2], "by_id_unknown": 2,
    }


@pytest.mark.parametrize("model_preset", [("A100-SXM4-40GB", "2xA100-40GB"), ("A30-24GB", "4xA30"),
                                          ("H200-141GB", "1xH200")])
def test_possible_placements_follow_the_model(nvml_sim: Callable[..., Any], model_preset: tuple[str, str]) -> None:
    model, preset = model_preset
    r = nvml_sim(preset).run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        out = {}
        for pid in [p["id"] for p in state()["gpus"][0]["mig"]["gi_profiles"]]:
            count = ctypes.c_uint(0)
            assert raw("nvmlDeviceGetGpuInstancePossiblePlacements_v2")(h, pid, None, ctypes.byref(count)) == 0
            arr = (N.c_nvmlGpuInstancePlacement_t * count.value)()
            N.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, arr, ctypes.byref(count))
            out[str(pid)] = [[p.start, p.size] for p in arr[:count.value]]
        R["placements"] = out
        R["unknown"] = code(N.nvmlDeviceGetGpuInstancePossiblePlacements, h, 77, None, ctypes.byref(count))
    """)
    expected = {str(p["id"]): p["placements"] for p in load_model(model)["mig"]["gi_profiles"]}
    assert r["placements"] == expected
    assert r["unknown"] == 2


LAYOUT = """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
def place(pid, start, size):
    p = N.c_nvmlGpuInstancePlacement_t(); p.start = start; p.size = size
    gi = N.nvmlDeviceCreateGpuInstanceWithPlacement(h, pid, ctypes.byref(p))
    i = N.nvmlGpuInstanceGetInfo(gi)
    return [i.id, i.profileId, i.placement.start, i.placement.size]
def listing(pid):
    arr = (N.c_nvmlGpuInstance_t * 8)(); count = ctypes.c_uint(0)
    N.nvmlDeviceGetGpuInstances(h, pid, arr, ctypes.byref(count))
    return [N.nvmlGpuInstanceGetInfo(arr[i]).id for i in range(count.value)]
def remaining():
    return {pid: N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, pid) for pid in (19, 20, 15, 14, 9, 5, 0)}
"""


def test_full_layout_with_placements_then_destroy(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    sim = nvml_sim("8xA100")
    sim.write(mig_on(sim.read(), 0))
    r = sim.run(setup=LAYOUT, script="""
        R["empty_capacity"] = remaining()
        R["created"] = [place(5, 0, 4), place(14, 4, 2), place(19, 6, 1)]
        R["lists"] = [listing(5), listing(14), listing(19), listing(9)]
        R["full_capacity"] = remaining()
        R["by_id"] = N.nvmlGpuInstanceGetInfo(N.nvmlDeviceGetGpuInstanceById(h, 5)).profileId
        R["by_id_missing"] = err(N.nvmlDeviceGetGpuInstanceById, h, 2)
        gis = state()["gpus"][0]["mig"]["gpu_instances"]
        R["in_state"] = [[g["id"], g["profile_id"], g["start"], g["size"]] for g in gis]
        stale = N.nvmlDeviceGetGpuInstanceById(h, 13)
        for gid in (1, 5, 13):
            N.nvmlGpuInstanceDestroy(N.nvmlDeviceGetGpuInstanceById(h, gid))
        R["stale_handle"] = [err(N.nvmlGpuInstanceGetInfo, stale), code(N.nvmlGpuInstanceDestroy, stale)]
        R["after"] = state()["gpus"][0]["mig"]["gpu_instances"]
        R["capacity_after"] = remaining()
    """)
    assert r["empty_capacity"] == {"19": 7, "20": 1, "15": 4, "14": 3, "9": 2, "5": 1, "0": 1}
    assert r["created"] == [[1, 5, 0, 4], [5, 14, 4, 2], [13, 19, 6, 1]]
    assert r["lists"] == [[1], [5], [13], []]
    assert r["full_capacity"] == {"19": 0, "20": 0, "15": 0, "14": 0, "9": 0, "5": 0, "0": 0}
    assert r["by_id"] == 14
    assert r["by_id_missing"] == [6, "Not Found"]
    assert r["in_state"] == [[1, 5, 0, 4], [5, 14, 4, 2], [13, 19, 6, 1]]
    assert r["stale_handle"] == [[2, "Invalid Argument"], 2]
    assert r["after"] == []
    assert r["capacity_after"] == r["empty_capacity"]
    assert sim.read()["gpus"][1]["mig"]["gpu_instances"] == []


def test_seven_1g_fill_the_gpu_with_heap_ids(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    sim = nvml_sim("8xH100-NVSwitch")
    sim.write(mig_on(sim.read(), 0))
    r = sim.run(setup=LAYOUT, script="""
        R["ids"] = [place(19, s, 1)[0] for s in range(7)]
        R["eighth"] = err(N.nvmlDeviceCreateGpuInstance, h, 19)
        R["capacity"] = N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19)
    """)
    assert r == {"ids": [7, 8, 9, 10, 11, 12, 13], "eighth": [23, "Insufficient Resources"], "capacity": 0}


@pytest.mark.parametrize(("first", "second", "expected"), [
    ((9, 1, 4), None, [2, "Invalid Argument"]),          # 3g only at 0 and 4
    ((19, 7, 1), None, [2, "Invalid Argument"]),         # 1g only at 0..6
    ((9, 0, 3), None, [2, "Invalid Argument"]),          # 3g spans 4 memory slots, not 3
    ((0, 0, 7), None, [2, "Invalid Argument"]),          # 7g spans all 8
    ((9, 0, 4), (5, 0, 4), [23, "Insufficient Resources"]),   # overlap
    ((20, 3, 1), (20, 5, 1), [23, "Insufficient Resources"]),  # one 1g+me per GPU
    ((14, 2, 2), (15, 2, 2), [23, "Insufficient Resources"]),  # 1g.20gb on a used 2-slot
])
def test_invalid_and_conflicting_placements(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any],
                                            first: tuple[int, int, int], second: tuple[int, int, int] | None,
                                            expected: list[Any]) -> None:
    sim = nvml_sim("8xA100")
    sim.write(mig_on(sim.read(), 0))
    if second is None:
        script = f"R['result'] = err(place, *{first})"
    else:
        script = f"place(*{first})\nR['result'] = err(place, *{second})"
    assert sim.run(script, setup=LAYOUT)["result"] == expected


# (sequence of profile ids created without a placement) -> [(GI id, start)] or an error code; MIG User Guide
# examples (A100) and an H100 transcript, mig-mps-facts.md section 3.5
DRIVER_CHOICES = [
    ("19,14,5", [19, 14, 5], [[13, 6], [5, 4], [1, 0]]),
    ("19,19,14,9", [19, 19, 14, 9], [[13, 6], [11, 4], [3, 0], 23]),
    ("9,19,14,19", [9, 19, 14, 19], [[2, 4], [7, 0], [4, 2], [8, 1]]),
    ("14,19x5", [14, 19, 19, 19, 19, 19], [[5, 4], [13, 6], [7, 0], [8, 1], [9, 2], [10, 3]]),
    ("19x7", [19] * 7, [[13, 6], [11, 4], [12, 5], [7, 0], [8, 1], [9, 2], [10, 3]]),
    ("0 then 19", [0, 19], [[0, 0], 23]),
]


@pytest.mark.parametrize(("label", "sequence", "expected"), DRIVER_CHOICES, ids=[c[0] for c in DRIVER_CHOICES])
def test_driver_chosen_placements(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any], label: str,
                                  sequence: list[int], expected: list[Any]) -> None:
    sim = nvml_sim("8xA100")
    sim.write(mig_on(sim.read(), 0))
    r = sim.run(f"""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        out = []
        for pid in {sequence}:
            try:
                i = N.nvmlGpuInstanceGetInfo(N.nvmlDeviceCreateGpuInstance(h, pid))
                out.append([i.id, i.placement.start])
            except N.NVMLError as e:
                out.append(e.value)
        R["out"] = out
    """)
    assert r["out"] == expected, label


def test_a30_heap_ids_on_four_slots(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    sim = nvml_sim("4xA30")
    sim.write(mig_on(sim.read(), 0, 1))
    r = sim.run(setup=LAYOUT, script="""
        R["mixed"] = [place(5, 2, 2), place(14, 0, 1), place(14, 1, 1)]
        h = N.nvmlDeviceGetHandleByIndex(1)
        R["full"] = place(0, 0, 4)
        R["capacity_1g"] = N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 14)
    """)
    assert r == {"mixed": [[2, 5, 2, 2], [3, 14, 0, 1], [4, 14, 1, 1]], "full": [0, 0, 0, 4], "capacity_1g": 0}


def test_destroy_refused_while_in_use(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    sim = nvml_sim("8xA100")
    sim.write(mig_on(sim.read(), 0))
    r = sim.run(setup=LAYOUT, script="""
        place(9, 0, 4); place(9, 4, 4)
        gi1 = N.nvmlDeviceGetGpuInstanceById(h, 1)
        gi2 = N.nvmlDeviceGetGpuInstanceById(h, 2)
        ci = N.nvmlGpuInstanceCreateComputeInstance(gi1, 2)
        R["with_ci"] = err(N.nvmlGpuInstanceDestroy, gi1)
        doc = state(); doc["gpus"][0]["processes"] = [{"pid": 99, "name": "p", "used_memory_mib": 5, "gi_id": 2,
                                                       "ci_id": 0}]; save(doc)
        R["with_process"] = err(N.nvmlGpuInstanceDestroy, gi2)
        N.nvmlComputeInstanceDestroy(ci)
        N.nvmlGpuInstanceDestroy(gi1)
        R["left"] = [g["id"] for g in state()["gpus"][0]["mig"]["gpu_instances"]]
    """)
    assert r == {"with_ci": [19, "In use by another client"], "with_process": [19, "In use by another client"],
                 "left": [2]}


def test_gpu_instance_calls_need_mig_enabled(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim("8xA100").run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        arr = (N.c_nvmlGpuInstance_t * 8)(); count = ctypes.c_uint(0)
        R["codes"] = [code(N.nvmlDeviceCreateGpuInstance, h, 19),
                      code(N.nvmlDeviceGetGpuInstanceRemainingCapacity, h, 19),
                      code(N.nvmlDeviceGetGpuInstances, h, 19, arr, ctypes.byref(count)),
                      code(N.nvmlDeviceGetGpuInstanceById, h, 7)]
        R["profile_info_still_works"] = N.nvmlDeviceGetGpuInstanceProfileInfo(h, 0).id
    """)
    assert r == {"codes": [3, 3, 3, 3], "profile_info_still_works": 19}


def test_gi_functions_use_the_parent_gpus_inject_map(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    sim = nvml_sim("8xA100")
    doc = mig_on(sim.read(), 0)
    doc["gpus"][0]["inject"] = {"nvmlGpuInstanceGetInfo": 999, "nvmlDeviceCreateGpuInstanceWithPlacement": 23}
    sim.write(doc)
    r = sim.run(setup=LAYOUT, script="""
        R["create"] = err(place, 9, 0, 4)
        gi = N.nvmlDeviceCreateGpuInstance(h, 9)
        R["info"] = code(N.nvmlGpuInstanceGetInfo, gi)
        doc = state(); doc["gpus"][0]["lost"] = True; save(doc)
        R["lost"] = code(N.nvmlGpuInstanceDestroy, gi)
    """)
    assert r == {"create": [23, "Insufficient Resources"], "info": 999, "lost": 15}
