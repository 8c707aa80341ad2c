# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""A GPU's NVLink fabric as NVML reports it (nvmlDeviceGetGpuFabricInfoV), and what is wrong with it.

What the real drivers answer (``tests/data/ground-truth/``, ``docs/health.md`` "Where each check's meaning comes
from"), and so what each reading means:

* **No fabric** (PCIe boards, NVL-bridged pairs, GH200 alone, L40S, a GPU passed alone into a VM): the call
  succeeds with state ``NOT_SUPPORTED`` (0), status 0, clique 0 and a zero cluster UUID (the real H200 on
  580.159.04; leptonai/gpud #1147 on H100 PCIe), and ``nvidia-smi -q`` prints ``Fabric / State : N/A``. Older
  drivers and pre-Hopper GPUs may answer the error NOT_SUPPORTED instead. Both are "no fabric: not applicable".
* **A single-node NVSwitch system** (HGX H100/H200/B200 in one chassis): Completed, status Success, clique id 0 and
  an all-zero cluster UUID (``H100_SXM_HGX__xml__1``, driver 580.105.08; meta-pytorch/torchcomms #1385): healthy.
* **A multi-node NVLink domain** (GB200/GB300 NVL72, GH200 NVL32, with IMEX): Completed, Success, a non-zero clique
  and cluster UUID, health summary Healthy (``GB200__xml__1``). There clique 0 or a zero UUID is a fault
  (``Azure_MNNVL_unspecified__q_fabric_block__1``: Insufficient Resources, clique 0; Azure/azhpc-images #506), and
  so is a health summary Unhealthy with everything else fine (kubernetes-sigs/dra-driver-nvidia-gpu #626).
* **Not Started / In Progress**: the driver reports these only for a GPU that belongs to a fabric; until it
  completes CUDA fails with error 802, "system not yet initialized" (NVIDIA gpu-operator #2781; NVSentinel #889
  shows In Progress for days with the fabric manager down).

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
NOT_SUPPORTED_STATE = STATES[0]
COMPLETED = 3
ERROR_NOT_SUPPORTED = 3
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ZERO_UUID = str(uuid.UUID(int=0))
#: nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*_DEGRADED_BW (shift 0, width 0x3)
HEALTH_MASK_DEGRADED_BW = 0x3
HEALTH_DEGRADED_BW_TRUE = 1
#: nvml.h NVML_GPU_FABRIC_HEALTH_SUMMARY_* (nvmlGpuFabricInfo_v3_t.healthSummary)
HEALTH_SUMMARIES = {0: "Not Supported", 1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}


def cluster_uuid_text(raw: Any) -> str:
    """The 16 bytes of a cluster UUID as text (``9c6f5af3-53bf-49b5-a436-b66766c413c3``)."""
    return str(uuid.UUID(bytes=bytes(bytearray(raw))))


def _fabric_struct(nvml: Any, handle: Any, index: int) -> tuple[Any, int]:
    """The fabric struct NVML filled and its version (3 with the health summary, 2 with the health mask, 1).

    The v3 struct is asked first; a driver that predates it answers ARGUMENT_VERSION_MISMATCH and is asked for v2
    (the real H200 on 580.159.04 answered the v2 call)."""
    lib = nvml.lib
    if hasattr(lib, "nvmlDeviceGetGpuFabricInfoV"):
        for version, struct in ((3, "c_nvmlGpuFabricInfo_v3_t"), (2, "c_nvmlGpuFabricInfoV_t")):
            if not hasattr(lib, struct):
                continue
            info = getattr(lib, struct)()
            try:
                nvml.call("nvmlDeviceGetGpuFabricInfoV", handle, ctypes.byref(info), gpu=index)
            except Exception as exc:  # NvmlError (the caller's session raises it)
                if getattr(exc, "code", None) == ERROR_ARGUMENT_VERSION_MISMATCH and version == 3:
                    continue
                raise
            return info, version
    info = lib.c_nvmlGpuFabricInfo_t()
    nvml.call("nvmlDeviceGetGpuFabricInfo", handle, ctypes.byref(info), gpu=index)
    return info, 1


def raw_fabric(nvml: Any, index: int) -> dict[str, Any]:
    """The fabric of GPU ``index`` through an open ``nvml.Nvml`` session, as NVML answers it (``NvmlError``
    NOT_SUPPORTED where the driver answers so; a success with state ``Not Supported`` is returned as it is)."""
    info, version = _fabric_struct(nvml, nvml.handle(index), index)
    state = int(info.state)
    return {
        "state": STATES.get(state, f"unknown state {state}"),
        "status": int(info.status),
        "clique_id": int(info.cliqueId),
        "cluster_uuid": cluster_uuid_text(info.clusterUuid),
        "health_mask": int(info.healthMask) if version >= 2 else None,
        "health_summary": HEALTH_SUMMARIES.get(int(info.healthSummary)) if version >= 3 else None,
    }


def has_fabric(fabric: dict[str, Any] | None) -> bool:
    """Whether a reading describes a GPU that belongs to a fabric (not None, state not ``Not Supported``)."""
    return fabric is not None and fabric.get("state") != NOT_SUPPORTED_STATE


def read_fabric(nvml: Any, index: int) -> dict[str, Any] | None:
    """:func:`raw_fabric`, or None where the GPU has no fabric (NVML's error NOT_SUPPORTED, or a success with state
    ``Not Supported``). Any other NVML failure is raised (a fabric that cannot be read is not ok)."""
    try:
        fabric = raw_fabric(nvml, index)
    except Exception as exc:  # NvmlError (the caller's session raises it)
        if getattr(exc, "code", None) == ERROR_NOT_SUPPORTED:
            return None
        raise
    return fabric if has_fabric(fabric) else None


def multinode(fabrics: list[dict[str, Any] | None]) -> bool:
    """Whether a host's fabric readings show a multi-node NVLink domain: some GPU has a non-zero clique or cluster
    UUID (a single-node NVSwitch system reports clique 0 and a zero UUID on every GPU)."""
    return any(f and (f.get("clique_id") or f.get("cluster_uuid") not in (None, ZERO_UUID)) for f in fabrics)


def fabric_problems(fabric: dict[str, Any], multinode_expected: bool = False) -> list[str]:
    """What is wrong with a GPU's fabric: state not Completed, status not Success, a health summary of Unhealthy,
    and - only where the GPU belongs to a multi-node NVLink domain - clique id 0 or a zero cluster UUID."""
    if fabric.get("state") != STATES[COMPLETED]:
        return [f"fabric state {fabric.get('state')}"]
    problems = []
    if fabric.get("status") != 0:
        problems.append(f"fabric status {fabric.get('status')} (not Success)")
    if fabric.get("health_summary") == "Unhealthy":
        problems.append("fabric health summary Unhealthy")
    if multinode_expected:
        if not fabric.get("clique_id"):
            problems.append("clique id 0")
        if not fabric.get("cluster_uuid") or fabric.get("cluster_uuid") == ZERO_UUID:
            problems.append("cluster UUID zero")
    return problems


def degraded_bandwidth(fabric: dict[str, Any]) -> bool:
    """Whether the health mask says the GPU's fabric bandwidth is degraded (nvml.h DEGRADED_BW TRUE, bits 0-1)."""
    mask = fabric.get("health_mask")
    return mask is not None and (int(mask) & HEALTH_MASK_DEGRADED_BW) == HEALTH_DEGRADED_BW_TRUE


def _no_fabric(gpu: dict[str, Any], th: dict[str, Any], value: Any, threshold: str, how: str) -> dict:
    """A GPU the driver reports without a fabric: not applicable, unless the operator says NVSwitches are there."""
    if th.get("nvswitch_expected"):
        return check("fabric", gpu, FAIL, value, threshold,
                     f"the driver reports no NVLink fabric for this GPU ({how}) but NVSwitches are expected "
                     "(nvswitch_expected): check the NVSwitches and nvidia-fabricmanager")
    return check("fabric", gpu, OK, value, threshold,
                 f"the GPU has no NVLink fabric ({how}; nvidia-smi prints Fabric State N/A); not applicable")


def check_fabric(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """gpu_health's ``fabric`` check (the module docstring says what each reading means):

    * no fabric (NVML's NOT_SUPPORTED error, or success with state Not Supported): ok, not applicable - FAIL when
      ``nvswitch_expected`` says the host has NVSwitches;
    * Not Started / In Progress, status not Success, health summary Unhealthy: CRITICAL, drain;
    * clique 0 or a zero cluster UUID: CRITICAL only where a multi-node NVLink domain is expected
      (``th["fabric_multinode_expected"]``, which the module sets from the option or from what the host shows);
    * degraded bandwidth in the health mask, or health summary Limited Capacity: WARNING;
    * unreadable: UNKNOWN.
    """
    multi = bool(th.get("fabric_multinode_expected"))
    threshold = "Completed/Success" + (", clique and cluster UUID" if multi else "")
    miss = _not_value("fabric", gpu, "fabric", threshold)
    if miss:
        if miss["status"] == OK:
            return _no_fabric(gpu, th, None, threshold, "NVML: not supported")
        return miss
    fabric = dict(gpu["values"]["fabric"])
    if not has_fabric(fabric):
        return _no_fabric(gpu, th, fabric, threshold, "NVML: state Not Supported")
    problems = fabric_problems(fabric, multi)
    if problems:
        if problems[0].startswith(("clique", "cluster")):
            why = ("this GPU belongs to a multi-node NVLink domain (fabric_multinode_expected, IMEX configured or a "
                   "clique on the host): check nvidia-imex, the NVLink switch trays and their fabric manager")
        elif problems[0].startswith("fabric health"):
            why = "the driver says the fabric is unhealthy: check the NVLinks, NVSwitches and the fabric manager"
        else:
            why = ("CUDA fails with error 802 until it completes: check nvidia-fabricmanager (and nvlsm on NVLink 5 "
                   "HGX systems)")
        return check("fabric", gpu, FAIL, fabric, threshold, f"GPU fabric not ready ({', '.join(problems)}); {why}")
    where = (f"clique {fabric['clique_id']}, cluster {fabric['cluster_uuid']}" if multinode([fabric])
             else "single-node: clique 0, no cluster UUID")
    if degraded_bandwidth(fabric) or fabric.get("health_summary") == "Limited Capacity":
        return check("fabric", gpu, WARN, fabric, threshold,
                     f"GPU fabric completed ({where}) with degraded bandwidth: check the NVLinks")
    return check("fabric", gpu, OK, fabric, threshold, f"GPU fabric completed ({where})")
