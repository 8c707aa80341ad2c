#!/usr/bin/python
# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Ansible module gpufleet.nvidia.gpu_fabric: every GPU's NVLink fabric state through NVML."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_fabric
short_description: Read every GPU's NVLink fabric registration (state, status, clique, cluster UUID) through NVML
version_added: "0.1.0"
description:
  - Reads C(nvmlDeviceGetGpuFabricInfoV) for every GPU. Hopper and newer GPUs behind NVSwitches register with the
    NVLink fabric; until their state is C(Completed) with status Success, CUDA fails with error 802.
  - GPUs without a fabric are listed with C(fabric) null and are not counted as incomplete; real drivers answer
    success with state Not Supported for them (older drivers and pre-Hopper GPUs the error NOT_SUPPORTED).
  - A single-node NVSwitch system completes with clique id 0 and a zero cluster UUID; only where some GPU of the
    host has a clique (a multi-node NVLink domain such as GB200 NVL72) are clique 0 and a zero UUID problems.
  - A fabric that NVML cannot read fails the module (never a pass).
  - Read-only. Needs the NVML Python bindings (run it with C(gpufleet_python)).
author:
  - gpufleet contributors
options: {}
extends_documentation_fragment:
  - gpufleet.nvidia.attributes.read_only
seealso:
  - module: gpufleet.nvidia.gpu_facts
"""

EXAMPLES = r"""
- name: Wait until every GPU's fabric is Completed
  gpufleet.nvidia.gpu_fabric:
  vars:
    ansible_python_interpreter: "{{ gpufleet_python }}"
  register: __fabric
  until: __fabric.incomplete | length == 0
  retries: 60
  delay: 5
"""

RETURN = r"""
gpus:
  description: One entry per GPU, in NVML index order.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: NVML index., type: int}
    uuid: {description: GPU UUID., type: str}
    pci_bus_id: {description: PCI bus id., type: str}
    fabric:
      description:
        - C(state) (C(Not Started), C(In Progress), C(Completed)), C(status) (an nvmlReturn_t, 0 is Success),
          C(clique_id), C(cluster_uuid), C(health_mask) and C(health_summary) (null where the driver has no v3
          struct); null where the GPU has no fabric.
      type: dict
    problems: {description: What is wrong with the GPU's fabric (empty when it is complete)., type: list}
incomplete:
  description: The GPUs (C(GPU <index> (<bus id>)) with their problems) whose fabric is not complete.
  returned: always
  type: list
  elements: str
fabric_gpu_count:
  description: Number of GPUs that have a fabric.
  returned: always
  type: int
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_fabric import (
    fabric_problems,
    multinode,
    read_fabric,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import NvmlError, nvml_session


def gather() -> dict[str, Any]:
    """Read every GPU's fabric; return the result keys."""
    gpus = []
    with nvml_session() as nvml:
        for index in range(nvml.device_count()):
            identity = nvml.gpu(index)
            gpus.append({"index": index, "uuid": identity["uuid"], "pci_bus_id": identity["pci_bus_id"],
                         "fabric": read_fabric(nvml, index)})
    multi = multinode([g["fabric"] for g in gpus])
    for gpu in gpus:
        gpu["problems"] = fabric_problems(gpu["fabric"], multi) if gpu["fabric"] is not None else []
    return {
        "gpus": gpus,
        "incomplete": [f"GPU {g['index']} ({g['pci_bus_id']}): {', '.join(g['problems'])}"
                       for g in gpus if g["problems"]],
        "fabric_gpu_count": sum(1 for g in gpus if g["fabric"] is not None),
    }


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    try:
        result = gather()
    except NvmlError as exc:
        module.fail_json(msg=f"gpu_fabric: cannot read the GPU fabric through NVML ({exc}); check the driver "
                             "with nvidia-smi.", nvml_error=exc.to_dict())
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
