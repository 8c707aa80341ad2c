# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""What every health check is made of: statuses, levels, actions, the check document and how a reading is read.

Shared by :mod:`health_checks` (which re-exports these names), :mod:`recovery` and :mod:`health_commands`.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import VIRTUALIZATION as VIRTUALIZATION
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import virtualization_name

OK = "ok"
WARN = "warn"
FAIL = "fail"
_RANK = {OK: 0, WARN: 1, FAIL: 2}
# NVIDIA Health Validation's levels: what a status is when a check does not say more. UNKNOWN (the input could not
# be read) is always given explicitly, and is a fail: a check that cannot see is never green.
LEVEL_OF = {OK: "PASS", WARN: "WARNING", FAIL: "CRITICAL"}
UNKNOWN = "UNKNOWN"
DEFAULT_ACTION = {"PASS": "none", "INFO": "none", "WARNING": "none", "UNKNOWN": "none", "CRITICAL": "drain"}
#: the modes of a GPU seen from inside a VM, as the checks that cannot apply there name them
VIRTUALIZATION_GUEST = {1: "GPU passed through to a VM", 2: "vGPU in a VM"}


def worst(statuses: list[str]) -> str:
    """Return the worst of ``statuses`` (``ok`` for an empty list)."""
    return max(statuses, key=_RANK.__getitem__, default=OK)


def identity(gpu: dict[str, Any] | None) -> dict[str, Any] | None:
    """Return the ``{index, uuid, pci_bus_id}`` a check names its GPU with (None for host-wide checks)."""
    if gpu is None:
        return None
    return {"index": gpu.get("index"), "uuid": gpu.get("uuid"), "pci_bus_id": gpu.get("pci_bus_id")}


def check(name: str, gpu: dict[str, Any] | None, status: str, value: Any, threshold: Any, message: str,
          level: str | None = None, action: str | None = None, evidence: Any = None) -> dict:
    """Build one check result; ``level`` and ``action`` default from ``status`` (:data:`LEVEL_OF`)."""
    level = level or LEVEL_OF[status]
    return {"name": name, "gpu": identity(gpu), "status": status, "level": level,
            "action": action or DEFAULT_ACTION[level], "value": value, "threshold": threshold,
            "message": message, "evidence": evidence}


# --------------------------------------------------------------------------------------------------- readings


def _reading(gpu: dict[str, Any], metric: str) -> tuple[str, Any]:
    """Return ``(kind, value)`` with kind ``value`` | ``unsupported`` | ``error`` (value = message)."""
    if metric in gpu.get("errors", {}):
        return "error", gpu["errors"][metric]
    if metric in gpu.get("unsupported", []):
        return "unsupported", None
    return "value", gpu.get("values", {}).get(metric)


def _not_value(name: str, gpu: dict[str, Any], metric: str, threshold: Any) -> dict | None:
    """Return the check for an unreadable / unsupported metric, or None when there is a value."""
    kind, value = _reading(gpu, metric)
    if kind == "error":
        return check(name, gpu, FAIL, None, threshold, f"could not read {metric}: {value}", level=UNKNOWN)
    if kind == "unsupported":
        return check(name, gpu, OK, None, threshold, f"{metric} is not supported on this GPU; not applicable")
    if value is None:
        return check(name, gpu, FAIL, None, threshold, f"{metric} was not read; cannot check it", level=UNKNOWN)
    return None


def virtualization_mode(gpu: dict[str, Any]) -> str | None:
    """The GPU's virtualization mode as nvidia-smi prints it (None where NVML did not say)."""
    return virtualization_name(gpu.get("values", {}).get("virtualization_mode"))
