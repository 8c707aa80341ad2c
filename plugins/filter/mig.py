# Copyright: (c) 2025, gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""MIG layout filters: validate and plan offline, import/export NVIDIA mig-parted configs.

Documentation for each filter lives beside this file (``mig_validate.yml``, ``mig_plan.yml``,
``mig_from_mig_parted.yml``, ``mig_to_mig_parted.yml``, ``mig_record_current.yml``), the layout
``ansible-doc -t filter`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_layout import LayoutError, validate
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_parted import (
    MigPartedError,
    export_gpus,
    from_mig_parted,
    to_mig_parted,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_planner import plan, summarize


def _plain(value: Any) -> Any:
    """Turn Ansible's tagged/lazy containers into plain dicts, lists and scalars."""
    if isinstance(value, Mapping):
        return {str(k) if not isinstance(k, (int, float)) else k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def _plain_input(value: Any, filter_name: str, what: str) -> Any:
    """``_plain(value)``; a structure nested too deeply is one clear error, not a RecursionError."""
    try:
        return _plain(value)
    except RecursionError:
        raise AnsibleFilterError(f"{filter_name}: {what} is nested too deeply to be a MIG layout or GPU list") from None


def _mapping_list(value: Any, filter_name: str, what: str, example: str) -> list[dict[str, Any]]:
    """A list of mappings (each GPU); anything else is one sentence naming the input and what is allowed."""
    value = _plain_input(value, filter_name, what)
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        shown = repr(value)
        shown = shown if len(shown) <= 120 else shown[:120] + "..."
        raise AnsibleFilterError(f"{filter_name}: {what} must be a list of mappings ({example}), got {shown}")
    return value


def mig_validate(layout: Any, gpus: Sequence[Mapping[str, Any]], name: str | None = None,
                 unmatched: str = "error") -> list[dict[str, Any]]:
    """Validate a layout (a list of entries, or the layouts map with ``name``) against a host's GPUs."""
    layout = _plain_input(layout, "mig_validate", "the layout")
    if isinstance(layout, Mapping):
        if name is None:
            raise AnsibleFilterError("mig_validate: the input is a map of layouts; pass name=<layout name>")
        if name not in layout:
            raise AnsibleFilterError(f"mig_validate: no MIG layout named '{name}'; defined: "
                                     f"{', '.join(sorted(layout)) or 'none'}")
        layout = layout[name]
    try:
        gpu_list = _mapping_list(gpus, "mig_validate", "the GPUs",
                                 "gpu_facts' gpus: index, model or name, pci_device_id")
        return [config.to_dict() for config in validate(layout, gpu_list, unmatched=unmatched)]
    except (LayoutError, ValueError) as exc:
        raise AnsibleFilterError(f"mig_validate: {exc}") from exc


def mig_plan(current: Sequence[Mapping[str, Any]], desired: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Plan the actions that take the GPUs in ``current`` (as NVML reports them) to ``desired``."""
    current = _mapping_list(current, "mig_plan", "the current GPUs", "gpu_facts' gpus with mig and gpu_instances")
    desired = _mapping_list(desired, "mig_plan", "the desired GPUs", "mig_validate's output")
    try:
        plans = plan(current, desired)
    except LayoutError as exc:
        raise AnsibleFilterError(f"mig_plan: {exc}") from exc
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError) as exc:
        # The planner reads what gpu_facts and mig_validate produce; anything else is named, not a traceback.
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise AnsibleFilterError("mig_plan: the GPUs are not in the form gpu_facts (current) and mig_validate "
                                 f"(desired) give ({detail}); pass gpu_facts' gpus and mig_validate's output"
                                 ) from exc
    gpus = [p.to_dict() for p in plans]
    return {"changed": any(p["changed"] for p in gpus), "reset_required": any(p["reset_required"] for p in gpus),
            "gpus": gpus, "summary": summarize(gpus)}


def mig_from_mig_parted(config: Any, label: str | None = None) -> Any:
    """mig-parted config (text or parsed) -> gpufleet layouts, or one label's entries."""
    try:
        return from_mig_parted(_plain(config), label)
    except MigPartedError as exc:
        raise AnsibleFilterError(f"mig_from_mig_parted: {exc}") from exc


def mig_to_mig_parted(data: Any, allow_lossy: bool = False, label: str = "current") -> dict[str, Any]:
    """gpufleet layouts (or per-GPU configs / NVML state) -> a mig-parted ``version: v1`` config."""
    data = _plain(data)
    try:
        if isinstance(data, list):
            return export_gpus(data, label=label, allow_lossy=allow_lossy)
        if not isinstance(data, Mapping):
            raise MigPartedError(f"expected a map of layouts or a list of GPUs, got {type(data).__name__}")
        return to_mig_parted(data, allow_lossy=allow_lossy)
    except (MigPartedError, ValueError) as exc:
        raise AnsibleFilterError(f"mig_to_mig_parted: {exc}") from exc


def mig_record_current(text: Any, desired: Any) -> bool:
    """Whether the state file's text is the record ``desired`` (a mapping), leaving out ``gpus``.

    ``gpus`` is what the GPUs showed when the record was written (their UUIDs change whenever instances are
    re-created); the rest is the intent and its state. Text that is not a JSON object is not current.
    """
    desired = _plain_input(desired, "mig_record_current", "the desired record")
    if not isinstance(desired, Mapping):
        raise AnsibleFilterError("mig_record_current: the desired record must be a mapping (the role's record), "
                                 f"got {type(desired).__name__}")
    try:
        record = json.loads(str(text))
    except (ValueError, RecursionError):
        return False
    if not isinstance(record, dict):
        return False
    return {k: v for k, v in record.items() if k != "gpus"} == {k: v for k, v in desired.items() if k != "gpus"}


class FilterModule:
    """gpufleet.nvidia MIG filters."""

    def filters(self) -> dict[str, Any]:
        """Filter name -> function."""
        return {
            "mig_validate": mig_validate,
            "mig_plan": mig_plan,
            "mig_from_mig_parted": mig_from_mig_parted,
            "mig_to_mig_parted": mig_to_mig_parted,
            "mig_record_current": mig_record_current,
        }
