#!/usr/bin/python
# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Ansible module gpufleet.nvidia.nvidia_mig: bring a host's GPUs to a MIG layout."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_mig
short_description: Apply a MIG layout (MIG mode, GPU and compute instances) to a host's NVIDIA GPUs
version_added: "0.1.0"
description:
  - Reads the MIG state of every GPU through NVML, validates the layout against the host's GPUs with gpufleet's
    validator, plans the smallest set of changes per GPU and applies only that difference.
  - "Each MIG-capable GPU is validated and planned against its own profile table, read from NVML
    (C(nvmlDeviceGetGpuInstanceProfileInfo), C(nvmlDeviceGetGpuInstancePossiblePlacements)): a GPU that
    gpufleet's catalogue does not know is planned from it, and a layout profile the GPU does not offer is refused
    before any change, naming the GPU, the profile and what the GPU offers."
  - "Order: every busy check first (a refused run changes nothing on any GPU), then MIG mode changes (instances
    of GPUs leaving MIG mode are destroyed first), one C(nvidia-smi -r -i <bus ids>) for the GPUs whose mode
    change waits for a reset, then compute and GPU instances that are not kept are destroyed, then GPU instances
    are created at explicit placements (C(nvmlDeviceCreateGpuInstanceWithPlacement)) with their compute
    instances."
  - After applying, the state is read back and planned again; anything left to do fails the task.
  - "Faults are isolated per GPU: GPUs are changed one at a time (each GPU's destroys immediately followed by its
    creates, GPUs that only gain instances first), a GPU whose NVML call fails, or that is lost or cannot be
    read, is left where the failure found it while the other GPUs still converge, and the task then fails
    naming it. RV(gpu_status) says per GPU done, failed or untouched."
  - GPU instances that the layout wants and that already exist are kept, wherever they are placed, when the
    rest of the layout still fits around them; so a GPU already in the layout is never touched.
  - Run it with the interpreter that has the NVML bindings (C(ansible_python_interpreter={{ gpufleet_python }}))
    and as root.
author:
  - gpufleet contributors
options:
  layout:
    description:
      - "The layout entries (the format of C(docs/mig.md), as C(gpufleet.nvidia.mig_validate) takes them), for
        example C([{devices: all, mig_enabled: true, gpu_instances: {3g.40gb: 2}}])."
      - Mutually exclusive with O(mig_parted_config).
    type: list
    elements: dict
  mig_parted_config:
    description:
      - "An NVIDIA mig-parted config (C(version: v1), C(mig-configs)), as a mapping or as YAML text; the label
        O(selected) is applied."
    type: raw
  selected:
    description:
      - The label of O(mig_parted_config) to apply; may be left out when the config has exactly one label.
    type: str
  allow_reset:
    description:
      - Reset the GPUs whose MIG mode change waits for a reset (Ampere, or a client held the GPU), with
        C(nvidia-smi -r -i <bus ids>), only those GPUs, then create their instances.
      - When V(false), such GPUs are left with the mode change pending, the task returns
        RV(reboot_required=true) and a message, and their instances are created by a later run after the reboot.
    type: bool
    default: true
  force_destroy_busy:
    description:
      - By default the task refuses, before changing anything on any GPU, when processes run on instances that
        must be destroyed or on a GPU whose MIG mode must change, and names the GPUs and PIDs.
      - V(true) goes on anyway (the busy processes are reported as a warning). The module never kills
        processes; NVML still refuses to destroy an instance while a process runs in it, so drain the workloads
        first (the C(mig_reconfigure.yml) playbook does with Slurm or Kubernetes).
    type: bool
    default: false
  gpus:
    description:
      - Only these GPU indexes are changed; the layout is still validated against every GPU of the host.
      - An index the host does not have, or one listed twice, fails before anything is read for planning.
    type: list
    elements: int
  lock_file:
    description:
      - The host lock that every gpufleet MIG writer takes (this module, C(gpufleet-mig-apply.service) at boot
        and the C(nvidia_mig) role's host-side transaction), with C(flock). Runs never interleave.
    type: path
    default: /run/gpufleet/mig.lock
  lock_timeout:
    description:
      - Seconds to wait for the host lock; then the task fails naming the holder (its pid and what it is) and
        changes nothing. V(0) refuses at once.
    type: int
    default: 300
requirements:
  - nvidia-ml-py == 13.615.71 on the managed host
  - an NVIDIA driver with MIG-capable GPUs; C(nvidia-smi) for GPU resets
extends_documentation_fragment:
  - gpufleet.nvidia.attributes.changes
notes:
  - The layout is checked with the same validator as the controller-side C(gpufleet.nvidia.mig_validate) filter;
    an invalid layout fails with the validator's message before anything is read for planning.
seealso:
  - module: gpufleet.nvidia.gpu_facts
  - role: gpufleet.nvidia.nvidia_mig
"""

EXAMPLES = r"""
- name: Two 3g.40gb instances on every GPU
  gpufleet.nvidia.nvidia_mig:
    layout:
      - devices: all
        mig_enabled: true
        gpu_instances: {"3g.40gb": 2}
  become: true
  vars:
    ansible_python_interpreter: "{{ gpufleet_python }}"

- name: Mixed layout, GPUs 0-3 without MIG, with compute instances on the 3g
  gpufleet.nvidia.nvidia_mig:
    layout:
      - devices: [0, 1, 2, 3]
        mig_enabled: false
      - devices: [4, 5, 6, 7]
        mig_enabled: true
        gpu_instances: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
        compute_instances: {"3g.40gb": ["1c.3g.40gb", "2c.3g.40gb"]}
  become: true
  vars:
    ansible_python_interpreter: "{{ gpufleet_python }}"

- name: Plan only (check mode) and show it
  gpufleet.nvidia.nvidia_mig:
    mig_parted_config: "{{ lookup('ansible.builtin.file', 'mig-parted-config.yaml') }}"
    selected: all-balanced
  check_mode: true
  become: true
  vars:
    ansible_python_interpreter: "{{ gpufleet_python }}"
  register: __mig_plan

- name: Enable MIG without resetting GPUs (reboot later)
  gpufleet.nvidia.nvidia_mig:
    layout: [{devices: all, mig_enabled: true, gpu_instances: {"1g.10gb": 7}}]
    allow_reset: false
  become: true
  vars:
    ansible_python_interpreter: "{{ gpufleet_python }}"
  register: __mig

- name: Say so when a reboot is needed
  ansible.builtin.debug:
    msg: "{{ __mig.msg }}"
  when: __mig.reboot_required
"""

RETURN = r"""
changed:
  description: Whether anything was changed (in check mode, would be).
  returned: always
  type: bool
msg:
  description: One sentence saying what changed, or why it failed.
  returned: always
  type: str
  sample: changed GPU(s) 4, 5
plan:
  description: The planned actions, one entry per managed GPU.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: GPU index., type: int}
    uuid: {description: GPU UUID., type: str}
    model: {description: GPU model key., type: str}
    changed: {description: Whether the GPU has actions., type: bool}
    reset_required: {description: Whether a MIG mode change needs a GPU reset., type: bool}
    note: {description: Why a GPU has no action (not MIG-capable, not managed)., type: str}
    actions:
      description:
        - Ordered actions - C(set_mig_mode) (C(mode)), C(destroy_ci) (C(gi_id), C(ci_id)), C(destroy_gi)
          (C(gi_id), C(profile), C(start)), C(create_gi) (C(profile), C(profile_id), C(start), C(size)),
          C(create_ci) (C(profile), C(gi_id) or the new GI's C(gi_profile)/C(gi_start)).
      type: list
      elements: dict
plan_summary:
  description: The plan as text, one line per GPU and one per action.
  returned: always
  type: str
desired:
  description: The validated layout per managed GPU (profiles, placements, compute instances).
  returned: always
  type: list
  elements: dict
actions:
  description:
    - The actions done, in order, each with C(gpu) and the ids created (C(gi_id), C(ci_id)); a C(reset) action
      lists C(gpus) and C(pci_bus_ids). In check mode, the actions that would be done.
  returned: always
  type: list
  elements: dict
layout:
  description:
    - The layout each managed GPU shows after the run (in check mode, now). The C(nvidia_mig) role records it in
      C(/etc/gpufleet/mig-state.json), where C(gpufleet.nvidia.gpu_health) compares the GPUs with it.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: GPU index., type: int}
    uuid: {description: GPU UUID., type: str}
    model: {description: GPU model key., type: str}
    enabled: {description: Current MIG mode., type: bool}
    pending: {description: MIG mode after the next GPU reset., type: bool}
    gpu_instances:
      description: GPU instances - C(profile_name), C(gi_id), C(start), C(size) and C(compute_instances) (C(name),
        C(ci_id) and the MIG device C(uuid)).
      type: list
      elements: dict
  sample:
    - index: 0
      uuid: GPU-5b3a6c1e-0a1b-4c2d-8e3f-001122334455
      model: A100-SXM4-80GB
      enabled: true
      pending: true
      gpu_instances:
        - {profile_name: 3g.40gb, gi_id: 1, start: 0, size: 4,
           compute_instances: [{name: 3g.40gb, ci_id: 0, uuid: MIG-1f2e3d4c-0000-5000-8000-000000000001}]}
profile_names:
  description:
    - Each profile name of the layout that the GPU's driver calls differently (a name variant in the catalogue's
      aliases, such as GB200's early C(1g.24gb), which production drivers print as C(1g.23gb)) - C(gpu),
      C(layout) (the layout's name) and C(driver) (the name the driver used). Empty when every name matched.
    - On a host the layout is validated against each GPU's own profile table, read from NVML; the msg repeats
      these pairs.
  returned: success
  type: list
  elements: dict
  sample:
    - {gpu: 0, layout: 1g.24gb, driver: 1g.23gb}
changed_gpus:
  description: Indexes of the GPUs that changed (would change in check mode).
  returned: success
  type: list
  elements: int
reboot_required:
  description: Whether a MIG mode change waits for a GPU reset or a reboot (O(allow_reset=false)).
  returned: always
  type: bool
reboot_required_gpus:
  description: Indexes of the GPUs whose MIG mode change waits for a reset or reboot.
  returned: success
  type: list
  elements: int
reset_gpus:
  description: Indexes of the GPUs that were reset.
  returned: success
  type: list
  elements: int
busy:
  description: GPUs where processes block the plan - C(gpu), C(uuid), C(reason), C(pids), C(processes).
  returned: always
  type: list
  elements: dict
diff:
  description: Per-GPU text before and after.
  returned: success
  type: dict
nvml_error:
  description: The failing NVML call (C(function), C(code), C(message), C(gpu)).
  returned: when an NVML call failed
  type: dict
gpu_status:
  description:
    - Per managed GPU - C(index), C(status) (C(done) changed and verified, C(failed), C(untouched) nothing done
      to it), C(lost) (NVML says the GPU is lost), C(reboot_required) and C(error) (the failure, or null).
    - On a failure the result carries only C(msg), C(error_type), C(gpu_status), C(actions), C(layout),
      C(busy), C(nvml_error), C(changed) and C(reboot_required) (not the plan).
  returned: when the layout was valid
  type: list
  elements: dict
  sample:
    - {index: 3, status: failed, lost: true, reboot_required: false,
       error: "nvmlDeviceGetHandleByIndex failed on GPU 3: GPU is lost (NVML error 15); ..."}
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils.command import run_command
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_apply import (
    MigApplyError,
    converge,
    host_lock,
    resolve_layout,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import NvmlError, nvml_session

ARGUMENT_SPEC: dict[str, Any] = {
    "layout": {"type": "list", "elements": "dict"},
    "mig_parted_config": {"type": "raw"},
    "selected": {"type": "str"},
    "allow_reset": {"type": "bool", "default": True},
    "force_destroy_busy": {"type": "bool", "default": False},
    "gpus": {"type": "list", "elements": "int"},
    "lock_file": {"type": "path", "default": "/run/gpufleet/mig.lock"},
    "lock_timeout": {"type": "int", "default": 300},
}
# What a failed run returns besides msg and error_type: enough to see what happened, not the whole plan.
FAILURE_KEYS = ("gpu_status", "actions", "layout", "busy", "nvml_error", "changed", "reboot_required")


def run(module: AnsibleModule) -> dict[str, Any]:
    """Resolve the layout, converge the host, return the result."""
    params = module.params
    entries = resolve_layout(params["layout"], params["mig_parted_config"], params["selected"])
    smi = module.get_bin_path("nvidia-smi") or "nvidia-smi"
    if params["lock_timeout"] < 0:
        module.fail_json(msg=f"lock_timeout must be 0 or more seconds, got {params['lock_timeout']}")
    with host_lock(params["lock_file"], params["lock_timeout"], "gpufleet.nvidia.nvidia_mig module"), \
            nvml_session() as nvml:
        return converge(nvml, entries, indexes=params["gpus"], allow_reset=params["allow_reset"],
                        force_destroy_busy=params["force_destroy_busy"], check_mode=module.check_mode,
                        run=lambda argv: run_command(module, argv), smi=smi)


def main() -> None:
    """Module entry point: typed errors become ``fail_json`` here, with the partial result."""
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("layout", "mig_parted_config")],
        required_one_of=[("layout", "mig_parted_config")],
        required_by={"selected": "mig_parted_config"},
        supports_check_mode=True,
    )
    try:
        result = run(module)
    except MigApplyError as exc:
        partial = {k: v for k, v in exc.partial.items() if k in FAILURE_KEYS}
        module.fail_json(msg=str(exc), error_type=type(exc).__name__, **partial)
    except NvmlError as exc:
        module.fail_json(msg=str(exc), error_type=type(exc).__name__, nvml_error=exc.to_dict())
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
