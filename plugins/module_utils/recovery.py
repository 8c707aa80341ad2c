# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""The GPU's recovery action as the driver reports it: NVML field 230 (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``).

Read with ``nvmlDeviceGetFieldValues`` (R570 and newer drivers; the older fields 226/227 are deprecated). The values
are ``nvmlDeviceGpuRecoveryAction_t`` (nvml.h; NVIDIA's A100/H100 memory error management guide, "Recovery action
flag"). A driver without the field answers NOT_SUPPORTED: the check is not applicable there.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import FAIL, OK, _not_value, check

FIELD_ID = 230
# value: (NVIDIA's words, level, action on the ladder)
RECOVERY_ACTIONS: dict[int, tuple[str, str, str]] = {
    0: ("none", "PASS", "none"),
    1: ("GPU reset", "CRITICAL", "reset_gpu"),
    2: ("node reboot", "CRITICAL", "reboot"),
    3: ("drain P2P", "CRITICAL", "drain"),
    4: ("drain P2P and reset the GPU", "CRITICAL", "reset_gpu"),
    5: ("recover the IMEX domain", "CRITICAL", "drain"),
    6: ("reset the GPU's PCIe bus", "CRITICAL", "reset_gpu"),
    7: ("system reboot", "CRITICAL", "reboot"),
}


def check_recovery_action(gpu: dict[str, Any]) -> dict:
    """The driver's recovery action for this GPU: none passes, any other is CRITICAL with its action."""
    miss = _not_value("recovery_action", gpu, "recovery_action", "none")
    if miss:
        return miss
    value = int(gpu["values"]["recovery_action"])
    known = RECOVERY_ACTIONS.get(value)
    if known is None:
        return check("recovery_action", gpu, FAIL, value, "none",
                     f"the driver asks for recovery action {value}, unknown to gpufleet; see nvml.h "
                     "nvmlDeviceGpuRecoveryAction_t", level="UNKNOWN")
    words, level, action = known
    if level == "PASS":
        return check("recovery_action", gpu, OK, words, "none", "the driver asks for no recovery action")
    return check("recovery_action", gpu, FAIL, words, "none",
                 f"the driver asks for recovery action: {words} (NVML field {FIELD_ID})", level=level, action=action)
