#!/usr/bin/python
# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Ansible module gpufleet.nvidia.pcie_acs: clear ACS redirect on the bridges between each GPU and its nearest NIC."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pcie_acs
short_description: Clear PCIe ACS redirect between each GPU and its nearest RDMA NIC, so GPUDirect RDMA goes across
version_added: "0.3.0"
description:
  - Finds, for every NVIDIA GPU whose nearest HCA sits below the same root port (C(nvidia-smi topo -m) V(PIX) or
    V(PXB), as M(gpufleet.nvidia.rdma_facts) computes it), the bridges whose ACS decides whether peer-to-peer between
    the two goes straight across the PCIe switch - each device's upstream bridges up to the one they share, as Linux's
    C(drivers/pci/p2pdma.c) walks them.
  - Where one of them has P2P Request Redirect, P2P Completion Redirect or P2P Egress Control on (the bits
    C(pci_bridge_has_acs_redir) tests; a kernel booted with the IOMMU on sets the first two), clears those bits with
    C(setpci -s BDF ECAP_ACS+6.w=0000:002c) and reads them again. Source Validation and the other bits are left as
    they are, as the kernel's own C(pci=disable_acs_redir=) does.
  - Returns every ACS-capable bridge on those paths (RV(bridges)), so that a boot unit can clear them again at each
    boot (the kernel sets ACS at enumeration; NCCL's troubleshooting guide, "PCI Access Control Services", says it must
    be done again after each reboot).
  - Refuses, before any change, a bridge whose configuration space cannot be read (needs root).
author:
  - gpufleet contributors
options:
  redirect:
    description: V(disabled) - clear the redirect bits where they are set.
    type: str
    choices: [disabled]
    default: disabled
  class_root:
    description: The folder with one entry per RDMA device.
    type: path
    default: /sys/class/infiniband
  pci_root:
    description: The PCI device folder.
    type: path
    default: /sys/bus/pci/devices
extends_documentation_fragment:
  - gpufleet.nvidia.attributes.changes
notes:
  - ACS isolates devices from each other for the IOMMU; a host that passes GPUs or NICs to virtual machines, or runs
    tenants that must not reach each other's devices, needs it. Clear it only on bare-metal nodes that pair GPUs and
    NICs for GPUDirect RDMA.
seealso:
  - module: gpufleet.nvidia.rdma_facts
  - name: NCCL troubleshooting, PCI Access Control Services (ACS)
    description: Why ACS breaks GPU Direct and how setpci clears it.
    link: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs
"""

EXAMPLES = r"""
- name: Clear ACS redirect between the GPUs and their NICs
  gpufleet.nvidia.pcie_acs:
    redirect: disabled
  register: __acs
"""

RETURN = r"""
bridges:
  description: Every bridge with an ACS capability on a GPU-to-nearest-NIC path, sorted.
  returned: always
  type: list
  elements: str
  sample: ["0000:fb:00.0", "0000:fb:01.0"]
cleared:
  description: The bridges whose redirect bits were (in check mode - would be) cleared, with their control before.
  returned: always
  type: dict
  sample: {"0000:fb:00.0": "0x001d"}
paths:
  description: Per GPU with a NIC below its root port - C(gpu) (PCI bus id), C(hca) and the bridges between them.
  returned: always
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils import rdma

#: setpci's value:mask form: write zero into the redirect bits only
SETPCI_CLEAR = f"ECAP_ACS+6.w=0000:{rdma.ACS_REDIRECT:04x}"


def plan(class_root: str, pci_root: str) -> dict:
    """The paths, the ACS-capable bridges on them, the ones to clear (with their control), and unreadable ones."""
    paths, bridges, clear, unreadable = [], {}, {}, {}
    for gpu in rdma.gpu_nic_distances(pci_root, rdma.read_hcas(class_root)):
        nearest = gpu["nearest"] or {}
        if "acs" not in nearest:
            continue
        paths.append({"gpu": gpu["pci_bus_id"], "hca": nearest["hca"],
                      "bridges": [a["bridge"] for a in nearest["acs"]]})
        for acs in nearest["acs"]:
            if acs["error"]:
                unreadable[acs["bridge"]] = acs["error"]
            elif acs["control"] is not None:
                bridges[acs["bridge"]] = acs["control"]
                if acs["redirect"]:
                    clear[acs["bridge"]] = acs["control"]
    return {"paths": paths, "bridges": bridges, "clear": clear, "unreadable": unreadable}


def _lines(controls: dict) -> str:
    return "".join(f"{bridge}: ACSCtl 0x{control:04x} ({rdma.acs_flags(control)})\n"
                   for bridge, control in sorted(controls.items()))


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(
        argument_spec={"redirect": {"type": "str", "choices": ["disabled"], "default": "disabled"},
                       "class_root": {"type": "path", "default": "/sys/class/infiniband"},
                       "pci_root": {"type": "path", "default": "/sys/bus/pci/devices"}},
        supports_check_mode=True,
    )
    pci_root = module.params["pci_root"]
    found = plan(module.params["class_root"], pci_root)
    if found["unreadable"]:
        module.fail_json(msg="cannot read the ACS control of " + "; ".join(
            f"{bridge} ({why})" for bridge, why in sorted(found["unreadable"].items()))
            + ": run as root (become: true); nothing was changed")
    after = {bridge: control & ~rdma.ACS_REDIRECT if bridge in found["clear"] else control
             for bridge, control in found["bridges"].items()}
    result = {"changed": bool(found["clear"]), "bridges": sorted(found["bridges"]), "paths": found["paths"],
              "cleared": {bridge: f"0x{control:04x}" for bridge, control in sorted(found["clear"].items())}}
    if module._diff:
        result["diff"] = {"before": _lines(found["bridges"]), "after": _lines(after),
                          "before_header": "ACS on the GPU-NIC paths", "after_header": "ACS on the GPU-NIC paths"}
    if found["clear"] and not module.check_mode:
        setpci = module.get_bin_path("setpci", required=True)
        for bridge in sorted(found["clear"]):
            rc, _out, err = module.run_command([setpci, "-s", bridge, SETPCI_CLEAR])
            if rc != 0:
                module.fail_json(msg=f"setpci -s {bridge} {SETPCI_CLEAR} failed (rc {rc}): {err.strip()}", **result)
        left = plan(module.params["class_root"], pci_root)["clear"]
        if left:
            module.fail_json(msg="ACS redirect is still on after setpci: " + _lines(left).strip()
                             + f"; check that {os.path.join(pci_root, '<bus id>', 'config')} is writable", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
