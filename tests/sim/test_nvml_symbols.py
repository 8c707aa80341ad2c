"""Symbol coverage: every NVML C symbol that gpufleet's code reaches through the pinned pynvml is exported.

An unimplemented symbol would surface as NVMLError_FunctionNotFound, which production code may read as "old
driver" and silently take a fallback path; this test makes that a test failure instead.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

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

NATIVE = REPO / "simulator" / "src" / "gpufleet_sim" / "native"
# NVIDIA's nvidia-smi 535 resolves three names the bindings do not bind (read from the binary in
# test_real_nvidia_smi.py): the export-table handshake, the older init and GPU removal.
NVIDIA_SMI_ONLY = {"nvmlInternalGetExportTable", "nvmlInit_v2", "nvmlDeviceRemoveGpu_v2"}
# the unversioned v1 names that a real libnvidia-ml keeps exporting for programs linked before the _v2 ones
LEGACY_V1 = {"nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByPciBusId"}
UNSUPPORTED_RE = re.compile(r"^SIM_UNSUPPORTED\((nvml\w+)\)$", re.M)


def bound_names() -> set[str]:
    """Every C name the pinned pynvml looks up."""
    return set(FETCH_RE.findall(Path(pynvml.__file__).read_text(encoding="utf-8")))


def unsupported_names() -> set[str]:
    """The entry points the simulator answers NOT_SUPPORTED for (nvmlsim_unsupported.c)."""
    return set(UNSUPPORTED_RE.findall((NATIVE / "nvmlsim_unsupported.c").read_text(encoding="utf-8")))


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


def test_every_name_the_pinned_bindings_bind_is_exported(exported: set[str]) -> None:
    names = bound_names()
    assert len(names) == 408  # nvidia-ml-py 13.615.71 (issue 14 counted 408)
    assert sorted(names - exported) == []


def test_exports_are_only_names_nvidias_clients_use(exported: set[str]) -> None:
    assert sorted(exported - bound_names() - NVIDIA_SMI_ONLY - LEGACY_V1) == []
    assert exported >= NVIDIA_SMI_ONLY


def test_unsupported_entry_points_are_exported_and_not_simulated_elsewhere(exported: set[str]) -> None:
    stubs = unsupported_names()
    assert "nvmlDeviceGetFanSpeed" in stubs
    assert sorted(stubs - exported) == []
    simulated = set()
    for source in NATIVE.glob("nvmlsim_*.c"):
        if source.name != "nvmlsim_unsupported.c":
            simulated |= set(re.findall(r"^SIM_API [^(]*?\b(nvml\w+)\(", source.read_text(encoding="utf-8"), re.M))
    assert sorted(stubs & simulated) == []
    assert sorted(exported - stubs - simulated) == []


def test_unsupported_entry_points_answer_not_supported_after_init_only(nvml_sim: Callable[..., Any]) -> None:
    names = sorted(unsupported_names())
    r = nvml_sim("2xA100-40GB").run(f"""
        names = {names!r}
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        R["before"] = sorted({{getattr(lib, n)() for n in names}})
        N.nvmlInit()
        R["after"] = sorted({{getattr(lib, n)() for n in names}})
        R["fan"] = err(N.nvmlDeviceGetFanSpeed, N.nvmlDeviceGetHandleByIndex(0))
    """)
    assert r == {"before": [1], "after": [3], "fan": [3, "Not Supported"]}
