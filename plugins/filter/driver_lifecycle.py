# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""The NVIDIA driver branch against its lifecycle and the GPUs present (issue 17), as pure Python.

* ``gpu_architecture``: a GPU's architecture from its PCI device id (no driver needed), by the device-id ranges of
  NVIDIA's chips; ``unknown`` outside them.
* ``driver_branch_check``: one branch checked against the role's lifecycle table (``__nvidia_driver_lifecycle``:
  designation and end of life per branch, first/last branch and kernel module flavours per architecture) and the
  GPUs ``pci_devices`` found: a warning when the branch is past its end of life on the given date, an error when it
  does not support a GPU present or when the requested kernel module flavour cannot run one, and the flavour
  ``auto`` resolves to.
* ``driver_package_names``: the names, for one driver branch, of the packages that are locked to the driver version
  but are not the driver itself (fabric manager, NSCQ, NVLSM, IMEX), from ``PACKAGE_NAMES``.

The table itself lives in ``roles/nvidia_driver/vars/main.yml`` (one place, with its sources); this file holds only
the logic, so that it is unit-tested as a table of cases.
"""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

#: PCI device-id ranges of NVIDIA's GPU chips (inclusive), by architecture: the upper bits of the device id name the
#: chip family (GM10x/GM20x 0x13xx-0x17xx, GP10x 0x15F0-0x15FF and 0x1B00-0x1D7F, GV100 0x1D80-0x1DFF, TU10x
#: 0x1E00-0x1FFF and 0x2180-0x21FF, GA100 0x2000-0x20FF, GA10x 0x2200-0x22FF and 0x2400-0x25FF, GH100 0x2300-0x23FF,
#: AD10x 0x2600-0x28FF, GB10x/GB20x 0x2900-0x2FFF, B300 (0x3182) 0x3000-0x31FF). Grace Hopper superchips (GH200)
#: are listed by device id: they are Hopper GPUs that, unlike H100 boards, run only the open kernel modules.
GRACE_HOPPER_DEVICES = frozenset({0x2342, 0x2348})
DEVICE_RANGES: tuple[tuple[int, int, str], ...] = (
    (0x1340, 0x14FF, "Maxwell"),
    (0x15F0, 0x15FF, "Pascal"),
    (0x1600, 0x17FF, "Maxwell"),
    (0x1B00, 0x1D7F, "Pascal"),
    (0x1D80, 0x1DFF, "Volta"),
    (0x1E00, 0x1FFF, "Turing"),
    (0x2000, 0x20FF, "Ampere"),
    (0x2180, 0x21FF, "Turing"),
    (0x2200, 0x22FF, "Ampere"),
    (0x2300, 0x23FF, "Hopper"),
    (0x2400, 0x25FF, "Ampere"),
    (0x2600, 0x28FF, "Ada"),
    (0x2900, 0x31FF, "Blackwell"),
)
KERNEL_MODULES = ("open", "proprietary", "auto")
_MONTH = re.compile(r"^[0-9]{4}-(0[1-9]|1[0-2])$")
_BRANCH = re.compile(r"^[0-9]{3,4}$")


def gpu_architecture(device_id: Any) -> str:
    """The architecture of a GPU from its PCI device id (``0x2901``, or NVML's ``0x290110DE``); ``unknown`` when the
    id is outside the known ranges or not a hexadecimal id."""
    text = str(device_id).strip().lower()
    try:
        value = int(text, 16)
    except ValueError:
        return "unknown"
    if value > 0xFFFF:  # NVML's pci_device_id: device id in the upper 16 bits, vendor in the lower
        value >>= 16
    if value in GRACE_HOPPER_DEVICES:
        return "Grace Hopper"
    for low, high, name in DEVICE_RANGES:
        if low <= value <= high:
            return name
    return "unknown"


def _gpu_list(gpus: Any) -> list[tuple[str, str]]:
    if not isinstance(gpus, list):
        raise AnsibleFilterError(f"driver_branch_check takes the list of GPUs pci_devices returns, "
                                 f"not {type(gpus).__name__}")
    found = []
    for gpu in gpus:
        if not isinstance(gpu, dict):
            raise AnsibleFilterError(f"driver_branch_check: each GPU is a mapping with bus_id and device_id "
                                     f"(got {gpu!r})")
        found.append((str(gpu.get("bus_id", "?")), gpu_architecture(gpu.get("device_id", ""))))
    return found


def _where(gpus: list[tuple[str, str]], architecture: str) -> str:
    buses = [bus for bus, arch in gpus if arch == architecture]
    shown = ", ".join(buses[:4]) + (f" and {len(buses) - 4} more" if len(buses) > 4 else "")
    return f"{architecture} GPU{'s' if len(buses) > 1 else ''} at {shown}"


def driver_branch_check(lifecycle: Any, branch: Any, gpus: Any, today: Any, kernel_module: Any = "auto",
                        role: str = "nvidia_driver") -> dict[str, Any]:
    """Check a driver branch against the lifecycle table and the GPUs present.

    Args:
        lifecycle: ``{"branches": {branch: {designation, end_of_life (YYYY-MM), open_default}},
            "architectures": {name: {first, last, modules}}}``.
        branch: the pinned branch (``"580"``).
        gpus: ``pci_devices``' ``gpus`` (each with ``bus_id`` and ``device_id``).
        today: the controller's date, ``YYYY-MM-DD`` (or ``YYYY-MM``).
        kernel_module: ``open``, ``proprietary`` or ``auto``.
        role: the prefix of the messages.

    Returns:
        ``{"branch", "designation", "end_of_life", "past_end_of_life", "architectures", "kernel_module",
        "warnings", "errors"}``; ``kernel_module`` is the flavour to install (``auto`` resolved), ``errors`` the
        refusals (one sentence each, what is wrong and what to do), ``warnings`` what the operator should know.
    """
    if not isinstance(lifecycle, dict) or not isinstance(lifecycle.get("branches"), dict) \
            or not isinstance(lifecycle.get("architectures"), dict):
        raise AnsibleFilterError("driver_branch_check: the lifecycle table needs 'branches' and 'architectures' "
                                 "mappings")
    name = str(branch)
    if not _BRANCH.fullmatch(name):
        raise AnsibleFilterError(f"driver_branch_check: a branch is 3 or 4 digits such as 580 (got {name!r})")
    month = str(today)[:7]
    if not _MONTH.fullmatch(month):
        raise AnsibleFilterError(f"driver_branch_check: today is a date YYYY-MM-DD (got {today!r})")
    flavour = str(kernel_module)
    if flavour not in KERNEL_MODULES:
        raise AnsibleFilterError(f"driver_branch_check: kernel_module is one of {', '.join(KERNEL_MODULES)} "
                                 f"(got {flavour!r})")
    present = _gpu_list(gpus)
    number = int(name)
    info = lifecycle["branches"].get(name) or {}
    eol = str(info.get("end_of_life") or "")
    past = bool(eol) and month > eol
    prefix = f"{role}: " if role else ""
    long_term = [b for b, i in sorted(lifecycle["branches"].items(), key=lambda item: int(item[0]))
                 if "long-term" in str(i.get("designation", "")) and str(i.get("end_of_life", "")) >= month]
    advice = f" (long-term support: {', '.join(long_term)})" if long_term else ""
    warnings: list[str] = []
    errors: list[str] = []
    if not info:
        warnings.append(f"{prefix}driver branch {name} is not in the role's lifecycle table (a new feature branch or "
                        f"one the role does not know): its end of life is not checked. Production and long-term "
                        f"branches are listed in docs/roles.md{advice}.")
    elif past:
        warnings.append(f"{prefix}driver branch {name} ({info.get('designation', 'production')} branch) reached "
                        f"its end of life in {eol} and gets no more fixes; move nvidia_driver_branch to a supported "
                        f"branch{advice}.")
    architectures = sorted({arch for _, arch in present})
    table = lifecycle["architectures"]
    for arch in architectures:
        limits = table.get(arch)
        if not limits:
            continue
        first = int(limits.get("first") or 0)
        last = int(limits.get("last") or 0)
        if number < first:
            errors.append(f"{prefix}driver branch {name} does not support the {_where(present, arch)}; {arch} needs "
                          f"branch {first} or later. Set nvidia_driver_branch accordingly{advice}. Nothing was "
                          f"changed.")
        elif last and number > last:
            errors.append(f"{prefix}driver branch {name} does not support the {_where(present, arch)}; branch "
                          f"{last} is the last for {arch}. Set nvidia_driver_branch: \"{last}\". Nothing was "
                          f"changed.")
    # Which flavours every GPU present can run.
    runnable = {"open", "proprietary"}
    for arch in architectures:
        modules = (table.get(arch) or {}).get("modules")
        if modules:
            runnable &= set(modules)
    only = {arch: set((table.get(arch) or {}).get("modules") or ("open", "proprietary")) for arch in architectures}
    if flavour == "auto":
        if not runnable:
            resolved = ""
            errors.append(f"{prefix}no kernel module flavour runs all GPUs of this host ("
                          + "; ".join(f"{_where(present, a)}: {', '.join(sorted(m))} only"
                                      for a, m in only.items() if len(m) == 1)
                          + "); put them in different hosts. Nothing was changed.")
        elif len(runnable) == 1:
            resolved = runnable.pop()
        else:
            resolved = "open" if info.get("open_default", number >= 560) else "proprietary"
    else:
        resolved = flavour
        for arch, modules in only.items():
            if flavour not in modules:
                other = "open" if flavour == "proprietary" else "proprietary"
                errors.append(f"{prefix}the {_where(present, arch)} cannot run the {flavour} kernel modules; set "
                              f"nvidia_driver_kernel_module: {other} (or auto). Nothing was changed.")
    return {"branch": name, "designation": str(info.get("designation", "")), "end_of_life": eol,
            "past_end_of_life": past, "architectures": architectures, "kernel_module": resolved,
            "warnings": warnings, "errors": errors}


#: The companion packages locked to the driver's version, by the first branch that names them so (newest first).
#: NVIDIA's CUDA apt repository drops the branch suffix from R580 on and pins these packages by version instead:
#: ``nvidia-fabricmanager-<branch>`` -> ``nvidia-fabricmanager``, ``libnvidia-nscq-<branch>`` -> ``libnvidia-nscq``,
#: ``nvidia-imex-<branch>`` -> ``nvidia-imex``; ``nvlsm`` never had a suffix. Source: NVIDIA/gpu-driver-container,
#: ``ubuntu22.04/install.sh`` (``fabricmanager_install``, ``nscq_install``, ``imex_install``,
#: ``nvlink5_pkgs_install``: ``DRIVER_BRANCH -ge 580`` installs the unsuffixed names at ``<driver version>-1``).
#: ``{branch}`` is replaced by the branch.
PACKAGE_NAMES: tuple[tuple[int, dict[str, str]], ...] = (
    (580, {"fabricmanager": "nvidia-fabricmanager", "nscq": "libnvidia-nscq", "imex": "nvidia-imex",
           "nvlsm": "nvlsm"}),
    (0, {"fabricmanager": "nvidia-fabricmanager-{branch}", "nscq": "libnvidia-nscq-{branch}",
         "imex": "nvidia-imex-{branch}", "nvlsm": "nvlsm"}),
)


def driver_package_names(branch: Any) -> dict[str, str]:
    """The names of the fabric manager, NSCQ, NVLSM and IMEX packages of driver branch ``branch`` ("570", 580)."""
    name = str(branch).strip()
    if not _BRANCH.fullmatch(name):
        raise AnsibleFilterError(f"driver_package_names: {branch!r} is not a driver branch (three or four digits, "
                                 "such as 580)")
    names = next(row for first, row in PACKAGE_NAMES if int(name) >= first)
    return {kind: value.replace("{branch}", name) for kind, value in names.items()}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpu_architecture": gpu_architecture, "driver_branch_check": driver_branch_check,
                "driver_package_names": driver_package_names}
