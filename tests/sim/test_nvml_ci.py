"""Simulated NVML: compute instances inside GPU instances, and MIG device handles and UUIDs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufleet_sim.presets import mig_device_uuid

# A100-80GB with MIG on: a 3g.40gb GI (id 1 at 0:4) and a 1g.10gb GI (id 13 at 6:1)
SETUP = """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
def gi_at(pid, start, size):
    p = N.c_nvmlGpuInstancePlacement_t(); p.start = start; p.size = size
    return N.nvmlDeviceCreateGpuInstanceWithPlacement(h, pid, ctypes.byref(p))
def ci_at(gi, pid, start, size):
    p = N.c_nvmlComputeInstancePlacement_t(); p.start = start; p.size = size
    return N.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, pid, ctypes.byref(p))
def ci_info(ci):
    i = N.nvmlComputeInstanceGetInfo(ci)
    return [i.id, i.profileId, i.placement.start, i.placement.size,
            N.nvmlGpuInstanceGetInfo(i.gpuInstance).id, N.nvmlDeviceGetIndex(i.device)]
def ci_ids(gi, pid):
    arr = (N.c_nvmlComputeInstance_t * 8)(); count = ctypes.c_uint(0)
    N.nvmlGpuInstanceGetComputeInstances(gi, pid, arr, ctypes.byref(count))
    return [N.nvmlComputeInstanceGetInfo(arr[i]).id for i in range(count.value)]
gi3 = gi_at(9, 0, 4)
gi1 = gi_at(19, 6, 1)
"""


def _sim(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> Any:
    sim = nvml_sim("8xA100", seed="ci-host")
    sim.write(mig_on(sim.read(), 0))
    return sim


class CIv3Struct:
    """nvmlComputeInstanceProfileInfo_v3_t from nvml.h, defined inside the scenario."""

    source = """
class CIv3(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in ("version", "id", "sliceCount", "instanceCount", "multiprocessorCount",
                "sharedCopyEngineCount", "sharedDecoderCount", "sharedEncoderCount", "sharedJpegCount",
                "sharedOfaCount")] + [("name", ctypes.c_char * 96), ("capabilities", ctypes.c_uint)]
"""


def test_ci_profiles_inside_a_3g_gpu_instance(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    r = _sim(nvml_sim, mig_on).run(setup=SETUP + CIv3Struct.source, script="""
        out = []
        for idx in (0, 1, 2):
            i = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi3, idx, 0)
            out.append([i.id, i.sliceCount, i.instanceCount, i.multiprocessorCount, i.sharedCopyEngineCount,
                        i.sharedDecoderCount, i.name])
        R["v2"] = out
        v1 = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi3, 1, 0, version=1)
        R["v1"] = [v1.id, v1.sliceCount, v1.instanceCount]
        v3 = CIv3(); v3.version = (3 << 24) | ctypes.sizeof(CIv3)
        R["v3"] = [raw("nvmlGpuInstanceGetComputeInstanceProfileInfoV")(gi3, 2, 0, ctypes.byref(v3)), v3.id,
                   v3.name.decode(), ctypes.sizeof(CIv3)]
        bogus = N.c_nvmlComputeInstanceProfileInfo_v2_t(); bogus.version = 0x02000099
        R["bogus"] = raw("nvmlGpuInstanceGetComputeInstanceProfileInfoV")(gi3, 0, 0, ctypes.byref(bogus))
        R["4c_in_3g"] = err(N.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi3, 3, 0)
        R["past_count"] = code(N.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi3, 9, 0)
        R["bad_engine"] = code(N.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi3, 0, 1)
        R["in_1g"] = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi1, 0, 0).name
        count = ctypes.c_uint(0)
        place = {}
        for pid in (0, 1, 2):
            raw("nvmlGpuInstanceGetComputeInstancePossiblePlacements")(gi3, pid, None, ctypes.byref(count))
            arr = (N.c_nvmlComputeInstancePlacement_t * count.value)()
            N.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi3, pid, arr, ctypes.byref(count))
            place[str(pid)] = [[p.start, p.size] for p in arr[:count.value]]
        R["placements"] = place
    """)
    assert r == {
        "v2": [[0, 1, 3, 14, 3, 2, "MIG 1c.3g.40gb"], [1, 2, 1, 28, 3, 2, "MIG 2c.3g.40gb"],
               [2, 3, 1, 42, 3, 2, "MIG 3g.40gb"]],
        "v1": [1, 2, 1], "v3": [0, 2, "MIG 3g.40gb", 140], "bogus": 25, "4c_in_3g": [3, "Not Supported"],
        "past_count": 2, "bad_engine": 2, "in_1g": "MIG 1g.10gb",
        "placements": {"0": [[0, 1], [1, 1], [2, 1]], "1": [[0, 2]], "2": [[0, 3]]},
    }


def test_compute_instance_lifecycle(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    sim = _sim(nvml_sim, mig_on)
    r = sim.run(setup=SETUP, script="""
        a = N.nvmlGpuInstanceCreateComputeInstance(gi3, 0)
        b = N.nvmlGpuInstanceCreateComputeInstance(gi3, 0)
        R["remaining"] = [N.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi3, p) for p in (0, 1, 2)]
        c = N.nvmlGpuInstanceCreateComputeInstance(gi3, 0)
        R["infos"] = [ci_info(x) for x in (a, b, c)]
        R["fourth"] = err(N.nvmlGpuInstanceCreateComputeInstance, gi3, 0)
        R["2c_now"] = err(N.nvmlGpuInstanceCreateComputeInstance, gi3, 1)
        R["list"] = ci_ids(gi3, 0)
        R["by_id"] = ci_info(N.nvmlGpuInstanceGetComputeInstanceById(gi3, 1))
        R["by_id_missing"] = err(N.nvmlGpuInstanceGetComputeInstanceById, gi3, 5)
        N.nvmlComputeInstanceDestroy(b)
        R["stale"] = code(N.nvmlComputeInstanceGetInfo, b)
        R["reuse_lowest_id"] = ci_info(N.nvmlGpuInstanceCreateComputeInstance(gi3, 0))
        R["unknown_profile"] = code(N.nvmlGpuInstanceCreateComputeInstance, gi3, 4)
    """)
    assert r == {
        "remaining": [1, 0, 0],
        "infos": [[0, 0, 0, 1, 1, 0], [1, 0, 1, 1, 1, 0], [2, 0, 2, 1, 1, 0]],
        "fourth": [23, "Insufficient Resources"], "2c_now": [23, "Insufficient Resources"],
        "list": [0, 1, 2], "by_id": [1, 0, 1, 1, 1, 0], "by_id_missing": [6, "Not Found"], "stale": 2,
        "reuse_lowest_id": [1, 0, 1, 1, 1, 0], "unknown_profile": 2,
    }
    cis = sim.read()["gpus"][0]["mig"]["gpu_instances"][0]["compute_instances"]
    assert sorted(c["id"] for c in cis) == [0, 1, 2]


def test_compute_instance_placements(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    r = _sim(nvml_sim, mig_on).run(setup=SETUP, script="""
        R["2c_at_1"] = err(ci_at, gi3, 1, 1, 2)
        R["1c_at_3"] = err(ci_at, gi3, 0, 3, 1)
        R["1c_at_2"] = ci_info(ci_at(gi3, 0, 2, 1))
        R["2c_at_0"] = ci_info(ci_at(gi3, 1, 0, 2))
        R["3c_overlaps"] = err(ci_at, gi3, 2, 0, 3)
        R["null_placement"] = raw("nvmlGpuInstanceCreateComputeInstanceWithPlacement")(gi3, 0, None,
                                                                                        ctypes.byref(N.c_nvmlComputeInstance_t()))
    """)
    assert r == {"2c_at_1": [2, "Invalid Argument"], "1c_at_3": [2, "Invalid Argument"],
                 "1c_at_2": [0, 0, 2, 1, 1, 0], "2c_at_0": [1, 1, 0, 2, 1, 0],
                 "3c_overlaps": [23, "Insufficient Resources"], "null_placement": 2}


def test_compute_instance_destroy_refused_with_a_process(nvml_sim: Callable[..., Any],
                                                         mig_on: Callable[..., Any]) -> None:
    r = _sim(nvml_sim, mig_on).run(setup=SETUP, script="""
        ci = N.nvmlGpuInstanceCreateComputeInstance(gi1, 0)
        doc = state(); doc["gpus"][0]["processes"] = [{"pid": 5, "name": "p", "used_memory_mib": 100, "gi_id": 13,
                                                       "ci_id": 0}]; save(doc)
        R["destroy"] = err(N.nvmlComputeInstanceDestroy, ci)
        mig = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
        R["mig_processes"] = [[p.pid, p.gpuInstanceId, p.computeInstanceId]
                              for p in N.nvmlDeviceGetComputeRunningProcesses(mig)]
        m = N.nvmlDeviceGetMemoryInfo(mig)
        R["mig_memory"] = [m.total >> 20, m.used >> 20]
    """)
    assert r == {"destroy": [19, "In use by another client"], "mig_processes": [[5, 13, 0]],
                 "mig_memory": [9728, 100]}


def test_mig_device_handles_and_uuids(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    sim = _sim(nvml_sim, mig_on)
    r = sim.run(setup=SETUP, script="""
        N.nvmlGpuInstanceCreateComputeInstance(gi3, 2)
        N.nvmlGpuInstanceCreateComputeInstance(gi1, 0)
        R["max"] = N.nvmlDeviceGetMaxMigDeviceCount(h)
        devs = [N.nvmlDeviceGetMigDeviceHandleByIndex(h, i) for i in range(2)]
        R["devs"] = [[N.nvmlDeviceIsMigDeviceHandle(d).value, N.nvmlDeviceGetGpuInstanceId(d),
                      N.nvmlDeviceGetComputeInstanceId(d), N.nvmlDeviceGetName(d), N.nvmlDeviceGetUUID(d),
                      N.nvmlDeviceGetMemoryInfo(d).total >> 20,
                      N.nvmlDeviceGetIndex(N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(d))] for d in devs]
        R["index_2"] = err(N.nvmlDeviceGetMigDeviceHandleByIndex, h, 2)
        R["index_7"] = code(N.nvmlDeviceGetMigDeviceHandleByIndex, h, 7)
        by_uuid = N.nvmlDeviceGetHandleByUUID(R["devs"][1][4])
        R["by_uuid"] = [N.nvmlDeviceGetGpuInstanceId(by_uuid), N.nvmlDeviceGetComputeInstanceId(by_uuid)]
        R["physical"] = [N.nvmlDeviceIsMigDeviceHandle(h).value, code(N.nvmlDeviceGetGpuInstanceId, h),
                         code(N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, h)]
        R["not_for_mig"] = [code(N.nvmlDeviceGetTemperature, devs[0], 0), code(N.nvmlDeviceGetMigMode, devs[0]),
                            code(N.nvmlDeviceGetMigDeviceHandleByIndex, devs[0], 0)]
        h1 = N.nvmlDeviceGetHandleByIndex(1)
        R["mig_off"] = [N.nvmlDeviceGetMaxMigDeviceCount(h1), code(N.nvmlDeviceGetMigDeviceHandleByIndex, h1, 0)]
    """)
    doc = sim.read()
    gpu = doc["gpus"][0]
    uuid3 = mig_device_uuid(gpu["uuid"], 1, 0)
    uuid1 = mig_device_uuid(gpu["uuid"], 13, 0)
    assert r["max"] == 7
    assert r["devs"] == [[1, 1, 0, "NVIDIA A100-SXM4-80GB MIG 3g.40gb", uuid3, 40192, 0],
                         [1, 13, 0, "NVIDIA A100-SXM4-80GB MIG 1g.10gb", uuid1, 9728, 0]]
    stored = {(g["id"], c["id"]): c["uuid"] for g in gpu["mig"]["gpu_instances"] for c in g["compute_instances"]}
    assert stored == {(1, 0): uuid3, (13, 0): uuid1}
    assert r["index_2"] == [6, "Not Found"]
    assert r["index_7"] == 2
    assert r["by_uuid"] == [13, 0]
    assert r["physical"] == [0, 3, 2]
    assert r["not_for_mig"] == [3, 3, 2]
    assert r["mig_off"] == [0, 3]


def test_partial_ci_device_name_and_stored_uuid_wins(nvml_sim: Callable[..., Any],
                                                     mig_on: Callable[..., Any]) -> None:
    sim = _sim(nvml_sim, mig_on)
    r = sim.run(setup=SETUP, script="""
        N.nvmlGpuInstanceCreateComputeInstance(gi3, 0)
        doc = state()
        ci = doc["gpus"][0]["mig"]["gpu_instances"][0]["compute_instances"][0]
        ci["uuid"] = "MIG-11111111-2222-3333-4444-555555555555"
        save(doc)
        d = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
        R["name"] = N.nvmlDeviceGetName(d)
        R["uuid"] = N.nvmlDeviceGetUUID(d)
    """)
    assert r == {"name": "NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", "uuid": "MIG-11111111-2222-3333-4444-555555555555"}
