# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""A GPU's NVLink fabric as NVML reports it (nvmlDeviceGetGpuFabricInfoV), and what is wrong with it.

Hopper and newer GPUs behind NVSwitches (HGX H100/H200/B200/B300) and the GPUs of an NVL72 domain register with the
fabric: the fabric manager (and on NVLink 5 HGX systems the NVLink Subnet Manager before it) brings every GPU to
state Completed with status Success, a clique id and a cluster UUID. A GPU whose links look "up" but whose fabric is
not Completed cannot run CUDA (error 802, "system not yet initialized"; NVIDIA gpu-operator #2781), and other
health tools have missed it (NVSentinel #883). GPUs without a fabric answer NOT_SUPPORTED: ``read_fabric`` gives
None for them, never a pass.

Pure logic apart from :func:`raw_fabric` / :func:`read_fabric`; ``fabric_problems`` and ``check_fabric`` (the
gpu_health check, levels and actions as in :mod:`health_base`) are unit-tested as tables of cases.
"""

from __future__ import annotations

import ctypes
import uuid
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import FAIL, OK, WARN, _not_value, check

#: nvml.h nvmlGpuFabricState_t
STATES = {0: "Not Supported", 1: "Not Started", 2: "In Progress", 3: "Completed"}
COMPLETED = 3
ERROR_NOT_SUPPORTED = 3
#: nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*_DEGRADED_BW (shift 0, width 0x3)
HEALTH_MASK_DEGRADED_BW = 0x3
HEALTH_DEGRADED_BW_TRUE = 1


def cluster_uuid_text(raw: Any) -> str:
    """The 16 bytes of a cluster UUID as text (``9c6f5af3-53bf-49b5-a436-b66766c413c3``)."""
    return str(uuid.UUID(bytes=bytes(bytearray(raw))))


def raw_fabric(nvml: Any, index: int) -> dict[str, Any]:
    """The fabric of GPU ``index`` through an open ``nvml.Nvml`` session (``NvmlError`` NOT_SUPPORTED where the GPU
    has no fabric, as NVML answers). Uses the versioned call (v2: with the health mask) where the bindings have it,
    else the v1 call."""
    lib = nvml.lib
    handle = nvml.handle(index)
    versioned = hasattr(lib, "c_nvmlGpuFabricInfoV_t") and hasattr(lib, "nvmlDeviceGetGpuFabricInfoV")
    info = lib.c_nvmlGpuFabricInfoV_t() if versioned else lib.c_nvmlGpuFabricInfo_t()
    function = "nvmlDeviceGetGpuFabricInfoV" if versioned else "nvmlDeviceGetGpuFabricInfo"
    nvml.call(function, handle, ctypes.byref(info), gpu=index)
    state = int(info.state)
    return {
        "state": STATES.get(state, f"unknown state {state}"),
        "status": int(info.status),
        "clique_id": int(info.cliqueId),
        "cluster_uuid": cluster_uuid_text(info.clusterUuid),
        "health_mask": int(info.healthMask) if versioned else None,
    }


def read_fabric(nvml: Any, index: int) -> dict[str, Any] | None:
    """:func:`raw_fabric`, or None where the GPU has no fabric. Any other NVML failure is raised (a fabric that
    cannot be read is not ok)."""
    try:
        return raw_fabric(nvml, index)
    except Exception as exc:  # NvmlError (the caller's session raises it)
        if getattr(exc, "code", None) == ERROR_NOT_SUPPORTED:
            return None
        raise


def fabric_problems(fabric: dict[str, Any]) -> list[str]:
    """What is wrong with a GPU's fabric (empty when it is Completed/Success with a clique and a cluster)."""
    problems = []
    if fabric.get("state") != STATES[COMPLETED]:
        problems.append(f"fabric state {fabric.get('state')}")
        return problems
    if fabric.get("status") != 0:
        problems.append(f"fabric status {fabric.get('status')} (not Success)")
    if not fabric.get("clique_id"):
        problems.append("clique id 0")
    if not fabric.get("cluster_uuid") or fabric.get("cluster_uuid") == str(uuid.UUID(int=0)):
        problems.append("cluster UUID zero")
    return problems


def degraded_bandwidth(fabric: dict[str, Any]) -> bool:
    """Whether the health mask says the GPU's fabric bandwidth is degraded (nvml.h DEGRADED_BW TRUE, bits 0-1)."""
    mask = fabric.get("health_mask")
    return mask is not None and (int(mask) & HEALTH_MASK_DEGRADED_BW) == HEALTH_DEGRADED_BW_TRUE


def check_fabric(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """gpu_health's ``fabric`` check: where the GPU has a fabric, Completed/Success with a clique and a cluster UUID
    (CRITICAL, drain otherwise: CUDA cannot start); degraded bandwidth in the health mask is a WARNING. GPUs without
    a fabric pass as not applicable; a fabric NVML could not read is UNKNOWN."""
    del th
    threshold = "Completed/Success"
    miss = _not_value("fabric", gpu, "fabric", threshold)
    if miss:
        if miss["status"] == OK:
            miss["message"] = "the GPU has no NVLink fabric (no NVSwitch, or before Hopper); not applicable"
        return miss
    fabric = dict(gpu["values"]["fabric"])
    problems = fabric_problems(fabric)
    if problems:
        return check("fabric", gpu, FAIL, fabric, threshold,
                     f"GPU fabric not ready ({', '.join(problems)}); CUDA fails with error 802 until it completes: "
                     "check nvidia-fabricmanager (and nvlsm on NVLink 5 HGX systems)")
    if degraded_bandwidth(fabric):
        return check("fabric", gpu, WARN, fabric, threshold,
                     f"GPU fabric completed (clique {fabric['clique_id']}) with degraded bandwidth: check the NVLinks")
    return check("fabric", gpu, OK, fabric, threshold,
                 f"GPU fabric completed (clique {fabric['clique_id']}, cluster {fabric['cluster_uuid']})")
