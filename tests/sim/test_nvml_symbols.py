"""Symbol coverage: every NVML C symbol that gpufleet's code reaches through the pinned pynvml is exported.

An unimplemented symbol would surface as NVMLError_FunctionNotFound, which production code may read as "old
driver" and silently take a fallback path; this test makes that a test failure instead.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pynvml
import pytest

REPO = Path(__file__).resolve().parents[2]
SCAN_ROOTS = (REPO / "plugins", REPO / "src" / "gpufleet")
EXCLUDED = REPO / "src" / "gpufleet" / "sim" / "native"

# `pynvml.nvmlX(`, `lib.nvmlX(` (a module bound to another name) and "nvmlX" given to a call-by-name helper
CALL_RE = re.compile(r"\.(nvml[A-Z]\w*)\s*\(|[\"'](nvml[A-Z]\w*)[\"']")
WRAPPER_RE = re.compile(r"^def (nvml\w+)\(.*?(?=^\S)", re.S | re.M)
ALIAS_RE = re.compile(r"^(nvml\w+)\s*=\s*(nvml\w+)\s*$", re.M)
FETCH_RE = re.compile(r'_nvmlGetFunctionPointer\("(\w+)"\)')
INNER_CALL_RE = re.compile(r"(?<![\w.])(nvml[A-Z]\w*)\s*\(")

# What the simulator implements (kept in step with the C sources; the last test checks both ways).
BASELINE = {
    "nvmlComputeInstanceDestroy", "nvmlComputeInstanceGetInfo_v2", "nvmlDeviceCreateGpuInstance",
    "nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlDeviceGetArchitecture", "nvmlDeviceGetBoardPartNumber",
    "nvmlDeviceGetBrand", "nvmlDeviceGetClockInfo", "nvmlDeviceGetComputeInstanceId", "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetCount",
    "nvmlDeviceGetCount_v2", "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetEccMode", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetGpuInstanceById",
    "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
    "nvmlDeviceGetGpuInstanceProfileInfo", "nvmlDeviceGetGpuInstanceProfileInfoByIdV",
    "nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuInstanceRemainingCapacity", "nvmlDeviceGetGpuInstances",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleBySerial",
    "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetIndex", "nvmlDeviceGetInforomImageVersion",
    "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetMemoryErrorCounter", "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMinorNumber", "nvmlDeviceGetName", "nvmlDeviceGetNvLinkErrorCounter", "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkVersion", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetPerformanceState", "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetPowerManagementDefaultLimit",
    "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetPowerManagementLimitConstraints", "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetRemappedRows", "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRetiredPages_v2", "nvmlDeviceGetRowRemapperHistogram", "nvmlDeviceGetSerial",
    "nvmlDeviceGetSupportedClocksEventReasons", "nvmlDeviceGetSupportedClocksThrottleReasons",
    "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetTemperatureV", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetUUID", "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetVbiosVersion", "nvmlDeviceIsMigDeviceHandle", "nvmlDeviceRegisterEvents",
    "nvmlDeviceSetComputeMode", "nvmlDeviceSetMigMode", "nvmlDeviceSetPersistenceMode",
    "nvmlDeviceSetPowerManagementLimit", "nvmlErrorString", "nvmlEventSetCreate", "nvmlEventSetFree",
    "nvmlEventSetWait_v2", "nvmlGpuInstanceCreateComputeInstance", "nvmlGpuInstanceCreateComputeInstanceWithPlacement",
    "nvmlGpuInstanceDestroy", "nvmlGpuInstanceGetComputeInstanceById",
    "nvmlGpuInstanceGetComputeInstancePossiblePlacements", "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlGpuInstanceGetComputeInstanceProfileInfoV", "nvmlGpuInstanceGetComputeInstanceRemainingCapacity",
    "nvmlGpuInstanceGetComputeInstances", "nvmlGpuInstanceGetInfo", "nvmlInit", "nvmlInitWithFlags", "nvmlInit_v2",
    "nvmlShutdown", "nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion", "nvmlSystemGetProcessName",
}


@cache
def _pynvml_source() -> tuple[dict[str, str], dict[str, str]]:
    text = Path(pynvml.__file__).read_text(encoding="utf-8")
    wrappers = {m.group(1): m.group(0) for m in WRAPPER_RE.finditer(text)}
    return wrappers, dict(ALIAS_RE.findall(text))


def c_symbols_of(wrapper: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """The C symbols a pynvml wrapper fetches, following aliases and the wrappers it calls."""
    wrappers, aliases = _pynvml_source()
    if wrapper in seen:
        return set()
    seen = seen | {wrapper}
    if wrapper in aliases:
        return c_symbols_of(aliases[wrapper], seen)
    body = wrappers.get(wrapper, "")
    symbols = set(FETCH_RE.findall(body))
    for callee in INNER_CALL_RE.findall(body):
        if callee != wrapper and (callee in wrappers or callee in aliases):
            symbols |= c_symbols_of(callee, seen)
    return symbols


def used_wrappers() -> dict[str, set[str]]:
    """pynvml wrapper -> files of gpufleet that call it."""
    used: dict[str, set[str]] = {}
    for root in SCAN_ROOTS:
        for path in root.rglob("*.py"):
            if EXCLUDED in path.parents:
                continue
            for match in CALL_RE.finditer(path.read_text(encoding="utf-8")):
                name = match.group(1) or match.group(2)
                if callable(getattr(pynvml, name, None)):
                    used.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return used


@pytest.fixture(scope="module")
def exported(nvml_libdir: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(nvml_libdir / "libnvidia-ml.so.1")], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.mark.parametrize(("wrapper", "expected"), [
    ("nvmlInit", {"nvmlInitWithFlags"}),
    ("nvmlDeviceGetPciInfo", {"nvmlDeviceGetPciInfo_v3"}),
    ("nvmlDeviceGetHandleByPciBusId", {"nvmlDeviceGetHandleByPciBusId_v2"}),
    ("nvmlDeviceGetMemoryInfo", {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"}),
    ("nvmlEventSetWait", {"nvmlEventSetWait_v2"}),
    ("nvmlComputeInstanceGetInfo", {"nvmlComputeInstanceGetInfo_v2"}),
    ("nvmlDeviceGetGpuInstanceProfileInfo",
     {"nvmlDeviceGetGpuInstanceProfileInfo", "nvmlDeviceGetGpuInstanceProfileInfoV"}),
    ("nvmlDeviceGetGpuInstancePossiblePlacements", {"nvmlDeviceGetGpuInstancePossiblePlacements_v2"}),
])
def test_wrapper_to_symbol_mapping(wrapper: str, expected: set[str]) -> None:
    assert c_symbols_of(wrapper) == expected


def test_scan_finds_gpufleets_nvml_calls() -> None:
    used = used_wrappers()
    assert "nvmlInit" in used
    assert "nvmlDeviceGetCount" in used


def test_every_symbol_gpufleet_reaches_is_exported(exported: set[str]) -> None:
    missing = {}
    for wrapper, files in sorted(used_wrappers().items()):
        for symbol in sorted(c_symbols_of(wrapper) - exported):
            missing[symbol] = f"{wrapper} in {', '.join(sorted(files))}"
    assert missing == {}


def test_exports_are_exactly_the_baseline(exported: set[str]) -> None:
    assert sorted(exported - BASELINE) == []
    assert sorted(BASELINE - exported) == []
    assert all(name.startswith("nvml") for name in exported)
