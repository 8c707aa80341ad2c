"""Simulated NVML: health getters and injected faults seen through them (ECC, retired pages, remapped rows,
thermal, power, clocks and clock event reasons, PCIe, NVLink, modes, processes, lost GPU, inject maps)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

HEALTH_SNAPSHOT = """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
R["ecc_mode"] = N.nvmlDeviceGetEccMode(h)
R["ecc_total"] = [N.nvmlDeviceGetTotalEccErrors(h, e, c) for e in (0, 1) for c in (0, 1)]
R["ecc_dram_unc_vol"] = N.nvmlDeviceGetMemoryErrorCounter(h, 1, 0, N.NVML_MEMORY_LOCATION_DRAM)
R["ecc_sram_cor_agg"] = N.nvmlDeviceGetMemoryErrorCounter(h, 0, 1, N.NVML_MEMORY_LOCATION_SRAM)
R["ecc_l1"] = code(N.nvmlDeviceGetMemoryErrorCounter, h, 0, 0, N.NVML_MEMORY_LOCATION_L1_CACHE)
R["ecc_bad_location"] = code(N.nvmlDeviceGetMemoryErrorCounter, h, 0, 0, 8)
R["ecc_bad_type"] = code(N.nvmlDeviceGetTotalEccErrors, h, 2, 0)
R["remapped"] = list(N.nvmlDeviceGetRemappedRows(h))
hist = N.nvmlDeviceGetRowRemapperHistogram(h)
R["histogram"] = [hist.max, hist.high, hist.partial, hist.low, hist.none]
R["retired"] = code(N.nvmlDeviceGetRetiredPages, h, 0)
R["temp"] = N.nvmlDeviceGetTemperature(h, 0)
R["temp_v"] = N.nvmlDeviceGetTemperatureV(h, 0)
R["thresholds"] = [N.nvmlDeviceGetTemperatureThreshold(h, t) for t in range(4)]
R["threshold_acoustic"] = code(N.nvmlDeviceGetTemperatureThreshold, h, 4)
R["threshold_bad"] = code(N.nvmlDeviceGetTemperatureThreshold, h, 8)
R["temp_bad_sensor"] = code(N.nvmlDeviceGetTemperature, h, 1)
R["power"] = [N.nvmlDeviceGetPowerUsage(h), N.nvmlDeviceGetPowerManagementLimit(h),
              N.nvmlDeviceGetEnforcedPowerLimit(h), N.nvmlDeviceGetPowerManagementDefaultLimit(h),
              N.nvmlDeviceGetPowerManagementLimitConstraints(h)]
R["clocks"] = [N.nvmlDeviceGetClockInfo(h, t) for t in range(4)]
R["max_clocks"] = [N.nvmlDeviceGetMaxClockInfo(h, t) for t in range(4)]
R["clock_bad"] = code(N.nvmlDeviceGetClockInfo, h, 4)
R["reasons"] = [N.nvmlDeviceGetCurrentClocksEventReasons(h), N.nvmlDeviceGetCurrentClocksThrottleReasons(h),
                N.nvmlDeviceGetSupportedClocksEventReasons(h), N.nvmlDeviceGetSupportedClocksThrottleReasons(h)]
R["pcie"] = [N.nvmlDeviceGetCurrPcieLinkGeneration(h), N.nvmlDeviceGetCurrPcieLinkWidth(h),
             N.nvmlDeviceGetMaxPcieLinkGeneration(h), N.nvmlDeviceGetMaxPcieLinkWidth(h),
             N.nvmlDeviceGetGpuMaxPcieLinkGeneration(h), N.nvmlDeviceGetPcieReplayCounter(h)]
R["modes"] = [N.nvmlDeviceGetPersistenceMode(h), N.nvmlDeviceGetComputeMode(h), N.nvmlDeviceGetPerformanceState(h)]
u = N.nvmlDeviceGetUtilizationRates(h)
R["util"] = [u.gpu, u.memory]
"""


def test_healthy_a100_snapshot(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim("2xA100-40GB").run(HEALTH_SNAPSHOT)
    assert r == {
        "ecc_mode": [1, 1], "ecc_total": [0, 0, 0, 0], "ecc_dram_unc_vol": 0, "ecc_sram_cor_agg": 0,
        "ecc_l1": 3, "ecc_bad_location": 2, "ecc_bad_type": 2,
        "remapped": [0, 0, 0, 0], "histogram": [640, 0, 0, 0, 0], "retired": 3,
        "temp": 31, "temp_v": 31, "thresholds": [92, 89, 95, 87], "threshold_acoustic": 3, "threshold_bad": 2,
        "temp_bad_sensor": 2,
        "power": [54000, 400000, 400000, 400000, [100000, 400000]],
        "clocks": [210, 210, 1215, 585], "max_clocks": [1410, 1410, 1215, 1290], "clock_bad": 2,
        "reasons": [1, 1, 0x1FF, 0x1FF],
        "pcie": [4, 16, 4, 16, 4, 0], "modes": [0, 0, 0], "util": [0, 0],
    }


def test_injected_faults_are_visible(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("2xA100-40GB")
    with sim.edit() as doc:
        g = doc["gpus"][0]
        g["ecc"]["volatile"]["uncorrected"]["dram"] = 2
        g["ecc"]["volatile"]["corrected"]["sram"] = 5
        g["ecc"]["aggregate"]["uncorrected"]["dram"] = 3
        g["ecc"]["aggregate"]["corrected"]["dram"] = 40
        g["ecc"]["aggregate"]["corrected"]["sram"] = 7
        g["remapped_rows"].update({"corrected": 1, "uncorrected": 2, "pending": 1, "failure": 0})
        g["remapped_rows"]["histogram"].update({"max": 630, "high": 8, "partial": 1, "low": 1})
        g["temperature"]["gpu"] = 91
        g["clock_event_reasons"] = 0x40 | 0x20 | 0x4
        g["pcie"].update({"gen": 2, "width": 8, "replay_counter": 123})
        g["power"]["usage_mw"] = 399000
        g["utilization"] = {"gpu": 97, "memory": 63}
    r = sim.run(HEALTH_SNAPSHOT)
    assert r["ecc_total"] == [5, 47, 2, 3]
    assert r["ecc_dram_unc_vol"] == 2
    assert r["ecc_sram_cor_agg"] == 7
    assert r["remapped"] == [1, 2, 1, 0]
    assert r["histogram"] == [630, 8, 1, 1, 0]
    assert (r["temp"], r["temp_v"]) == (91, 91)
    assert r["reasons"][:2] == [0x64, 0x64]
    assert r["pcie"] == [2, 8, 4, 16, 4, 123]
    assert r["power"][0] == 399000
    assert r["util"] == [97, 63]


def test_retired_pages_on_t4(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("1xT4")
    with sim.edit() as doc:
        doc["gpus"][0]["retired_pages"].update({
            "sbe": [0x1000, 0x2000], "dbe": [{"address": 0x3000, "timestamp": 1763769600}], "pending": 1})
    r = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        R["sbe"] = N.nvmlDeviceGetRetiredPages(h, 0)
        R["dbe_v2"] = N.nvmlDeviceGetRetiredPages_v2(h, 1)
        R["pending"] = N.nvmlDeviceGetRetiredPagesPendingStatus(h)
        R["bad_cause"] = code(N.nvmlDeviceGetRetiredPages, h, 2)
        count = ctypes.c_uint(1)
        R["short"] = [raw("nvmlDeviceGetRetiredPages")(h, 0, ctypes.byref(count), (ctypes.c_ulonglong * 1)()),
                      count.value]
        R["remapped"] = code(N.nvmlDeviceGetRemappedRows, h)
        R["arch"] = N.nvmlDeviceGetArchitecture(h)
        R["nvlink"] = code(N.nvmlDeviceGetNvLinkState, h, 0)
        R["mig"] = code(N.nvmlDeviceGetMigMode, h)
    """)
    assert r == {"sbe": [0x1000, 0x2000], "dbe_v2": [{"address": 0x3000, "timestamp": 1763769600}], "pending": 1,
                 "bad_cause": 2, "short": [7, 2], "remapped": 3, "arch": 6, "nvlink": 3, "mig": 3}


def test_nvlink_links_down_and_errors(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("8xH100-NVSwitch")
    with sim.edit() as doc:
        doc["gpus"][3]["nvlink"]["links"][5] = 0
        doc["gpus"][3]["nvlink"]["errors"] = [{}] * 5 + [{"replay": 4, "crc_flit": 17}]
    r = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(3)
        R["states"] = [N.nvmlDeviceGetNvLinkState(h, l) for l in range(18)]
        R["version"] = N.nvmlDeviceGetNvLinkVersion(h, 0)
        R["link_18"] = err(N.nvmlDeviceGetNvLinkState, h, 18)
        R["errors"] = [N.nvmlDeviceGetNvLinkErrorCounter(h, 5, c) for c in range(5)]
        R["errors_ok_link"] = [N.nvmlDeviceGetNvLinkErrorCounter(h, 0, c) for c in range(5)]
        R["counter_bad"] = code(N.nvmlDeviceGetNvLinkErrorCounter, h, 0, 5)
    """)
    assert r["states"] == [1] * 5 + [0] + [1] * 12
    assert r["version"] == 4
    assert r["link_18"] == [2, "Invalid Argument"]
    assert r["errors"] == [4, 0, 17, 0, 0]
    assert r["errors_ok_link"] == [0] * 5
    assert r["counter_bad"] == 2


def test_l40s_has_no_nvlink_and_no_mig(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim("2xL40S").run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(1)
        R["nvlink"] = err(N.nvmlDeviceGetNvLinkState, h, 0)
        R["nvlink_version"] = code(N.nvmlDeviceGetNvLinkVersion, h, 0)
        R["mig"] = err(N.nvmlDeviceGetMigMode, h)
        R["mig_create"] = code(N.nvmlDeviceCreateGpuInstance, h, 19)
        R["max_mig"] = code(N.nvmlDeviceGetMaxMigDeviceCount, h)
        R["arch_cc"] = [N.nvmlDeviceGetArchitecture(h), list(N.nvmlDeviceGetCudaComputeCapability(h))]
    """)
    assert r == {"nvlink": [3, "Not Supported"], "nvlink_version": 3, "mig": [3, "Not Supported"], "mig_create": 3,
                 "max_mig": 3, "arch_cc": [8, [8, 9]]}


def test_temperature_v_version_word(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim().run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        t = N.c_nvmlTemperature_v1_t(); t.version = 0x200000C; t.sensorType = 0
        R["bad_version"] = raw("nvmlDeviceGetTemperatureV")(h, ctypes.byref(t))
        t.version = N.nvmlTemperature_v1
        R["ok"] = [raw("nvmlDeviceGetTemperatureV")(h, ctypes.byref(t)), t.temperature]
    """)
    assert r == {"bad_version": 25, "ok": [0, 31]}


def test_persistence_compute_mode_and_power_limit_setters(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim()
    r = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(1)
        N.nvmlDeviceSetPersistenceMode(h, 1)
        N.nvmlDeviceSetComputeMode(h, N.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
        N.nvmlDeviceSetPowerManagementLimit(h, 300000)
        R["after"] = [N.nvmlDeviceGetPersistenceMode(h), N.nvmlDeviceGetComputeMode(h),
                      N.nvmlDeviceGetPowerManagementLimit(h), N.nvmlDeviceGetEnforcedPowerLimit(h)]
        R["bad_persistence"] = code(N.nvmlDeviceSetPersistenceMode, h, 2)
        R["exclusive_thread"] = code(N.nvmlDeviceSetComputeMode, h, 1)
        R["bad_compute"] = code(N.nvmlDeviceSetComputeMode, h, 4)
        R["power_too_low"] = code(N.nvmlDeviceSetPowerManagementLimit, h, 1000)
    """)
    assert r == {"after": [1, 3, 300000, 300000], "bad_persistence": 2, "exclusive_thread": 3, "bad_compute": 2,
                 "power_too_low": 2}
    gpu = sim.read()["gpus"][1]
    assert (gpu["persistence_mode"], gpu["compute_mode"], gpu["power"]["limit_mw"]) == (1, 3, 300000)
    assert sim.read()["gpus"][0]["persistence_mode"] == 0


def test_running_processes(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim()
    with sim.edit() as doc:
        doc["gpus"][0]["processes"] = [
            {"pid": 4242, "name": "python3", "used_memory_mib": 512, "gi_id": None, "ci_id": None},
            {"pid": 4343, "name": "train", "used_memory_mib": None, "gi_id": None, "ci_id": None}]
    r = sim.run("""
        N.nvmlInit()
        R["gpu0"] = [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId]
                     for p in N.nvmlDeviceGetComputeRunningProcesses(N.nvmlDeviceGetHandleByIndex(0))]
        R["gpu1"] = N.nvmlDeviceGetComputeRunningProcesses(N.nvmlDeviceGetHandleByIndex(1))
        count = ctypes.c_uint(0)
        R["size_query"] = [raw("nvmlDeviceGetComputeRunningProcesses_v3")(N.nvmlDeviceGetHandleByIndex(0),
                                                                          ctypes.byref(count), None), count.value]
    """)
    assert r == {"gpu0": [[4242, 512 << 20, 0xFFFFFFFF, 0xFFFFFFFF], [4343, None, 0xFFFFFFFF, 0xFFFFFFFF]],
                 "gpu1": [], "size_query": [7, 2]}


LOST_CALLS = """
N.nvmlInit()
R["count"] = N.nvmlDeviceGetCount()
R["handle"] = err(N.nvmlDeviceGetHandleByIndex, 1)
h = N.nvmlDeviceGetHandleByIndex(0)
doc = state(); doc["gpus"][0]["lost"] = True; save(doc)
R["calls"] = [code(f, *a) for f, a in [
    (N.nvmlDeviceGetName, (h,)), (N.nvmlDeviceGetMemoryInfo, (h,)), (N.nvmlDeviceGetTemperature, (h, 0)),
    (N.nvmlDeviceGetMigMode, (h,)), (N.nvmlDeviceGetEccMode, (h,)), (N.nvmlDeviceGetPciInfo, (h,)),
    (N.nvmlDeviceGetPowerUsage, (h,)), (N.nvmlDeviceGetNvLinkState, (h, 0)), (N.nvmlDeviceSetPersistenceMode, (h, 1)),
    (N.nvmlDeviceGetUUID, (h,)), (N.nvmlDeviceGetCurrentClocksEventReasons, (h,))]]
R["uuid_lookup"] = code(N.nvmlDeviceGetHandleByUUID, state()["gpus"][0]["uuid"])
"""


def test_lost_gpu_returns_gpu_is_lost_everywhere(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim()
    with sim.edit() as doc:
        doc["gpus"][1]["lost"] = True
    r = sim.run(LOST_CALLS)
    assert r["count"] == 2
    assert r["handle"] == [15, "GPU is lost"]
    assert r["calls"] == [15] * 11
    assert r["uuid_lookup"] == 15


@pytest.mark.parametrize(("function", "call", "code"), [
    ("nvmlDeviceGetMemoryInfo", "N.nvmlDeviceGetMemoryInfo(h)", 15),
    ("nvmlDeviceGetMemoryInfo_v2", "N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)", 21),
    ("nvmlDeviceGetPciInfo", "N.nvmlDeviceGetPciInfo(h)", 3),
    ("nvmlDeviceGetTemperature", "N.nvmlDeviceGetTemperature(h, 0)", 999),
    ("nvmlDeviceGetRemappedRows", "N.nvmlDeviceGetRemappedRows(h)", 14),
    ("nvmlDeviceGetMigMode", "N.nvmlDeviceGetMigMode(h)", 18),
])
def test_per_gpu_inject_map(nvml_sim: Callable[..., Any], function: str, call: str, code: int) -> None:
    sim = nvml_sim()
    with sim.edit() as doc:
        doc["gpus"][1]["inject"] = {function: code}
    r = sim.run(f"""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(1)
        R["gpu1"] = code(lambda: {call})
        h = N.nvmlDeviceGetHandleByIndex(0)
        R["gpu0"] = code(lambda: {call})
    """)
    assert r == {"gpu1": code, "gpu0": 0}


def test_power_limit_v2_and_ecc_mode_setters(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("1xH200")
    r = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        # the C function itself: pynvml's wrapper drops its return code
        setter = raw("nvmlDeviceSetPowerManagementLimit_v2")
        v = N.c_nvmlPowerValue_v2_t(); v.version = N.nvmlPowerValue_v2; v.powerScope = N.NVML_POWER_SCOPE_GPU
        v.powerValueMw = 450000
        R["gpu"] = setter(h, ctypes.byref(v))
        v.powerScope = N.NVML_POWER_SCOPE_MODULE
        R["module"] = setter(h, ctypes.byref(v))
        v.powerScope = N.NVML_POWER_SCOPE_GPU; v.version = 0x0100000C
        R["old_version"] = setter(h, ctypes.byref(v))
        R["ecc_off"] = code(N.nvmlDeviceSetEccMode, h, 0)
        R["ecc_bad"] = code(N.nvmlDeviceSetEccMode, h, 2)
        R["ecc"] = N.nvmlDeviceGetEccMode(h)
    """)
    g = sim.read()["gpus"][0]
    assert r == {"gpu": 0, "module": 3, "old_version": 25, "ecc_off": 0, "ecc_bad": 2, "ecc": [1, 0]}
    assert [g["power"]["limit_mw"], g["power"]["enforced_mw"], g["ecc"]["pending"]] == [450000, 450000, 0]
