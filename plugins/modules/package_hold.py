#!/usr/bin/python
# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Ansible module gpufleet.nvidia.package_hold: hold (or release) a list of Debian packages in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: package_hold
short_description: Hold or release several installed Debian packages at once, changing only those that differ
version_added: "0.3.0"
description:
  - Reads the dpkg selection of every package in O(names) with one C(dpkg-query), and sets those that differ from
    O(state) with one C(dpkg --set-selections). A converged host costs one module call, not one per package as a loop
    over M(ansible.builtin.dpkg_selections) does.
  - Packages that are not installed are left alone and listed in RV(not_installed) (a selection for a package dpkg
    does not know would be refused by dpkg).
author:
  - gpufleet contributors
options:
  names:
    description: The packages.
    type: list
    elements: str
    required: true
  state:
    description: V(held) - selection C(hold) (apt leaves them at their version); V(released) - selection C(install).
    type: str
    choices: [held, released]
    default: held
extends_documentation_fragment:
  - gpufleet.nvidia.attributes.changes
seealso:
  - module: ansible.builtin.dpkg_selections
"""

EXAMPLES = r"""
- name: Hold the driver packages at their version
  gpufleet.nvidia.package_hold:
    names: [nvidia-driver, nvidia-kernel-open-dkms, nvidia-fabricmanager]
    state: held
"""

RETURN = r"""
changed_packages:
  description: The packages whose selection was (in check mode - would be) changed.
  returned: always
  type: list
  elements: str
  sample: [nvidia-driver]
not_installed:
  description: The packages of O(names) that are not installed, left alone.
  returned: always
  type: list
  elements: str
"""

import re

from ansible.module_utils.basic import AnsibleModule

SELECTION = {"held": "hold", "released": "install"}
NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9]+)?\Z")


def selections(out: str) -> dict[str, tuple[str, bool]]:
    """``{package: (selection, installed)}`` from ``dpkg-query -W -f '${Package} ${Status}\\n'``."""
    found = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            found[fields[0]] = (fields[1], fields[3] in ("installed", "half-configured", "unpacked"))
    return found


def plan(names: list[str], current: dict[str, tuple[str, bool]], state: str) -> tuple[list[str], list[str]]:
    """(packages to change, packages not installed), each in the order of ``names``, without repeats."""
    wanted, change, absent = SELECTION[state], [], []
    for name in dict.fromkeys(names):
        selection, installed = current.get(name, ("", False))
        if not installed:
            absent.append(name)
        elif selection != wanted:
            change.append(name)
    return change, absent


def main() -> None:
    module = AnsibleModule(
        argument_spec={"names": {"type": "list", "elements": "str", "required": True},
                       "state": {"type": "str", "choices": list(SELECTION), "default": "held"}},
        supports_check_mode=True,
    )
    names, state = module.params["names"], module.params["state"]
    bad = [n for n in names if not NAME.match(n)]
    if bad:
        module.fail_json(msg=f"package_hold: {', '.join(repr(n) for n in bad)} is not a Debian package name. "
                             "Nothing was changed.")
    current: dict[str, tuple[str, bool]] = {}
    if names:
        # dpkg-query exits 1 when some name is unknown; the known ones are still printed.
        _, out, _ = module.run_command(["dpkg-query", "-W", "-f", "${Package} ${Status}\n", *names])
        current = selections(out)
    change, absent = plan(names, current, state)
    result = {"changed": bool(change), "changed_packages": change, "not_installed": absent}
    if module._diff and change:
        result["diff"] = {"before": "".join(f"{n} {current[n][0]}\n" for n in change),
                          "after": "".join(f"{n} {SELECTION[state]}\n" for n in change)}
    if change and not module.check_mode:
        data = "".join(f"{n} {SELECTION[state]}\n" for n in change)
        rc, out, err = module.run_command(["dpkg", "--set-selections"], data=data)
        if rc != 0:
            module.fail_json(msg=f"package_hold: dpkg --set-selections failed (exit {rc}): {(err or out).strip()}",
                             **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
