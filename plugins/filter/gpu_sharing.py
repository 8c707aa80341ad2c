# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Filters of the nvidia_gpu_sharing role: validate the sharing variables and build the device plugin's config.

The document follows NVIDIA k8s-device-plugin's ``api/config/v1`` (``version: v1``, ``flags.migStrategy``,
``sharing.timeSlicing`` or ``sharing.mps`` with ``renameByDefault``, ``failRequestsGreaterThanOne`` and
``resources: [{name, replicas}]``). The plugin requires ``replicas >= 2`` per resource and refuses a config with
both ``timeSlicing`` and ``mps``; MPS shares full GPUs only (``nvidia.com/gpu``), time-slicing may also share MIG
devices (``nvidia.com/mig-<profile>``) under the ``mixed`` MIG strategy.
"""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

MIG_STRATEGIES = ("none", "single", "mixed")
SHARING_KEYS = ("rename_by_default", "fail_requests_greater_than_one", "resources")
RESOURCE_KEYS = ("name", "replicas")
_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-\d+g\.\d+gb(\+me)?$")
FULL_GPU = "nvidia.com/gpu"


def _resource_errors(kind: str, index: int, res: Any, mig_strategy: str) -> list[str]:
    where = f"nvidia_gpu_sharing_{kind}.resources[{index}]"
    if not isinstance(res, dict):
        return [f"{where} must be a mapping with name and replicas"]
    errors = [f"{where} has unknown key {key!r} (allowed: name, replicas)" for key in res if key not in RESOURCE_KEYS]
    name = res.get("name")
    replicas = res.get("replicas")
    if name != FULL_GPU and not (isinstance(name, str) and _MIG_RESOURCE.match(name)):
        errors.append(f"{where}.name must be {FULL_GPU} or nvidia.com/mig-<profile> (got {name!r})")
    elif name != FULL_GPU and kind == "mps":
        errors.append(f"{where}.name {name} is a MIG device: MPS sharing supports only {FULL_GPU}")
    elif name != FULL_GPU and mig_strategy != "mixed":
        errors.append(f"{where}.name {name} needs nvidia_gpu_sharing_mig_strategy mixed (got {mig_strategy})")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
        errors.append(f"{where}.replicas must be an integer >= 2 (got {replicas!r})")
    return errors


def _sharing_errors(kind: str, spec: Any, mig_strategy: str) -> list[str]:
    var = f"nvidia_gpu_sharing_{kind}"
    if not isinstance(spec, dict):
        return [f"{var} must be a mapping with resources (got {type(spec).__name__})"]
    errors = [f"{var} has unknown key {key!r} (allowed: {', '.join(SHARING_KEYS)})" for key in spec
              if key not in SHARING_KEYS]
    for key in ("rename_by_default", "fail_requests_greater_than_one"):
        if key in spec and not isinstance(spec[key], bool):
            errors.append(f"{var}.{key} must be true or false (got {spec[key]!r})")
    resources = spec.get("resources")
    if not isinstance(resources, list) or not resources:
        errors.append(f"{var}.resources must be a non-empty list of {{name, replicas}}")
        return errors
    for index, res in enumerate(resources):
        errors += _resource_errors(kind, index, res, mig_strategy)
    names = [r.get("name") for r in resources if isinstance(r, dict)]
    errors += [f"{var}.resources names {name} more than once" for name in sorted({n for n in names
                                                                                 if names.count(n) > 1})]
    return errors


def gpu_sharing_errors(time_slicing: Any, mps: Any, mig_strategy: str = "none") -> list[str]:
    """Return every problem with the sharing variables (empty when they are valid)."""
    errors = []
    if mig_strategy not in MIG_STRATEGIES:
        errors.append(f"nvidia_gpu_sharing_mig_strategy must be one of {', '.join(MIG_STRATEGIES)} "
                      f"(got {mig_strategy!r})")
    if time_slicing and mps:
        errors.append("nvidia_gpu_sharing_time_slicing and nvidia_gpu_sharing_mps are mutually exclusive: "
                      "the device plugin shares GPUs one way; set only one")
        return errors
    if time_slicing:
        errors += _sharing_errors("time_slicing", time_slicing, mig_strategy)
    if mps:
        errors += _sharing_errors("mps", mps, mig_strategy)
    return errors


def gpu_sharing_config(time_slicing: Any, mps: Any, mig_strategy: str = "none") -> dict[str, Any]:
    """Return the device plugin's config document (``version: v1``) for valid sharing variables.

    Raises:
        AnsibleFilterError: the variables are invalid (every problem, joined).
    """
    errors = gpu_sharing_errors(time_slicing, mps, mig_strategy)
    if errors:
        raise AnsibleFilterError("; ".join(errors))
    doc: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": mig_strategy}}
    kind, spec = ("mps", mps) if mps else ("timeSlicing", time_slicing)
    if spec:
        # MPS defaults failRequestsGreaterThanOne to true, time-slicing to false (api/config/v1/replicas.go).
        doc["sharing"] = {kind: {
            "renameByDefault": bool(spec.get("rename_by_default", False)),
            "failRequestsGreaterThanOne": bool(spec.get("fail_requests_greater_than_one", kind == "mps")),
            "resources": [{"name": r["name"], "replicas": int(r["replicas"])} for r in spec["resources"]],
        }}
    return doc


def gpu_sharing_strategy(time_slicing: Any, mps: Any) -> str:
    """The strategy label the plugin will advertise: ``mps``, ``time-slicing`` or ``none``."""
    if mps:
        return "mps"
    return "time-slicing" if time_slicing else "none"


class FilterModule:
    """Filters of the nvidia_gpu_sharing role."""

    def filters(self) -> dict[str, Any]:
        """Return the filters."""
        return {
            "gpu_sharing_errors": gpu_sharing_errors,
            "gpu_sharing_config": gpu_sharing_config,
            "gpu_sharing_strategy": gpu_sharing_strategy,
        }
