# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Read a host's GPUs through NVML in the shape ``gpu_facts`` reports and the validator and planner read.

Split from :mod:`mig_apply` (which re-exports these names). Every MIG-capable GPU carries its own profile table
(``mig_profiles``, see :mod:`mig_host`): on a host, that table validates and plans the layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_host import HOST_TABLE_KEY
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_profiles import find_model
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml import Nvml, NvmlError


def read_gpu(nvml: Nvml, index: int, mig: bool = True, processes: bool = True) -> dict[str, Any]:
    """One GPU as ``gpu_facts`` reports it and the planner reads it: identity, ``model`` (gpufleet's table key),
    ``mig: {supported, current, pending}`` (booleans), ``gpu_instances`` (with ``profile`` names and the MIG
    device ``uuid`` of every compute instance), the GPU's own profile table ``mig_profiles`` (MIG-capable GPUs;
    ``mig_profiles_error`` says why when NVML would not give it) and ``processes``."""
    gpu = nvml.gpu(index)
    model = find_model(name=gpu["name"], pci_device_id=gpu["pci_device_id"])
    gpu["model"] = model.name if model else None
    if mig:
        state = nvml.mig_state(index)
        gpu["mig"] = {"supported": state["supported"], "current": state["current"], "pending": state["pending"]}
        gpu["gpu_instances"] = [
            {"id": gi["id"], "profile_id": gi["profile_id"], "profile": gi["profile_name"], "start": gi["start"],
             "size": gi["size"], "slices": gi["slices"],
             "compute_instances": [{"id": ci["id"], "profile_id": ci["profile_id"], "profile": ci["name"],
                                    "slices": ci["slices"], "start": ci["start"], "size": ci["size"],
                                    "uuid": ci["uuid"]} for ci in gi["compute_instances"]]}
            for gi in state["gpu_instances"]
        ]
        if state["supported"]:
            try:
                gpu[HOST_TABLE_KEY] = [dict(p) for p in nvml.gi_profiles(index)]
            except NvmlError as exc:  # the catalogue still knows the board, or validation names this error
                gpu[HOST_TABLE_KEY], gpu[HOST_TABLE_KEY + "_error"] = [], str(exc)
    if processes:
        gpu["processes"] = nvml.processes(index)
    return gpu


def read_host(nvml: Nvml, indexes: Sequence[int] | None = None, processes: bool = True) -> list[dict[str, Any]]:
    """Every GPU (or the ``indexes`` given) in planner form."""
    wanted = range(nvml.device_count()) if indexes is None else indexes
    return [read_gpu(nvml, i, processes=processes) for i in wanted]


def achieved(gpus: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The layout each GPU shows: ``[{index, uuid, model, enabled, pending, gpu_instances: [{profile_name, gi_id,
    start, size, compute_instances: [{name, ci_id, uuid}]}]}]`` (the shape the role records in mig-state.json
    and ``gpu_health`` compares with)."""
    return [{
        "index": gpu["index"], "uuid": gpu.get("uuid"), "model": gpu.get("model"),
        "enabled": bool(gpu["mig"]["current"]), "pending": bool(gpu["mig"]["pending"]),
        "gpu_instances": [{"profile_name": gi["profile"], "gi_id": gi["id"], "start": gi["start"], "size": gi["size"],
                           "compute_instances": [{"name": ci["profile"], "ci_id": ci["id"], "uuid": ci["uuid"]}
                                                 for ci in gi["compute_instances"]]}
                          for gi in gpu["gpu_instances"]],
    } for gpu in gpus]


def describe_gpu(gpu: Mapping[str, Any]) -> str:
    """One line for diffs: ``MIG on: 3g.40gb@0 [3g.40gb], 1g.10gb@6 [1g.10gb]``."""
    mig = gpu["mig"]
    if not mig["supported"]:
        return "MIG not supported"
    mode = "on" if mig["current"] else "off"
    if mig["current"] != mig["pending"]:
        mode += " (pending {} after a GPU reset)".format("on" if mig["pending"] else "off")
    parts = ["{}@{} [{}]".format(gi["profile"], gi["start"], ", ".join(ci["profile"] for ci in gi["compute_instances"]))
             for gi in gpu["gpu_instances"]]
    return f"MIG {mode}" + (": " + ", ".join(parts) if parts else "")


def diff_of(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Ansible diff: one line per GPU, before and after."""
    def text(gpus: Sequence[Mapping[str, Any]]) -> str:
        return "".join("GPU {} ({}): {}\n".format(g["index"], g.get("model") or g.get("name"), describe_gpu(g))
                       for g in gpus)
    return {"before": text(before), "after": text(after)}


def read_gpus_isolated(nvml: Nvml, indexes: Sequence[int], processes: bool = True
                       ) -> tuple[list[dict[str, Any]], dict[int, NvmlError]]:
    """Read each GPU on its own: ``(readable GPUs, {index: NvmlError} of those that cannot be read)``."""
    gpus, unreadable = [], {}
    for index in indexes:
        try:
            gpus.append(read_gpu(nvml, index, processes=processes))
        except NvmlError as exc:
            unreadable[index] = exc
    return gpus, unreadable
