#!/usr/bin/python
# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Ansible module gpufleet.nvidia.rdma_facts: InfiniBand/RoCE ports and the PCIe distance from each GPU to each NIC."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_facts
short_description: Read the RDMA ports of a GPU node and which NIC is nearest to each GPU
version_added: "0.2.0"
description:
  - Reads every HCA the kernel lists under O(class_root) (C(/sys/class/infiniband)) and, per port, its state,
    physical state, rate (Gb/s, width and speed from the kernel's C(400 Gb/sec (4X NDR))), link layer, LIDs and the
    error counters the health checks read (C(symbol_error), C(link_downed), C(link_error_recovery),
    C(port_rcv_errors), C(excessive_buffer_overrun_errors), C(local_link_integrity_errors),
    C(port_rcv_remote_physical_errors), C(port_xmit_discards)) - the files C(ibstat) and C(ibstatus) read.
  - For each NVIDIA GPU on the PCI bus (O(pci_root), bus order as NVML enumerates), the HCAs sorted by PCIe distance
    with C(nvidia-smi topo -m)'s levels (V(PIX), V(PXB), V(PHB), V(NODE), V(SYS)), computed from the device paths
    in sysfs and their C(numa_node).
  - Whether C(nvidia_peermem) (GPUDirect RDMA) is loaded, from C(/sys/module/nvidia_peermem/initstate).
  - Read-only; needs only the Python standard library, no driver and no RDMA user space.
author:
  - gpufleet contributors
options:
  class_root:
    description: The folder with one entry per RDMA device. A missing folder means the host has no HCA.
    type: path
    default: /sys/class/infiniband
  pci_root:
    description: The PCI device folder (entries link into the PCIe hierarchy).
    type: path
    default: /sys/bus/pci/devices
  sys_module:
    description: The kernel's module folder.
    type: path
    default: /sys/module
extends_documentation_fragment:
  - gpufleet.nvidia.attributes.read_only
notes:
  - A value the module cannot read is V(null) and the port lists it in RV(hcas[].ports[].unreadable); a level it
    cannot compute (a device without a PCIe path in sysfs, a NUMA node of V(-1) across host bridges) is V(null).
seealso:
  - module: gpufleet.nvidia.pci_devices
  - module: gpufleet.nvidia.gpu_health
  - name: NVIDIA GPUDirect RDMA
    description: How GPUDirect RDMA works and the nvidia-peermem module.
    link: https://docs.nvidia.com/cuda/gpudirect-rdma/
"""

EXAMPLES = r"""
- name: Read the RDMA ports and the GPU-NIC pairing
  gpufleet.nvidia.rdma_facts:
  register: __rdma

- name: Show each GPU's nearest NIC
  ansible.builtin.debug:
    msg: "GPU {{ item.index }}: {{ item.nearest.hca }} at {{ item.nearest.level }}"
  loop: "{{ __rdma.gpus }}"
"""

RETURN = r"""
hcas:
  description: The HCAs, sorted by name.
  returned: always
  type: list
  elements: dict
  sample:
    - name: mlx5_0
      pci_bus_id: "0000:fe:00.0"
      fw_ver: 28.41.1000
      hca_type: MT4129
      node_guid: "946d:ae1a:c911:29c8"
      ports:
        - port: 1
          state: ACTIVE
          state_code: 4
          phys_state: LinkUp
          phys_state_code: 5
          rate: 400 Gb/sec (4X NDR)
          rate_gbps: 400.0
          width: 4
          speed: NDR
          link_layer: InfiniBand
          lid: "0x1"
          sm_lid: "0x1"
          counters: {symbol_error: 0, link_downed: 0, link_error_recovery: 0, port_rcv_errors: 0,
                     excessive_buffer_overrun_errors: 0, local_link_integrity_errors: 0,
                     port_rcv_remote_physical_errors: 0, port_xmit_discards: 0}
          unreadable: []
hca_count:
  description: Number of HCAs.
  returned: always
  type: int
port_count:
  description: Number of HCA ports.
  returned: always
  type: int
gpus:
  description:
    - Per NVIDIA GPU (bus order), the HCAs by PCIe distance; empty without HCAs.
    - C(nearest) is the first; when it is below the GPU's root port (V(PIX), V(PXB)) it has C(acs), per bridge between
      the two (each device's upstream bridges up to the one they share, as Linux's p2pdma walks them) - C(bridge),
      C(control) (the ACS control word, V(null) without an ACS capability), C(redirect) (P2P Request Redirect,
      Completion Redirect or Egress Control on) and C(error) (the configuration space could not be read).
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      pci_bus_id: "0000:18:00.0"
      numa_node: 0
      nearest: {hca: mlx5_0, level: PIX, acs: [{bridge: "0000:fb:00.0", control: 0, redirect: false, error: null}]}
      nics: [{hca: mlx5_0, level: PIX}, {hca: mlx5_1, level: NODE}, {hca: mlx5_4, level: SYS}]
nvidia_peermem_loaded:
  description: Whether nvidia_peermem is loaded; V(null) when the host has no C(/sys/module).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils.rdma import rdma_facts


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(
        argument_spec={"class_root": {"type": "path", "default": "/sys/class/infiniband"},
                       "pci_root": {"type": "path", "default": "/sys/bus/pci/devices"},
                       "sys_module": {"type": "path", "default": "/sys/module"}},
        supports_check_mode=True,
    )
    params = module.params
    module.exit_json(changed=False, **rdma_facts(params["class_root"], params["pci_root"], params["sys_module"]))


if __name__ == "__main__":
    main()
