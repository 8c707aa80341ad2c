#!/usr/bin/python
# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Ansible module gpufleet.nvidia.gpu_facts: GPU inventory, MIG state and driver versions from NVML."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather NVIDIA GPU inventory, MIG state and driver/CUDA versions through NVML
version_added: "0.1.0"
description:
  - Reads every GPU the NVIDIA driver exposes through NVML (the pinned C(nvidia-ml-py) bindings) and returns
    identity (UUID, name, PCI ids, serial, VBIOS, memory), the MIG mode and the GPU/compute instances of each GPU,
    and the driver and CUDA versions.
  - The facts are set as C(ansible_facts.gpufleet_*) and returned in the result as well.
  - Read-only; never changes anything on the host.
  - Run it with the interpreter that has the bindings (C(ansible_python_interpreter={{ gpufleet_python }})).
author:
  - gpufleet contributors
options:
  mig:
    description:
      - Read the MIG mode and the GPU and compute instances (with MIG device UUIDs) of every GPU.
    type: bool
    default: true
  processes:
    description:
      - List the compute processes running on every GPU (PID, memory, GPU/compute instance).
    type: bool
    default: false
  require_driver:
    description:
      - When V(true), fail if NVML cannot be used (bindings or driver library missing, driver not loaded).
      - When V(false), return C(nvml_available=false) with an empty inventory and the reason instead, so that a
        play can decide what to do on a host without a working driver.
    type: bool
    default: true
requirements:
  - nvidia-ml-py == 13.615.71 on the managed host
  - an NVIDIA driver (libnvidia-ml.so.1)
extends_documentation_fragment:
  - gpufleet.nvidia.attributes.read_only
  - gpufleet.nvidia.attributes.facts
notes:
  - C(pci_device_id) uses the mig-parted spelling C(0xDDDDVVVV) (device id then vendor id, upper-case hex).
seealso:
  - module: gpufleet.nvidia.nvidia_mig
"""

EXAMPLES = r"""
- name: Gather GPU facts
  gpufleet.nvidia.gpu_facts:
  vars:
    ansible_python_interpreter: "{{ gpufleet_python }}"

- name: Show the MIG mode of every GPU
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpufleet_gpus | map(attribute='mig.current') | list }}"

- name: Inventory on a host that may not have a driver yet
  gpufleet.nvidia.gpu_facts:
    require_driver: false
    mig: false
  vars:
    ansible_python_interpreter: "{{ gpufleet_python }}"
  register: __gpus

- name: List what runs on the GPUs
  gpufleet.nvidia.gpu_facts:
    processes: true
  vars:
    ansible_python_interpreter: "{{ gpufleet_python }}"
"""

RETURN = r"""
ansible_facts:
  description: The facts set on the host.
  returned: always
  type: dict
  contains:
    gpufleet_gpus:
      description: Same as RV(gpus).
      type: list
      elements: dict
    gpufleet_gpu_count:
      description: Same as RV(gpu_count).
      type: int
    gpufleet_driver_version:
      description: Same as RV(driver_version).
      type: str
    gpufleet_cuda_version:
      description: Same as RV(cuda_version).
      type: str
    gpufleet_nvml_available:
      description: Same as RV(nvml_available).
      type: bool
    gpufleet_mig_capable:
      description: Same as RV(mig_capable).
      type: bool
gpus:
  description: One entry per GPU, in NVML index order.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: NVML index., type: int, sample: 0}
    uuid: {description: GPU UUID., type: str, sample: GPU-5b3a6c1e-0a1b-4c2d-8e3f-001122334455}
    name: {description: Marketing name., type: str, sample: NVIDIA H100 80GB HBM3}
    model:
      description: Key of the model in gpufleet's MIG profile table, null when the model is not in it.
      type: str
      sample: H100-SXM5-80GB
    pci_bus_id: {description: PCI bus id., type: str, sample: "00000000:18:00.0"}
    pci_device_id: {description: PCI device and vendor id (0xDDDDVVVV)., type: str, sample: "0x233010DE"}
    pci_subsystem_id: {description: PCI subsystem id (0xSSSSVVVV)., type: str, sample: "0x16C110DE"}
    serial: {description: Board serial (null where not reported)., type: str}
    vbios_version: {description: VBIOS version (null where not reported)., type: str}
    memory_total_mib: {description: Total memory in MiB., type: int, sample: 81559}
    minor_number: {description: Minor number of /dev/nvidiaN., type: int}
    compute_capability: {description: CUDA compute capability., type: str, sample: "9.0"}
    virtualization_mode:
      description:
        - C(nvmlDeviceGetVirtualizationMode) as nvidia-smi prints it - C(None) on bare metal, C(Pass-Through) for a
          GPU passed through to this VM, C(VGPU) for a vGPU in this VM, C(Host VGPU) on a vGPU host; null where the
          driver does not say.
      type: str
      sample: Pass-Through
    mig:
      description:
        - MIG mode (only with O(mig=true)) - C(supported), C(current) and C(pending) (booleans; C(current) and
          C(pending) differ while a mode change waits for a GPU reset).
      type: dict
    gpu_instances:
      description:
        - GPU instances (only with O(mig=true)), each with C(id), C(profile_id), C(profile) (C(3g.40gb)),
          C(start), C(size), C(slices) and C(compute_instances) (C(id), C(profile_id), C(profile), C(slices),
          C(start), C(size) and the MIG device C(uuid)).
        - This per-GPU shape is what the C(gpufleet.nvidia.mig_plan) filter and C(mig_to_mig_parted) read.
      type: list
      elements: dict
    mig_profiles:
      description:
        - The GPU's own GPU-instance profile table as NVML reports it (only with O(mig=true), MIG-capable GPUs) -
          C(enum), C(id), C(name) (C(1g.23gb)), C(slices) (compute slices), C(instances), C(memory_mib) and
          C(placements) (C([start, size]) pairs). The validator plans with it on the host, so a GPU missing from
          gpufleet's catalogue is still planned, and a layout is checked against what this driver offers.
        - When NVML would not give the table, it is empty and C(mig_profiles_error) says why.
      type: list
      elements: dict
    processes:
      description:
        - Compute processes (only with O(processes=true)) - C(pid), C(name), C(used_memory_mib), C(gi_id), C(ci_id).
      type: list
      elements: dict
gpu_count:
  description: Number of GPUs.
  returned: always
  type: int
  sample: 8
driver_version:
  description: NVIDIA driver version; null when NVML is not available.
  returned: always
  type: str
  sample: 550.163.01
cuda_version:
  description: Highest CUDA version the driver supports; null when NVML is not available.
  returned: always
  type: str
  sample: "12.4"
nvml_available:
  description: Whether NVML could be used.
  returned: always
  type: bool
mig_capable:
  description: Whether at least one GPU supports MIG.
  returned: always
  type: bool
nvml_error:
  description: Why NVML could not be used (only with O(require_driver=false)).
  returned: when NVML is unavailable
  type: dict
  contains:
    function: {description: The NVML call that failed., type: str}
    code: {description: The nvmlReturn_t value (null when the bindings are missing)., type: int}
    message: {description: The error text, with what to do., type: str}
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_apply import read_gpu
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import (
    NvmlError,
    NvmlUnavailable,
    nvml_session,
)


def gather(mig: bool, processes: bool) -> dict[str, Any]:
    """Read the inventory through NVML; return the result keys (without ``ansible_facts``)."""
    with nvml_session() as nvml:
        gpus = [read_gpu(nvml, i, mig=mig, processes=processes) for i in range(nvml.device_count())]
        if mig:
            capable = any(gpu["mig"]["supported"] for gpu in gpus)
        else:
            capable = any(nvml.mig_mode(gpu["index"]) is not None for gpu in gpus)
        return {
            "gpus": gpus,
            "gpu_count": len(gpus),
            "driver_version": nvml.driver_version(),
            "cuda_version": nvml.cuda_version(),
            "nvml_available": True,
            "mig_capable": capable,
        }


def facts_of(result: dict[str, Any]) -> dict[str, Any]:
    """The ``ansible_facts`` for a result."""
    keys = ("gpus", "gpu_count", "driver_version", "cuda_version", "nvml_available", "mig_capable")
    return {"gpufleet_" + key: result[key] for key in keys}


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(
        argument_spec={
            "mig": {"type": "bool", "default": True},
            "processes": {"type": "bool", "default": False},
            "require_driver": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    try:
        result = gather(module.params["mig"], module.params["processes"])
    except NvmlUnavailable as exc:
        if module.params["require_driver"]:
            module.fail_json(msg=str(exc), nvml_error=exc.to_dict())
        result = {"gpus": [], "gpu_count": 0, "driver_version": None, "cuda_version": None,
                  "nvml_available": False, "mig_capable": False,
                  "nvml_error": dict(exc.to_dict(), message=str(exc))}
    except NvmlError as exc:
        module.fail_json(msg=str(exc), nvml_error=exc.to_dict())
    module.exit_json(changed=False, ansible_facts=facts_of(result), **result)


if __name__ == "__main__":
    main()
