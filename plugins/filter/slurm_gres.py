# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Filters of the slurm_gres role: a node's Slurm GPU GRES from its GPUs and MIG devices.

Slurm's NVML plugin (``gpu/nvml``, ``AutoDetect=nvml``) names a plain GPU by its NVML name in lower case with
blanks as ``_`` (``NVIDIA A100-SXM4-40GB`` -> ``nvidia_a100-sxm4-40gb``) and a MIG device by the GPU's name up to
the first ``-``, then ``_<GI slices>g.<GB>gb`` (``nvidia_a100_3g.20gb``). A GRES ``Type`` in ``slurm.conf`` or
``gres.conf`` must be a substring of that name; these filters use the full name, so no type matches two kinds.

A MIG device is one compute instance; its files are the parent's ``/dev/nvidia<minor>`` and the two capability
devices of its GPU instance and compute instance, whose minors the driver publishes in
``/proc/driver/nvidia-caps/mig-minors`` (``gpu<N>/gi<G>/access <minor>``, ``gpu<N>/gi<G>/ci<C>/access <minor>``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

_MINOR_LINE = re.compile(r"^(gpu\d+/gi\d+(?:/ci\d+)?)/access\s+(\d+)$")


def gpu_type(name: str) -> str:
    """Slurm's GRES type of a plain GPU called ``name`` by NVML."""
    if not isinstance(name, str) or not name.strip():
        raise AnsibleFilterError(f"slurm_gres: a GPU has no usable name ({name!r}); run gpu_facts with NVML")
    return "_".join(name.strip().lower().split())


def mig_type(name: str, profile: str) -> str:
    """Slurm's GRES type of a MIG device of profile ``profile`` (``3g.20gb``) on a GPU called ``name``."""
    match = re.match(r"^([1-9][0-9]*g\.[0-9]+gb)", str(profile))
    if not match:
        raise AnsibleFilterError(f"slurm_gres: MIG profile {profile!r} is not <slices>g.<GB>gb; check gpu_facts")
    return f"{gpu_type(name).split('-', 1)[0]}_{match.group(1)}"


def parse_mig_minors(text: str) -> dict[str, int]:
    """Read ``/proc/driver/nvidia-caps/mig-minors``: ``gpu0/gi1`` or ``gpu0/gi1/ci0`` -> minor."""
    minors = {}
    for line in str(text or "").splitlines():
        match = _MINOR_LINE.match(line.strip())
        if match:
            minors[match.group(1)] = int(match.group(2))
    return minors


def slurm_gres_devices(gpus: Sequence[Mapping[str, Any]], mig_minors: str | None = None) -> list[dict[str, Any]]:
    """One GRES device per plain GPU and per MIG device: ``name`` (gpu), ``type``, ``files`` (list), ``index``.

    ``gpus`` is gpu_facts' ``gpus`` (gathered with ``mig: true``); ``mig_minors`` the content of the driver's
    ``mig-minors`` file. ``None`` leaves the capability files out (what ``AutoDetect=nvml`` needs: only types);
    a text that lacks a MIG device's GPU or compute instance is an error (explicit lines need both files).
    """
    if not isinstance(gpus, Sequence) or isinstance(gpus, (str, bytes)):
        raise AnsibleFilterError("slurm_gres_devices: the input must be gpu_facts' list of GPUs")
    minors = parse_mig_minors(mig_minors)
    devices: list[dict[str, Any]] = []
    for gpu in gpus:
        if not isinstance(gpu, Mapping):
            raise AnsibleFilterError("slurm_gres_devices: every GPU must be a mapping from gpu_facts")
        index = int(gpu.get("index", len(devices)))
        dev = f"/dev/nvidia{int(gpu.get('minor_number', index))}"
        mig = gpu.get("mig") or {}
        if not (isinstance(mig, Mapping) and mig.get("current")):
            devices.append({"name": "gpu", "type": gpu_type(str(gpu.get("name", ""))), "files": [dev],
                            "index": index})
            continue
        for gi in gpu.get("gpu_instances") or []:
            for ci in gi.get("compute_instances") or []:
                files = [dev]
                for key in (f"gpu{index}/gi{gi['id']}", f"gpu{index}/gi{gi['id']}/ci{ci['id']}"):
                    if key in minors:
                        files.append(f"/dev/nvidia-caps/nvidia-cap{minors[key]}")
                    elif mig_minors is not None:
                        raise AnsibleFilterError(f"slurm_gres_devices: the driver's mig-minors has no {key}; "
                                                 "is the NVIDIA driver loaded with MIG support?")
                devices.append({"name": "gpu", "type": mig_type(str(gpu.get("name", "")), gi.get("profile", "")),
                                "files": files, "index": index})
    return devices


def slurm_gres_value(devices: Sequence[Mapping[str, Any]]) -> str:
    """The node's ``Gres=`` value: ``gpu:<type>:<count>`` per type, sorted by type (empty without devices)."""
    counts: dict[tuple[str, str], int] = {}
    for device in devices:
        key = (str(device["name"]), str(device["type"]))
        counts[key] = counts.get(key, 0) + 1
    return ",".join(f"{name}:{kind}:{n}" for (name, kind), n in sorted(counts.items()))


class FilterModule:
    """Filters of the slurm_gres role."""

    def filters(self) -> dict[str, Any]:
        """Return the filters."""
        return {"slurm_gres_devices": slurm_gres_devices, "slurm_gres_value": slurm_gres_value}
