"""The GPU fabric through the unmodified pynvml: nvmlDeviceGetGpuFabricInfo and nvmlDeviceGetGpuFabricInfoV (v2, v3)
follow the simulated fabric manager, the NVLink subnet manager on NVLink 5 GPUs and the fabric-stuck fault.

The numbers are nvml.h's (pynvml's constants): states NOT_STARTED 1, IN_PROGRESS 2, COMPLETED 3; NVML_ERROR_NOT_READY
27, NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25, NVML_ERROR_NOT_SUPPORTED 3.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet_sim import hardware

NOT_STARTED, IN_PROGRESS, COMPLETED = 1, 2, 3
NOT_READY, VERSION_MISMATCH, NOT_SUPPORTED = 27, 25, 3
# nvml.h health mask with nothing wrong: degraded bandwidth, route recovery, route unhealthy and access timeout
# recovery all FALSE (2 at shifts 0, 2, 4, 6), incorrect configuration NONE (1 at shift 8)
HEALTHY_MASK = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8

READ_ALL = """
    N.nvmlInit()
    R["gpus"] = []
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        v1 = N.c_nvmlGpuFabricInfo_t()
        rc1 = code(N.nvmlDeviceGetGpuFabricInfo, h, ctypes.byref(v1))
        v3 = N.c_nvmlGpuFabricInfo_v3_t()
        rc3 = code(N.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(v3))
        v2 = N.c_nvmlGpuFabricInfoV_t()
        rc2 = code(N.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(v2))
        R["gpus"].append({
            "v1": [rc1, v1.state, v1.status, v1.cliqueId, bytes(v1.clusterUuid).hex()],
            "v2": [rc2, v2.state, v2.status, v2.cliqueId, bytes(v2.clusterUuid).hex(), v2.healthMask],
            "v3": [rc3, v3.state, v3.healthMask, v3.healthSummary],
        })
    bad = N.c_nvmlGpuFabricInfoV_t()
    bad.version = 0x01000024
    R["bad_version"] = code(N.nvmlDeviceGetGpuFabricInfoV, N.nvmlDeviceGetHandleByIndex(0), ctypes.byref(bad))
"""


def _running(sim: Any, *names: str) -> None:
    """Register this test process as the named fabric daemons (a live pid, as the tools do)."""
    with sim.edit() as doc:
        doc["clients"] = [{"pid": os.getpid(), "name": name} for name in names]


@pytest.mark.parametrize(("preset", "daemons", "state"), [
    ("8xH100-NVSwitch", (), NOT_STARTED),
    ("8xH100-NVSwitch", ("nv-fabricmanager",), COMPLETED),          # NVLink 4: the fabric manager is enough
    ("8xB200-NVSwitch", (), NOT_STARTED),
    ("8xB200-NVSwitch", ("nv-fabricmanager",), IN_PROGRESS),        # NVLink 5 without the subnet manager
    ("8xB200-NVSwitch", ("nvlsm",), NOT_STARTED),                   # the subnet manager alone completes nothing
    ("8xB200-NVSwitch", ("nvlsm", "nv-fabricmanager"), COMPLETED),
])
def test_fabric_state_follows_the_fabric_software(nvml_sim: Callable[..., Any], preset: str,
                                                  daemons: tuple[str, ...], state: int) -> None:
    sim = nvml_sim(preset)
    _running(sim, *daemons)
    r = sim.run(READ_ALL)
    assert len(r["gpus"]) == 8
    for gpu in r["gpus"]:
        assert gpu["v1"][:3] == [0, state, 0 if state == COMPLETED else NOT_READY]
        assert gpu["v2"][:3] == gpu["v1"][:3]
        assert gpu["v3"][:2] == [0, state]
        if state == COMPLETED:
            assert gpu["v1"][3] != 0
            assert gpu["v1"][4] != "00" * 16
            assert gpu["v2"][5] == HEALTHY_MASK
            assert gpu["v3"][2:] == [HEALTHY_MASK, 1]
        else:
            assert gpu["v1"][3:] == [0, "00" * 16]
    # one fabric per host: every GPU shows the same clique and cluster; the identity does not change between reads
    assert len({tuple(g["v1"][3:]) for g in r["gpus"]}) == 1
    assert sim.run(READ_ALL)["gpus"][0]["v1"] == r["gpus"][0]["v1"]
    assert r["bad_version"] == VERSION_MISMATCH


def test_hosts_have_their_own_cluster_uuid(nvml_sim: Callable[..., Any]) -> None:
    a, b = nvml_sim("8xH100-NVSwitch", seed="host-a"), nvml_sim("8xH100-NVSwitch", seed="host-b")
    for sim in (a, b):
        _running(sim, "nv-fabricmanager")
    assert a.run(READ_ALL)["gpus"][0]["v1"][4] != b.run(READ_ALL)["gpus"][0]["v1"][4]


@pytest.mark.parametrize("preset", ["8xA100", "1xH200", "4xGB200"])
def test_no_fabric_without_nvswitch_or_before_hopper(nvml_sim: Callable[..., Any], preset: str) -> None:
    sim = nvml_sim(preset)
    _running(sim, "nv-fabricmanager", "nvlsm")
    r = sim.run(READ_ALL)
    assert {(g["v1"][0], g["v2"][0], g["v3"][0]) for g in r["gpus"]} == {(NOT_SUPPORTED,) * 3}


def _gpusim(sim: Any, *args: str) -> str:
    """``gpusim fault <args> --state <the host's state>``; its output."""
    proc = subprocess.run([sys.executable, "-m", "gpufleet_sim.cli", "fault", *args, "--state", str(sim.state_path)],
                          capture_output=True, text=True, check=True, timeout=60)
    return proc.stdout.strip()


def test_fabric_stuck_fault_holds_one_gpu_in_progress_until_cleared(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("8xB200-NVSwitch")
    _running(sim, "nvlsm", "nv-fabricmanager")
    assert _gpusim(sim, "inject", "fabric-stuck", "-i", "3") == "injected: GPU 3's fabric stuck in progress"
    states = [g["v1"][1] for g in sim.run(READ_ALL)["gpus"]]
    assert states == [COMPLETED] * 3 + [IN_PROGRESS] + [COMPLETED] * 4
    assert _gpusim(sim, "clear", "fabric-stuck", "-i", "3") == "cleared GPU 3: fabric-stuck"
    assert "fabric_stuck" not in sim.read()["gpus"][3]
    assert [g["v1"][1] for g in sim.run(READ_ALL)["gpus"]] == [COMPLETED] * 8


def test_a_down_nvlink_reports_degraded_bandwidth(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("8xH100-NVSwitch")
    _running(sim, "nv-fabricmanager")
    hardware.inject("nvlink-down", 1, {"link": 0}, sim.state_path)
    gpus = sim.run(READ_ALL)["gpus"]
    assert gpus[1]["v2"][5] == HEALTHY_MASK & ~0x3 | 1   # degraded bandwidth TRUE
    assert gpus[1]["v3"][3] == 3                         # health summary LIMITED_CAPACITY
    assert gpus[0]["v2"][5] == HEALTHY_MASK
