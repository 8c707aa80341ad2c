"""gpu_health's fabric check and the fabric problems the nvidia_driver verification names, as tables of cases.

The readings are what nvmlDeviceGetGpuFabricInfoV gives (nvml.h): states Not Started / In Progress / Completed,
status 0 (NVML_SUCCESS), a clique id, a cluster UUID, and the health mask (degraded bandwidth in bits 0-1: 1 TRUE,
2 FALSE).
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_fabric as hf

CLUSTER = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
ZERO = "00000000-0000-0000-0000-000000000000"
GOOD = {"state": "Completed", "status": 0, "clique_id": 4026, "cluster_uuid": CLUSTER, "health_mask": 0x1AA}


def fabric(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


@pytest.mark.parametrize(("reading", "problems"), [
    (fabric(), []),
    (fabric(state="In Progress", status=27, clique_id=0, cluster_uuid=ZERO), ["fabric state In Progress"]),
    (fabric(state="Not Started", status=27), ["fabric state Not Started"]),
    (fabric(status=999), ["fabric status 999 (not Success)"]),
    (fabric(clique_id=0), ["clique id 0"]),
    (fabric(cluster_uuid=ZERO), ["cluster UUID zero"]),
    (fabric(clique_id=0, cluster_uuid=ZERO), ["clique id 0", "cluster UUID zero"]),
])
def test_fabric_problems(reading: dict[str, Any], problems: list[str]) -> None:
    assert hf.fabric_problems(reading) == problems


def gpu(reading: Any = None, unsupported: bool = False, error: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"index": 2, "uuid": "GPU-x", "pci_bus_id": "00000000:2A:00.0", "values": {},
                           "unsupported": [], "errors": {}}
    if unsupported:
        doc["unsupported"].append("fabric")
    elif error:
        doc["errors"]["fabric"] = error
    else:
        doc["values"]["fabric"] = reading
    return doc


@pytest.mark.parametrize(("doc", "status", "level", "action", "message"), [
    (gpu(fabric()), "ok", "PASS", "none", f"GPU fabric completed (clique 4026, cluster {CLUSTER})"),
    (gpu(fabric(state="In Progress", status=27, clique_id=0, cluster_uuid=ZERO)), "fail", "CRITICAL", "drain",
     "GPU fabric not ready (fabric state In Progress); CUDA fails with error 802 until it completes: check "
     "nvidia-fabricmanager (and nvlsm on NVLink 5 HGX systems)"),
    (gpu(fabric(cluster_uuid=ZERO)), "fail", "CRITICAL", "drain",
     "GPU fabric not ready (cluster UUID zero); CUDA fails with error 802 until it completes: check "
     "nvidia-fabricmanager (and nvlsm on NVLink 5 HGX systems)"),
    (gpu(fabric(health_mask=0x1A9)), "warn", "WARNING", "none",
     "GPU fabric completed (clique 4026) with degraded bandwidth: check the NVLinks"),
    (gpu(unsupported=True), "ok", "PASS", "none",
     "the GPU has no NVLink fabric (no NVSwitch, or before Hopper); not applicable"),
    (gpu(error="nvmlDeviceGetGpuFabricInfoV failed: Unknown Error"), "fail", "UNKNOWN", "none",
     "could not read fabric: nvmlDeviceGetGpuFabricInfoV failed: Unknown Error"),
    (gpu(None), "fail", "UNKNOWN", "none", "fabric was not read; cannot check it"),
])
def test_check_fabric(doc: dict[str, Any], status: str, level: str, action: str, message: str) -> None:
    got = hf.check_fabric(doc, {})
    assert (got["name"], got["status"], got["level"], got["action"], got["message"]) == (
        "fabric", status, level, action, message)
    assert got["gpu"] == {"index": 2, "uuid": "GPU-x", "pci_bus_id": "00000000:2A:00.0"}


def test_cluster_uuid_text() -> None:
    assert hf.cluster_uuid_text(bytes.fromhex("9c6f5af353bf49b5a436b66766c413c3")) == CLUSTER
