#!/usr/bin/python
# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Ansible module gpufleet.nvidia.nvidia_mig_runtime: install the MIG code the boot unit runs without Ansible."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_mig_runtime
short_description: Install the collection's MIG module_utils for gpufleet-mig-apply (boot unit and transaction)
version_added: "0.1.0"
description:
  - Writes the module_utils that the C(gpufleet.nvidia.nvidia_mig) module runs (C(mig_apply), C(mig_layout),
    C(mig_planner), C(mig_parted), C(mig_profiles), C(mig_types), C(mig_entries), C(mig_gpus), C(mig_host), C(mig_read),
    C(nvml)), and C(command) (the C locale of its commands), under
    O(lib_dir)C(/ansible_collections/gpufleet/nvidia/plugins/module_utils/), where the C(gpufleet-mig-apply)
    entry point of the C(gpufleet.nvidia.nvidia_mig) role imports them.
  - The files are taken from this module's own payload (Ansible ships a module together with the module_utils it
    imports), so the host gets exactly the code of the collection version that runs the play, wherever the
    collection is installed; no path into the collection's tree is needed.
  - Only files whose content differs are written (mode 0644).
author:
  - gpufleet contributors
options:
  lib_dir:
    description:
      - The directory that is put on C(sys.path) by the entry point (its C(--lib), C(GPUFLEET_MIG_LIB)).
    type: path
    required: true
extends_documentation_fragment:
  - gpufleet.nvidia.attributes.changes
seealso:
  - module: gpufleet.nvidia.nvidia_mig
  - role: gpufleet.nvidia.nvidia_mig
"""

EXAMPLES = r"""
- name: Install the MIG code for the boot unit
  gpufleet.nvidia.nvidia_mig_runtime:
    lib_dir: /opt/gpufleet/lib
  become: true
"""

RETURN = r"""
files:
  description: The files this run wrote (would write in check mode).
  returned: always
  type: list
  elements: path
  sample: [/opt/gpufleet/lib/ansible_collections/gpufleet/nvidia/plugins/module_utils/mig_apply.py]
"""

import os
import pkgutil
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# Imported so that Ansible puts them in this module's payload (mig_apply imports the others; the entry point's
# commands take their locale from command).
from ansible_collections.gpufleet.nvidia.plugins.module_utils import command, mig_apply  # noqa: F401

PACKAGE = "ansible_collections.gpufleet.nvidia.plugins.module_utils"
FILES = ("command.py", "nvml.py", "mig_apply.py", "mig_layout.py", "mig_planner.py", "mig_parted.py",
         "mig_profiles.py", "mig_entries.py", "mig_gpus.py", "mig_host.py", "mig_read.py", "mig_types.py")


def sources() -> dict[str, bytes]:
    """The module_utils sources this module carries."""
    found = {}
    for name in FILES:
        data = pkgutil.get_data(PACKAGE, name)
        if data is None:
            raise OSError(f"{name} is not in the module's payload")
        found[name] = data
    return found


def main() -> None:
    """Module entry point."""
    module = AnsibleModule(argument_spec={"lib_dir": {"type": "path", "required": True}},
                           supports_check_mode=True)
    target = os.path.join(module.params["lib_dir"], *PACKAGE.split("."))
    written: list[str] = []
    diff: dict[str, Any] = {"before": "", "after": ""}
    try:
        for name, data in sources().items():
            path = os.path.join(target, name)
            try:
                with open(path, "rb") as handle:
                    same = handle.read() == data
            except FileNotFoundError:
                same = False
            if same:
                continue
            written.append(path)
            diff["before"] += f"{path}: {'differs' if os.path.exists(path) else 'absent'}\n"
            diff["after"] += f"{path}: the collection's version\n"
            if module.check_mode:
                continue
            os.makedirs(target, mode=0o755, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target, prefix=f".{name}.")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
    except OSError as exc:
        module.fail_json(msg=f"cannot install the MIG module_utils under {target}: {exc}", files=written)
    module.exit_json(changed=bool(written), files=written, diff=diff)


if __name__ == "__main__":
    main()
