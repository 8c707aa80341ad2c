# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""gpu_health's ``nvlink`` check: a GPU's NVLinks against its model's numbers in :mod:`nvlink_models`.

NVML gives each link's state (``nvmlDeviceGetNvLinkState``, link 0 upwards until NVML says the link does not exist)
and each up link's speed (field ``NVML_FI_DEV_NVLINK_GET_SPEED``, 164, scope = link, MB/s): :func:`read_speeds`.
The verdict (:func:`check_nvlink`, pure, levels and actions as in :mod:`health_base`):

* NVSwitch boards (``switch``: HGX/DGX SXM, GB200): fewer links up than the model has is CRITICAL (drain): NCCL
  routes around the missing links or fails, and the job runs at a fraction of its speed on that node;
* boards whose links need bridges (``bridge``: PCIe A100/H100/H200 NVL...) or an NVLink switch system
  (``external``: GH200): no link up is not applicable (ok; no bridge fitted: the board is sold and run that way);
  some but not all up is a WARNING (a bridge missing or loose: the pair runs at part of its bandwidth); with
  ``nvlink_bridges_expected`` both are CRITICAL on bridge boards;
* an up link slower than the model's speed is a WARNING: the GPU works and NCCL uses the link, at a lower rate
  (a link trained down, or a reduced NVLink bandwidth mode set on purpose); the operator decides;
* a board without NVLink: not applicable (ok, saying so); a board the table does not know: WARNING, saying so;
* no NVLink reported on a board that has them: inside a VM (``nvmlDeviceGetVirtualizationMode`` Pass-Through or
  vGPU) not applicable, saying so - the hypervisor does not expose them to a guest that holds one GPU; on bare
  metal CRITICAL on NVSwitch boards and WARNING on bridge boards. ``nvlink_expected`` true requires the links
  wherever the GPU is (CRITICAL without them), false says none are expected;
* NVML could not read the links or their speed: UNKNOWN (fail closed), never ok.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvlink_models
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import (
    FAIL,
    OK,
    UNKNOWN,
    VIRTUALIZATION_GUEST,
    WARN,
    _not_value,
    _reading,
    check,
    virtualization_mode,
    worst,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import NvmlError

FI_DEV_NVLINK_GET_SPEED = 164  # nvml.h NVML_FI_DEV_NVLINK_GET_SPEED: per link (scopeId), MB/s
NAME = "nvlink"


def read_speeds(reader: Any, states: list[int]) -> list[int | None]:
    """The speed (MB/s) of every up link of ``states`` in one ``nvmlDeviceGetFieldValues`` call (None for a down
    link). ``reader`` is an ``nvml_health.GpuReader`` (its ``call`` turns GPU_IS_LOST into ``GpuLost``). An up link
    whose speed NVML does not give raises :class:`NvmlError` with NVML's code for that field."""
    if not states:
        return []
    fields = [(FI_DEV_NVLINK_GET_SPEED, link) for link in range(len(states))]
    values = reader.call("nvmlDeviceGetFieldValues", reader.handle, fields)
    speeds: list[int | None] = []
    for link, up in enumerate(states):
        rc = int(values[link].nvmlReturn)
        if not up:
            speeds.append(None)
        elif rc != 0:
            raise NvmlError("nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_GET_SPEED)", rc,
                            f"the speed of NVLink {link} could not be read (NVML return {rc})", reader.index)
        else:
            speeds.append(int(values[link].value.uiVal))
    return speeds


def _links(numbers: list[int]) -> str:
    return ("NVLink " if len(numbers) == 1 else "NVLinks ") + ", ".join(map(str, numbers))


def _not_applicable(gpu: dict[str, Any], value: Any, threshold: Any, message: str) -> dict:
    """A check that does not apply: status ok (nothing to fix), the message saying "not applicable" - as every check
    that does not apply to a GPU (health_base._not_value), so a host of such boards stays PASS."""
    return check(NAME, gpu, OK, value, threshold, message)


def _unknown_board(gpu: dict[str, Any], states: list[int]) -> dict:
    values = gpu.get("values", {})
    label = f"{values.get('name') or '?'} (PCI device id {gpu.get('pci_device_id') or '?'})"
    up = sum(1 for s in states if s)
    down = [i for i, s in enumerate(states) if not s]
    value = {"links": len(states), "up": up, "down": down}
    if 0 < up < len(states):
        return check(NAME, gpu, FAIL, value, None,
                     f"{_links(down)} down ({up}/{len(states)} up) on {label}, a board gpufleet's NVLink table does "
                     "not know: some links up and some down is never normal")
    return check(NAME, gpu, WARN, value, None,
                 f"{label} is not in gpufleet's NVLink table ({up}/{len(states)} links up), so its link count and "
                 "speed cannot be checked; add the board to plugins/module_utils/nvlink_models.py")


def _no_links(gpu: dict[str, Any], spec: nvlink_models.NvlinkSpec, threshold: Any, expected: bool | None) -> dict:
    """NVML reports no NVLink on a board that has some: what the host is decides (``expected`` None), or the
    operator (``nvlink_expected``). A GPU passed through alone to a VM has its NVLinks hidden from the guest (the
    real H200 in a one-GPU VM on 580.159.04: ``nvmlDeviceGetNvLinkState`` NOT_SUPPORTED, ``nvidia-smi nvlink -s``
    empty), while a whole HGX passed to one VM lists all 18 (AWS p5, ``H100_SXM_HGX__nvlink_status_partial__1``)."""
    mode = gpu.get("values", {}).get("virtualization_mode")
    guest = VIRTUALIZATION_GUEST.get(mode) if isinstance(mode, int) else None
    value = {"links": 0, "virtualization_mode": virtualization_mode(gpu)}
    if expected is False:
        return _not_applicable(gpu, value, threshold,
                               f"no NVLink reported on the {spec.model} and none expected (nvlink_expected false)")
    if expected is None and guest:
        return _not_applicable(gpu, value, threshold,
                               f"{guest}: its {spec.links} NVLinks are not exposed to this guest; not applicable "
                               "(set nvlink_expected to require them)")
    status = FAIL if expected or spec.wiring == nvlink_models.SWITCH else WARN
    why = " (nvlink_expected)" if expected else ""
    return check(NAME, gpu, status, value, threshold,
                 f"NVML reports no NVLink on a {spec.model}, which has {spec.links}{why}: check the driver")


def _speed_verdict(gpu: dict[str, Any], spec: nvlink_models.NvlinkSpec, states: list[int]
                   ) -> tuple[str, str | None, str | None, dict[int, int]]:
    """``(status, level, message or None, slow links {link: MB/s})`` of the up links' speeds."""
    kind, speeds = _reading(gpu, "nvlink_speed")
    if kind == "error":
        return FAIL, UNKNOWN, f"could not read the NVLink speeds: {speeds}", {}
    if kind == "unsupported":
        return WARN, None, "the driver does not report NVLink speeds (field 164), so they are not checked", {}
    if speeds is None or len(speeds) != len(states):
        return FAIL, UNKNOWN, "the NVLink speeds were not read; cannot check them", {}
    want = spec.speed_mbps
    slow = {link: int(speeds[link]) for link, up in enumerate(states) if up and int(speeds[link]) != want}
    if not slow:
        return OK, None, None, {}
    seen = ", ".join(f"{link} at {mbps} MB/s" for link, mbps in slow.items())
    return WARN, None, (f"NVLink {seen}, expected {want} MB/s ({spec.model}, NVLink {spec.generation}): trained "
                        "down, or a reduced NVLink bandwidth mode"), slow


def check_nvlink(gpu: dict[str, Any], th: dict[str, Any]) -> dict:
    """gpu_health's ``nvlink`` check (see the module docstring for the levels; ``th["nvlink_bridges_expected"]``
    makes a bridge board's missing links a failure, ``th["nvlink_expected"]`` says whether links must be there)."""
    bridges_expected = bool(th.get("nvlink_bridges_expected"))
    values = gpu.get("values", {})
    spec = nvlink_models.find(gpu.get("pci_device_id"), values.get("name"))
    threshold = ({"links": spec.links, "speed_mbps": spec.speed_mbps, "wiring": spec.wiring, "model": spec.model}
                 if spec else None)
    miss = _not_value(NAME, gpu, "nvlink", threshold)
    if miss and miss["status"] != OK:
        return miss  # NVML error, or not read: UNKNOWN
    states = [] if miss else [int(s) for s in values["nvlink"]]
    if spec is None:
        return _unknown_board(gpu, states)
    if spec.links == 0:
        if states:
            return check(NAME, gpu, WARN, {"links": len(states)}, threshold,
                         f"NVML reports {len(states)} NVLinks on a {spec.model}, which gpufleet's table says has "
                         "none: check the table (plugins/module_utils/nvlink_models.py)")
        return _not_applicable(gpu, {"links": 0}, threshold, f"the {spec.model} has no NVLink; not applicable")
    if not states:
        return _no_links(gpu, spec, threshold, th.get("nvlink_expected"))
    up = sum(1 for s in states if s)
    down = [i for i, s in enumerate(states) if not s]
    value: dict[str, Any] = {"links": len(states), "up": up, "down": down}
    optional = spec.wiring in nvlink_models.OPTIONAL
    if optional and up == 0 and bridges_expected and spec.wiring == nvlink_models.BRIDGE:
        return check(NAME, gpu, FAIL, value, threshold,
                     f"all {len(states)} NVLinks of the {spec.model} inactive, and NVLink bridges are expected "
                     "(nvlink_bridges_expected): fit or reseat the bridge")
    if optional and up == 0:
        fitted = "NVLink bridge" if spec.wiring == nvlink_models.BRIDGE else "NVLink switch system"
        return _not_applicable(gpu, value, threshold,
                     f"no {fitted} connected: all {len(states)} NVLinks of the {spec.model} inactive; not applicable "
                     f"(if one is fitted, reseat it)")
    parts: list[str] = []
    link_status = OK
    if up < spec.links:
        link_status = WARN if optional and not bridges_expected else FAIL
        why = ("a bridge missing or loose; the pair runs at part of its NVLink bandwidth" if optional else
               "NCCL falls back to slower paths; drain and check the baseboard")
        gone = f"{_links(down)} down" if down else f"only {len(states)} NVLinks reported"
        parts.append(f"{gone} ({up}/{spec.links} up): {why}")
    elif up > spec.links:
        link_status = WARN
        parts.append(f"{up} NVLinks up, more than the {spec.links} gpufleet's table gives the {spec.model}: check "
                     "the table (plugins/module_utils/nvlink_models.py)")
    speed_status, speed_level, speed_message, slow = _speed_verdict(gpu, spec, states)
    if speed_message:
        parts.append(speed_message)
    if slow:
        value["slow"] = slow
    status = worst([link_status, speed_status])
    if status == OK:
        return check(NAME, gpu, OK, value, threshold,
                     f"{up} of {spec.links} NVLinks up at {spec.speed_mbps} MB/s (NVLink {spec.generation})")
    level = speed_level if speed_level and link_status != FAIL else None  # a link down says more than UNKNOWN
    return check(NAME, gpu, status, value, threshold, "; ".join(parts), level=level)
