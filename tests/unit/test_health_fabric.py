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


@pytest.mark.parametrize(("reading", "multinode", "problems"), [
    (fabric(), True, []),
    (fabric(state="In Progress", status=27, clique_id=0, cluster_uuid=ZERO), False, ["fabric state In Progress"]),
    (fabric(state="Not Started", status=27), False, ["fabric state Not Started"]),
    (fabric(status=999), False, ["fabric status 999 (not Success)"]),
    (fabric(health_summary="Unhealthy"), False, ["fabric health summary Unhealthy"]),
    # multi-node NVLink domain: clique and cluster UUID required (Azure MNNVL: clique 0 is a fault)
    (fabric(clique_id=0), True, ["clique id 0"]),
    (fabric(cluster_uuid=ZERO), True, ["cluster UUID zero"]),
    (fabric(clique_id=0, cluster_uuid=ZERO), True, ["clique id 0", "cluster UUID zero"]),
    # single-node HGX: clique 0 and a zero UUID are what a healthy system reports (H100_SXM_HGX__xml__1)
    (fabric(clique_id=0, cluster_uuid=ZERO), False, []),
])
def test_fabric_problems(reading: dict[str, Any], multinode: bool, problems: list[str]) -> None:
    assert hf.fabric_problems(reading, multinode) == problems


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


NO_FABRIC = {"state": "Not Supported", "status": 0, "clique_id": 0, "cluster_uuid": ZERO, "health_mask": 0,
             "health_summary": None}  # the real H200 in a one-GPU VM, 580.159.04 (tests/data/ground-truth)
NOT_READY = ("CUDA fails with error 802 until it completes: check nvidia-fabricmanager (and nvlsm on NVLink 5 HGX "
             "systems)")
MULTI = ("this GPU belongs to a multi-node NVLink domain (fabric_multinode_expected, IMEX configured or a clique on "
         "the host): check nvidia-imex, the NVLink switch trays and their fabric manager")


@pytest.mark.parametrize(("doc", "th", "status", "level", "action", "message"), [
    (gpu(fabric()), {"fabric_multinode_expected": True}, "ok", "PASS", "none",
     f"GPU fabric completed (clique 4026, cluster {CLUSTER})"),
    (gpu(fabric(state="In Progress", status=27, clique_id=0, cluster_uuid=ZERO)), {}, "fail", "CRITICAL", "drain",
     f"GPU fabric not ready (fabric state In Progress); {NOT_READY}"),
    (gpu(fabric(cluster_uuid=ZERO)), {"fabric_multinode_expected": True}, "fail", "CRITICAL", "drain",
     f"GPU fabric not ready (cluster UUID zero); {MULTI}"),
    (gpu(fabric(clique_id=0, cluster_uuid=ZERO)), {"fabric_multinode_expected": False}, "ok", "PASS", "none",
     "GPU fabric completed (single-node: clique 0, no cluster UUID)"),
    (gpu(fabric(status=45)), {}, "fail", "CRITICAL", "drain",
     f"GPU fabric not ready (fabric status 45 (not Success)); {NOT_READY}"),
    (gpu(fabric(health_summary="Unhealthy")), {"fabric_multinode_expected": True}, "fail", "CRITICAL", "drain",
     "GPU fabric not ready (fabric health summary Unhealthy); the driver says the fabric is unhealthy: check the "
     "NVLinks, NVSwitches and the fabric manager"),
    (gpu(fabric(health_mask=0x1A9)), {}, "warn", "WARNING", "none",
     f"GPU fabric completed (clique 4026, cluster {CLUSTER}) with degraded bandwidth: check the NVLinks"),
    (gpu(fabric(health_summary="Limited Capacity")), {}, "warn", "WARNING", "none",
     f"GPU fabric completed (clique 4026, cluster {CLUSTER}) with degraded bandwidth: check the NVLinks"),
    (gpu(NO_FABRIC), {}, "ok", "PASS", "none",
     "the GPU has no NVLink fabric (NVML: state Not Supported; nvidia-smi prints Fabric State N/A); not applicable"),
    (gpu(NO_FABRIC), {"nvswitch_expected": True}, "fail", "CRITICAL", "drain",
     "the driver reports no NVLink fabric for this GPU (NVML: state Not Supported) but NVSwitches are expected "
     "(nvswitch_expected): check the NVSwitches and nvidia-fabricmanager"),
    (gpu(unsupported=True), {}, "ok", "PASS", "none",
     "the GPU has no NVLink fabric (NVML: not supported; nvidia-smi prints Fabric State N/A); not applicable"),
    (gpu(error="nvmlDeviceGetGpuFabricInfoV failed: Unknown Error"), {}, "fail", "UNKNOWN", "none",
     "could not read fabric: nvmlDeviceGetGpuFabricInfoV failed: Unknown Error"),
    (gpu(None), {}, "fail", "UNKNOWN", "none", "fabric was not read; cannot check it"),
])
def test_check_fabric(doc: dict[str, Any], th: dict[str, Any], status: str, level: str, action: str,
                      message: str) -> None:
    got = hf.check_fabric(doc, th)
    assert (got["name"], got["status"], got["level"], got["action"], got["message"]) == (
        "fabric", status, level, action, message)
    assert got["gpu"] == {"index": 2, "uuid": "GPU-x", "pci_bus_id": "00000000:2A:00.0"}


def test_multinode_is_read_from_the_hosts_cliques() -> None:
    single = fabric(clique_id=0, cluster_uuid=ZERO)
    assert hf.multinode([single, single, None]) is False
    assert hf.multinode([single, fabric()]) is True
    assert hf.multinode([fabric(clique_id=0)]) is True  # a cluster UUID alone says a domain too


def test_cluster_uuid_text() -> None:
    assert hf.cluster_uuid_text(bytes.fromhex("9c6f5af353bf49b5a436b66766c413c3")) == CLUSTER
