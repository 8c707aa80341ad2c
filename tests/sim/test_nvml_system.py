"""Simulated NVML: init/shutdown, system queries, error strings, enumeration, identity, memory, reloads."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpufleet_sim import hardware

# nvmlErrorString wording of the real driver (the strings pynvml's own table copies, and those it lacks)
DRIVER_ERROR_STRINGS = {
    0: "Success", 1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
    5: "Already Initialized", 6: "Not Found", 7: "Insufficient Size", 8: "Insufficient External Power",
    9: "Driver Not Loaded", 10: "Timeout", 11: "Interrupt Request Issue", 12: "NVML Shared Library Not Found",
    13: "Function Not Found", 14: "Corrupted infoROM", 15: "GPU is lost", 16: "GPU requires restart",
    17: "The operating system has blocked the request.", 18: "RM has detected an NVML/RM version mismatch.",
    19: "In use by another client", 20: "Insufficient Memory", 21: "No data",
    22: "The requested vgpu operation is not available on target device, because ECC is enabled",
    23: "Insufficient Resources", 24: "Frequency not supported", 25: "Argument version mismatch",
    26: "Deprecated", 27: "Not Ready", 28: "GPU not found", 29: "Invalid state", 30: "Reset type not supported",
    999: "Unknown Error", 12345: "Unknown Error",
}


def test_init_shutdown_and_uninitialized(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim().run("""
        N.nvmlInit(); N.nvmlInit()
        N.nvmlShutdown()
        R["after_one_shutdown"] = N.nvmlDeviceGetCount()
        N.nvmlShutdown()
        R["after_last_shutdown"] = err(N.nvmlDeviceGetCount)
        R["shutdown_again"] = raw("nvmlShutdown")()
        R["init_v2"] = raw("nvmlInit_v2")()
        R["init_legacy"] = raw("nvmlInit")()
    """)
    assert r == {"after_one_shutdown": 2, "after_last_shutdown": [1, "Uninitialized"], "shutdown_again": 1,
                 "init_v2": 0, "init_legacy": 0}


@pytest.mark.parametrize(("content", "case"), [
    (None, "missing state file"),
    ("{not json", "unparsable"),
    ('{"schema": 2, "gpus": []}', "unknown schema"),
    ('{"schema": 1}', "no gpus array"),
])
def test_driver_not_loaded(nvml_sim: Callable[..., Any], content: str | None, case: str) -> None:
    sim = nvml_sim()
    if content is None:
        sim.state_path.unlink()
    else:
        sim.state_path.write_text(content, encoding="utf-8")
    r = sim.run("R['init'] = err(N.nvmlInit)")
    assert r["init"] == [9, "Driver Not Loaded"], case


@pytest.mark.parametrize(("inject", "expected"), [
    ({"nvmlInit": 9}, [9, "Driver Not Loaded"]),
    ({"nvmlInitWithFlags": 18}, [18, "RM has detected an NVML/RM version mismatch."]),
    ({"nvmlInit": 999}, [999, "Unknown Error"]),
])
def test_init_fault_injection(nvml_sim: Callable[..., Any], inject: dict[str, int], expected: list[Any]) -> None:
    sim = nvml_sim()
    with sim.edit() as doc:
        doc["inject"] = inject
    assert sim.run("R['init'] = err(N.nvmlInit)")["init"] == expected


def test_error_strings_match_the_driver(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim().run(f"""
        N.nvmlInit()
        fn = raw("nvmlErrorString")
        fn.restype = ctypes.c_char_p
        R["strings"] = {{str(c): fn(c).decode() for c in {sorted(DRIVER_ERROR_STRINGS)}}}
        R["pynvml_str"] = str(N.NVMLError(23))
        R["pynvml_cls"] = type(N.NVMLError(19)).__name__
    """)
    assert {int(k): v for k, v in r["strings"].items()} == DRIVER_ERROR_STRINGS
    assert r["pynvml_str"] == "Insufficient Resources"
    assert r["pynvml_cls"] == "NVMLError_InUse"


def test_system_versions(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim().run("""
        N.nvmlInit()
        R["driver"] = N.nvmlSystemGetDriverVersion()
        R["nvml"] = N.nvmlSystemGetNVMLVersion()
        R["cuda"] = N.nvmlSystemGetCudaDriverVersion()
        R["cuda_v2"] = N.nvmlSystemGetCudaDriverVersion_v2()
        buf = ctypes.create_string_buffer(4)
        R["short_buffer"] = raw("nvmlSystemGetDriverVersion")(buf, ctypes.c_uint(4))
    """)
    assert r == {"driver": "550.163.01", "nvml": "12.550.163.01", "cuda": 12040, "cuda_v2": 12040, "short_buffer": 7}


def test_driver_570_branch_reports_cuda_12_8(nvml_sim: Callable[..., Any], tmp_path: Path) -> None:
    from gpufleet_sim.build import build_library

    lib = build_library(Path(__file__).resolve().parents[2] / "build" / "sim-test-570", "570.172.08", sys.executable)
    sim = nvml_sim()
    sim.libdir = lib.parent
    r = sim.run("""
        N.nvmlInit()
        R["v"] = [N.nvmlSystemGetDriverVersion(), N.nvmlSystemGetNVMLVersion(), N.nvmlSystemGetCudaDriverVersion()]
    """)
    assert r["v"] == ["570.172.08", "12.570.172.08", 12080]


def test_identity_matches_the_state(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("2xA100-40GB", seed="node-7")
    r = sim.run("""
        N.nvmlInit()
        out = []
        for i in range(N.nvmlDeviceGetCount()):
            h = N.nvmlDeviceGetHandleByIndex(i)
            p = N.nvmlDeviceGetPciInfo(h)
            out.append({
                "index": N.nvmlDeviceGetIndex(h), "name": N.nvmlDeviceGetName(h), "uuid": N.nvmlDeviceGetUUID(h),
                "serial": N.nvmlDeviceGetSerial(h), "part": N.nvmlDeviceGetBoardPartNumber(h),
                "vbios": N.nvmlDeviceGetVbiosVersion(h), "inforom": N.nvmlDeviceGetInforomImageVersion(h),
                "minor": N.nvmlDeviceGetMinorNumber(h), "brand": N.nvmlDeviceGetBrand(h),
                "arch": N.nvmlDeviceGetArchitecture(h), "cc": list(N.nvmlDeviceGetCudaComputeCapability(h)),
                "pci": [p.busId, p.busIdLegacy, p.domain, p.bus, p.device, p.pciDeviceId, p.pciSubSystemId],
            })
        R["gpus"] = out
    """)
    doc = sim.read()
    assert len(r["gpus"]) == 2
    for got, gpu in zip(r["gpus"], doc["gpus"], strict=True):
        pci = gpu["pci"]
        assert got == {
            "index": gpu["index"], "name": "NVIDIA A100-SXM4-40GB", "uuid": gpu["uuid"], "serial": gpu["serial"],
            "part": gpu["board_part_number"], "vbios": gpu["vbios_version"], "inforom": gpu["inforom_image_version"],
            "minor": gpu["minor_number"], "brand": 14, "arch": 7, "cc": [8, 0],
            "pci": [pci["bus_id"], f"0000:{pci['bus']:02X}:00.0", 0, pci["bus"], 0, 0x20B010DE, 0x134F10DE],
        }


def test_handle_lookups(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("4xA30", seed="lookup")
    gpus = sim.read()["gpus"]
    bus = gpus[2]["pci"]["bus"]
    r = sim.run(f"""
        N.nvmlInit()
        idx = lambda h: N.nvmlDeviceGetIndex(h)
        R["uuid"] = idx(N.nvmlDeviceGetHandleByUUID({gpus[3]['uuid']!r}))
        R["uuid_upper"] = idx(N.nvmlDeviceGetHandleByUUID({gpus[3]['uuid'].upper()!r}))
        R["uuid_unknown"] = err(N.nvmlDeviceGetHandleByUUID, "GPU-00000000-0000-0000-0000-000000000000")
        R["bus_v2"] = idx(N.nvmlDeviceGetHandleByPciBusId("00000000:{bus:02X}:00.0"))
        R["bus_legacy"] = idx(N.nvmlDeviceGetHandleByPciBusId("0000:{bus:02x}:00.0"))
        R["bus_short"] = idx(N.nvmlDeviceGetHandleByPciBusId("{bus:02X}:00.0"))
        R["bus_unknown"] = err(N.nvmlDeviceGetHandleByPciBusId, "0000:00:1f.0")
        R["bus_garbage"] = err(N.nvmlDeviceGetHandleByPciBusId, "not-a-bus-id")
        R["index_out_of_range"] = err(N.nvmlDeviceGetHandleByIndex, 4)
        R["foreign_handle"] = raw("nvmlDeviceGetIndex")(ctypes.c_void_p(0x1000), ctypes.byref(ctypes.c_uint()))
        R["null_out"] = raw("nvmlDeviceGetCount_v2")(None)
    """)
    assert r == {"uuid": 3, "uuid_upper": 3, "uuid_unknown": [6, "Not Found"], "bus_v2": 2, "bus_legacy": 2,
                 "bus_short": 2, "bus_unknown": [6, "Not Found"], "bus_garbage": [2, "Invalid Argument"],
                 "index_out_of_range": [2, "Invalid Argument"], "foreign_handle": 2, "null_out": 2}


def test_memory_v1_v2_and_processes(nvml_sim: Callable[..., Any]) -> None:
    """memory.used_mib is the GPU's whole use; a process in the list is not counted a second time (issue 14)."""
    sim = nvml_sim("1xH200")
    with sim.edit() as doc:
        hardware.add_process_in(doc["gpus"][0], 4242, "python3", 1000)
        doc["gpus"][0]["memory"]["used_mib"] += 10
    r = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        m1 = N.nvmlDeviceGetMemoryInfo(h)
        m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        R["v1"] = [m1.total, m1.free, m1.used]
        R["v2"] = [m2.total, m2.reserved, m2.free, m2.used]
        bad = N.c_nvmlMemory_v2_t(); bad.version = 0x01000028
        R["bad_version"] = raw("nvmlDeviceGetMemoryInfo_v2")(h, ctypes.byref(bad))
    """)
    mib = 1 << 20
    total, reserved, used = 143771 * mib, 569 * mib, 1010 * mib
    assert r["v1"] == [total, total - reserved - used, reserved + used]
    assert r["v2"] == [total, reserved, total - reserved - used, used]
    assert r["bad_version"] == 25


def test_string_buffers_too_small_or_null(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim().run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        buf = ctypes.create_string_buffer(96)
        R["name_small"] = raw("nvmlDeviceGetName")(h, buf, ctypes.c_uint(8))
        R["uuid_null"] = raw("nvmlDeviceGetUUID")(h, None, ctypes.c_uint(96))
        R["serial_exact"] = raw("nvmlDeviceGetSerial")(h, buf, ctypes.c_uint(len(N.nvmlDeviceGetSerial(h)) + 1))
    """)
    assert r == {"name_small": 7, "uuid_null": 2, "serial_exact": 0}


def test_long_running_process_sees_changes_without_reinit(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim().run("""
        N.nvmlInit()
        h0 = N.nvmlDeviceGetHandleByIndex(0); h1 = N.nvmlDeviceGetHandleByIndex(1)
        R["before"] = N.nvmlDeviceGetTemperature(h0, 0)
        doc = state(); doc["gpus"][0]["temperature"]["gpu"] = 77; save(doc)
        R["after"] = N.nvmlDeviceGetTemperature(h0, 0)
        doc = state(); del doc["gpus"][1]; save(doc)
        R["count"] = N.nvmlDeviceGetCount()
        R["gone_handle"] = err(N.nvmlDeviceGetName, h1)
    """)
    assert r["after"] == 77
    assert r["before"] != 77
    assert r["count"] == 1
    assert r["gone_handle"] == [2, "Invalid Argument"]


def test_system_inject_map_applies_to_every_call(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim()
    with sim.edit() as doc:
        doc["inject"] = {"nvmlDeviceGetCount": 999, "nvmlDeviceGetPciInfo": 15}
    r = sim.run("""
        N.nvmlInit()
        R["count"] = err(N.nvmlDeviceGetCount)
        R["pci_v3"] = err(N.nvmlDeviceGetPciInfo, N.nvmlDeviceGetHandleByIndex(0))
        R["name"] = N.nvmlDeviceGetName(N.nvmlDeviceGetHandleByIndex(0))
    """)
    assert r == {"count": [999, "Unknown Error"], "pci_v3": [15, "GPU is lost"], "name": "NVIDIA A100-SXM4-40GB"}


def test_handle_by_serial_and_process_names(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("2xL40S", seed="serials")
    with sim.edit() as doc:
        doc["gpus"][1]["processes"] = [{"pid": 31337, "name": "/usr/bin/python3", "used_memory_mib": 10,
                                        "gi_id": None, "ci_id": None}]
    serial = sim.read()["gpus"][1]["serial"]
    r = sim.run(f"""
        N.nvmlInit()
        R["serial"] = N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleBySerial({serial!r}))
        R["serial_unknown"] = code(N.nvmlDeviceGetHandleBySerial, "0000")
        R["simulated"] = N.nvmlSystemGetProcessName(31337)
        R["live"] = N.nvmlSystemGetProcessName(os.getpid())
        R["unknown"] = code(N.nvmlSystemGetProcessName, 0)
    """)
    assert r == {"serial": 1, "serial_unknown": 6, "simulated": "/usr/bin/python3",
                 "live": Path(sys.executable).name[:15], "unknown": 6}
