"""Which NVML queries each simulated GPU model answers and which it answers NVML_ERROR_NOT_SUPPORTED (3).

Expectations come from NVIDIA's documents, not from the simulator: the MIG User Guide's list of supported GPUs
(A100, A30, H100, H200), the NVML reference (row remapping "for Ampere or newer"; page retirement replaced by row
remapping from Ampere on, per the "Dynamic Page Retirement" guide), each board's product brief (every preset's
board is passively cooled, so it has no fan to report; L40S and T4 have no NVLink), and data-centre boards
drive no display (the mode is reported, Disabled).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

OK, NOT_SUPPORTED = 0, 3
# preset -> (MIG, row remapping, page retirement, NVLink)
DOCUMENTED = {
    "8xH100-NVSwitch": (OK, OK, NOT_SUPPORTED, OK),
    "8xA100": (OK, OK, NOT_SUPPORTED, OK),
    "4xA30": (OK, OK, NOT_SUPPORTED, OK),
    "2xL40S": (NOT_SUPPORTED, OK, NOT_SUPPORTED, NOT_SUPPORTED),
    "1xH200": (OK, OK, NOT_SUPPORTED, OK),
    "2xA100-40GB": (OK, OK, NOT_SUPPORTED, OK),
    "1xT4": (NOT_SUPPORTED, NOT_SUPPORTED, OK, NOT_SUPPORTED),
    # issue 15's boards: the MIG User Guide's supported-GPU list names each of them; Ampere and newer remap rows
    # instead of retiring pages; the RTX PRO 6000 Blackwell Server Edition's product brief lists no NVLink
    "8xB200-NVSwitch": (OK, OK, NOT_SUPPORTED, OK),
    "4xGB200": (OK, OK, NOT_SUPPORTED, OK),
    "1xGH200": (OK, OK, NOT_SUPPORTED, OK),
    "1xGH200-144GB": (OK, OK, NOT_SUPPORTED, OK),
    "2xH100-NVL": (OK, OK, NOT_SUPPORTED, OK),
    "2xH100-PCIe": (OK, OK, NOT_SUPPORTED, OK),
    "2xH200-NVL": (OK, OK, NOT_SUPPORTED, OK),
    "1xA100-80GB-PCIe": (OK, OK, NOT_SUPPORTED, OK),
    "1xA100-40GB-PCIe": (OK, OK, NOT_SUPPORTED, OK),
    "4xRTX-PRO-6000": (OK, OK, NOT_SUPPORTED, NOT_SUPPORTED),
    # the real H200 passed through to a VM (ground truth h200-sxm-passthrough-r580, driver 580.159.04): MIG mode and
    # remapped rows OK, retired pages and every NvLink getter NOT_SUPPORTED (no NVLink exposed in the VM)
    "1xH200-passthrough": (OK, OK, NOT_SUPPORTED, NOT_SUPPORTED),
}
# nvmlDeviceGetVirtualizationMode: 0 NONE (bare metal) unless listed; 1 PASSTHROUGH is what the real H200 in a VM
# answers (ground truth h200-sxm-passthrough-r580)
VIRTUALIZATION = {"1xH200-passthrough": 1}
# nvmlDeviceGetDisplayMode: 0 (Disabled) unless listed; the real H200 on 580 answers 1 (getter dump of
# h200-sxm-passthrough-r580; its nvidia-smi -q prints "Display Attached: Yes"), display active 0 all the same
DISPLAY_MODE = {"1xH200": 1, "1xH200-passthrough": 1}


def test_every_preset_has_its_documented_support() -> None:
    """A new preset must say here what its board's documents say (otherwise its support goes unchecked)."""
    from gpufleet_sim.presets import list_presets

    assert sorted(DOCUMENTED) == sorted(list_presets())


@pytest.mark.parametrize("preset", sorted(DOCUMENTED))
def test_model_dependent_support(nvml_sim: Callable[..., Any], preset: str) -> None:
    r = nvml_sim(preset).run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        R["fan"] = code(N.nvmlDeviceGetFanSpeed, h)
        R["mig"] = code(N.nvmlDeviceGetMigMode, h)
        R["remap"] = code(N.nvmlDeviceGetRemappedRows, h)
        R["retire"] = code(N.nvmlDeviceGetRetiredPages, h, N.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        R["nvlink"] = code(N.nvmlDeviceGetNvLinkState, h, 0)
        R["display"] = [N.nvmlDeviceGetDisplayMode(h), N.nvmlDeviceGetDisplayActive(h)]
        R["virtualization"] = N.nvmlDeviceGetVirtualizationMode(h)
    """)
    mig, remap, retire, nvlink = DOCUMENTED[preset]
    assert r == {"fan": NOT_SUPPORTED, "mig": mig, "remap": remap, "retire": retire, "nvlink": nvlink,
                 "display": [DISPLAY_MODE.get(preset, 0), 0], "virtualization": VIRTUALIZATION.get(preset, 0)}


def test_field_values_power_limits_and_thresholds(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("1xH200")
    with sim.edit() as doc:
        doc["gpus"][0]["power"].update({"limit_mw": 600000, "enforced_mw": 550000})
    r = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        ids = [N.NVML_FI_DEV_POWER_MIN_LIMIT, N.NVML_FI_DEV_POWER_MAX_LIMIT, N.NVML_FI_DEV_POWER_DEFAULT_LIMIT,
               N.NVML_FI_DEV_POWER_CURRENT_LIMIT, N.NVML_FI_DEV_POWER_REQUESTED_LIMIT,
               N.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT, N.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT,
               N.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT, N.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT,
               N.NVML_FI_DEV_MEMORY_TEMP]
        values = N.nvmlDeviceGetFieldValues(h, ids)
        R["values"] = [[v.fieldId, v.nvmlReturn, v.valueType, v.value.uiVal if v.nvmlReturn == 0 else None]
                       for v in values]
        module = N.nvmlDeviceGetFieldValues(h, [(N.NVML_FI_DEV_POWER_CURRENT_LIMIT, N.NVML_POWER_SCOPE_MODULE)])
        R["module"] = module[0].nvmlReturn
    """)
    g = sim.read()["gpus"][0]
    p, t = g["power"], g["temperature"]
    expected = [p["min_mw"], p["max_mw"], p["default_mw"], 550000, 600000,
                t["shutdown"], t["slowdown"], t["mem_max"], t["gpu_max"]]
    assert r["values"][:9] == [[187 + i + (i >= 4), OK, 1, v] for i, v in enumerate(expected)]
    assert r["values"][9] == [82, NOT_SUPPORTED, 1, None]  # no memory temperature in the state
    assert r["module"] == NOT_SUPPORTED


@pytest.mark.parametrize(("preset", "fabric_manager", "expected"), [
    ("8xH100-NVSwitch", False, [0, 1, 27]),   # registered with no fabric manager yet: NOT_STARTED, NOT_READY
    ("8xH100-NVSwitch", True, [0, 3, 0]),     # fabric manager running: COMPLETED, SUCCESS
    ("8xA100", True, [3, None, None]),        # Ampere: GPU fabric info is "for Hopper or newer" (NVML reference;
                                              # INFERRED: no transcript of the call before Hopper)
    ("1xH200", False, [0, 0, 0]),             # no NVSwitch: success, state NOT_SUPPORTED (the real H200, r580)
    ("1xH200-passthrough", False, [0, 0, 0]),
    ("4xGB200", False, [0, 3, 0]),            # a multi-node NVL72 tray: its switches are managed in other trays
])
def test_gpu_fabric_info(nvml_sim: Callable[..., Any], preset: str, fabric_manager: bool,
                         expected: list[int | None]) -> None:
    sim = nvml_sim(preset)
    if fabric_manager:
        with sim.edit() as doc:
            doc["clients"] = [{"pid": os.getpid(), "name": "nv-fabricmanager"}]
    r = sim.run("""
        N.nvmlInit()
        info = N.c_nvmlGpuFabricInfo_t()
        rc = code(N.nvmlDeviceGetGpuFabricInfo, N.nvmlDeviceGetHandleByIndex(0), ctypes.byref(info))
        R["fabric"] = [rc, info.state, info.status] if rc == 0 else [rc, None, None]
    """)
    assert r["fabric"] == expected
