"""The GPU fabric through the unmodified pynvml: nvmlDeviceGetGpuFabricInfo and nvmlDeviceGetGpuFabricInfoV (v2, v3)
follow the simulated fabric manager, the NVLink subnet manager on NVLink 5 GPUs and the fabric-stuck fault; they answer
what real drivers answer for a GPU without a fabric, a single-node NVSwitch system and a multi-node NVL72 tray.

The numbers are nvml.h's (pynvml's constants): states NOT_SUPPORTED 0, NOT_STARTED 1, IN_PROGRESS 2, COMPLETED 3;
NVML_ERROR_NOT_READY 27, NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25, NVML_ERROR_NOT_SUPPORTED 3.

Real answers (/work/shared/ground-truth, copies of the public ones cited in nvmlsim_fabric.c):
- H200 passed through to a VM, driver 580.159.04 (h200-sxm-passthrough-r580/nvml/getters-*.jsonl): both calls OK,
  state 0, status 0, clique 0, zero cluster UUID, health mask 0.
- HGX H100 8-GPU, driver 580.105.08 (public H100_SXM_HGX__xml__1): Completed, Success, clique 0, cluster UUID
  00000000-0000-0000-0000-000000000000, every health line N/A.
- GB200 NVL72 tray, driver 580.173.02 (public GB200__xml__1): Completed, Success, clique 2, a non-zero cluster UUID,
  summary Healthy, bandwidth Full, route recovery / unhealthy / access timeout False, incorrect configuration N/A.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet_sim import hardware

STATE_NOT_SUPPORTED, NOT_STARTED, IN_PROGRESS, COMPLETED = 0, 1, 2, 3
NOT_READY, VERSION_MISMATCH, NOT_SUPPORTED = 27, 25, 3
ZERO_UUID = "00" * 16
# nvml.h health mask of a healthy multi-node tray (GB200__xml__1): degraded bandwidth, route recovery, route unhealthy
# and access timeout recovery all FALSE (2 at shifts 0, 2, 4, 6), incorrect configuration NOT_SUPPORTED (0 at shift
# 8: nvidia-smi prints N/A)
HEALTHY_MASK = 2 | 2 << 2 | 2 << 4 | 2 << 6
HEALTH_SUMMARY_HEALTHY, HEALTH_SUMMARY_LIMITED_CAPACITY = 1, 3

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
def test_single_node_fabric_follows_the_fabric_software(nvml_sim: Callable[..., Any], preset: str,
                                                        daemons: tuple[str, ...], state: int) -> None:
    sim = nvml_sim(preset)
    _running(sim, *daemons)
    r = sim.run(READ_ALL)
    assert len(r["gpus"]) == 8
    for gpu in r["gpus"]:
        # one node (H100_SXM_HGX__xml__1): clique 0, zero cluster UUID, health Not Supported, whatever the state
        assert gpu["v1"] == [0, state, 0 if state == COMPLETED else NOT_READY, 0, ZERO_UUID]
        assert gpu["v2"] == [*gpu["v1"], 0]
        assert gpu["v3"] == [0, state, 0, 0]
    assert r["bad_version"] == VERSION_MISMATCH


@pytest.mark.parametrize("preset", ["1xH200-passthrough", "1xH200", "2xH100-PCIe", "2xH200-NVL", "1xGH200",
                                    "4xRTX-PRO-6000"])
def test_hopper_and_newer_without_a_fabric_answer_success_with_state_not_supported(
        nvml_sim: Callable[..., Any], preset: str) -> None:
    # the real H200 in a VM, driver 580.159.04: OK, every field 0
    sim = nvml_sim(preset)
    _running(sim, "nv-fabricmanager", "nvlsm")  # software that runs changes nothing without a fabric
    r = sim.run(READ_ALL)
    for gpu in r["gpus"]:
        assert gpu["v1"] == [0, STATE_NOT_SUPPORTED, 0, 0, ZERO_UUID]
        assert gpu["v2"] == [0, STATE_NOT_SUPPORTED, 0, 0, ZERO_UUID, 0]
        assert gpu["v3"] == [0, STATE_NOT_SUPPORTED, 0, 0]
    assert r["bad_version"] == VERSION_MISMATCH


@pytest.mark.parametrize("preset", ["8xA100", "1xT4", "2xL40S", "4xA30"])
def test_before_hopper_no_fabric_call_is_supported(nvml_sim: Callable[..., Any], preset: str) -> None:
    # INFERRED (no real transcript of the call before Hopper): the NVML reference says "Hopper or newer"
    sim = nvml_sim(preset)
    _running(sim, "nv-fabricmanager", "nvlsm")
    r = sim.run(READ_ALL)
    assert {(g["v1"][0], g["v2"][0], g["v3"][0]) for g in r["gpus"]} == {(NOT_SUPPORTED,) * 3}


def test_a_multinode_tray_completes_with_a_clique_and_a_cluster_uuid(nvml_sim: Callable[..., Any]) -> None:
    # GB200__xml__1: Completed, Success, a clique and a cluster UUID, Healthy; the switches and their fabric manager
    # are in other trays, so nothing needs to run on this host
    sim = nvml_sim("4xGB200")
    assert sim.read()["fabric"] == {"multinode": True}
    r = sim.run(READ_ALL)
    assert len(r["gpus"]) == 4
    for gpu in r["gpus"]:
        assert gpu["v1"][:3] == [0, COMPLETED, 0]
        assert gpu["v1"][3] != 0
        assert gpu["v1"][4] != ZERO_UUID
        assert gpu["v2"] == [*gpu["v1"], HEALTHY_MASK]
        assert gpu["v3"] == [0, COMPLETED, HEALTHY_MASK, HEALTH_SUMMARY_HEALTHY]
    # one fabric per host: every GPU shows the same clique and cluster; the identity does not change between reads
    assert len({tuple(g["v1"][3:]) for g in r["gpus"]}) == 1
    assert sim.run(READ_ALL)["gpus"][0]["v1"] == r["gpus"][0]["v1"]


def test_trays_have_their_own_cluster_uuid_unless_the_state_names_one(nvml_sim: Callable[..., Any]) -> None:
    a, b = nvml_sim("4xGB200", seed="host-a"), nvml_sim("4xGB200", seed="host-b")
    assert a.run(READ_ALL)["gpus"][0]["v1"][3:] != b.run(READ_ALL)["gpus"][0]["v1"][3:]
    for sim in (a, b):  # two trays of one NVL72 domain: the identity the state gives
        with sim.edit() as doc:
            doc["fabric"].update({"clique_id": 2, "cluster_uuid": "00000001-0000-0000-0000-000000000001"})
    for sim in (a, b):
        assert sim.run(READ_ALL)["gpus"][0]["v1"][3:] == [2, "00000001" + "0" * 22 + "01"]


def test_a_cluster_uuid_that_is_no_uuid_is_ignored(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("4xGB200")
    derived = sim.run(READ_ALL)["gpus"][0]["v1"][4]
    for bad in ("00000001-0000", "zz000001-0000-0000-0000-000000000001", "00000001-0000-0000-0000-00000000000102"):
        with sim.edit() as doc:
            doc["fabric"]["cluster_uuid"] = bad
        assert sim.run(READ_ALL)["gpus"][0]["v1"][4] == derived, bad


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


def test_fabric_stuck_holds_a_multinode_tray_gpu_in_progress(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("4xGB200")
    _gpusim(sim, "inject", "fabric-stuck", "-i", "1")
    gpus = sim.run(READ_ALL)["gpus"]
    assert [g["v1"][1] for g in gpus] == [COMPLETED, IN_PROGRESS, COMPLETED, COMPLETED]
    assert gpus[1]["v1"][2:] == [NOT_READY, 0, ZERO_UUID]


def test_a_down_nvlink_reports_degraded_bandwidth_on_a_multinode_tray(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("4xGB200")
    hardware.inject("nvlink-down", 1, {"link": 0}, sim.state_path)
    gpus = sim.run(READ_ALL)["gpus"]
    assert gpus[1]["v2"][5] == HEALTHY_MASK & ~0x3 | 1   # degraded bandwidth TRUE
    assert gpus[1]["v3"][3] == HEALTH_SUMMARY_LIMITED_CAPACITY
    assert gpus[0]["v2"][5] == HEALTHY_MASK
    assert gpus[0]["v3"][3] == HEALTH_SUMMARY_HEALTHY
