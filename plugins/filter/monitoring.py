# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Filters of the gpu_monitoring role: Prometheus file_sd targets of the GPU hosts, from the inventory.

The logic is ``plugins/module_utils/monitoring_targets.py`` (pure Python, unit-tested and fuzzed); these filters
only read the hosts' variables and turn its ``TargetError`` into the task's failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.module_utils.monitoring_targets import (
    TargetError,
    build_targets,
    host_record,
)


def monitoring_host_records(hosts: Sequence[str], hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One record per host of ``hosts`` from ``hostvars`` (group_names, addresses, nvidia_dcgm_*, MIG layout, GPUs)."""
    if not isinstance(hosts, Sequence) or isinstance(hosts, (str, bytes)):
        raise AnsibleFilterError(
            f"monitoring_host_records: the input must be a list of inventory hosts (got {hosts!r})")
    return [host_record(str(name), hostvars[name]) for name in hosts]


def monitoring_targets(records: Any, dcgm_listen_default: Any = "127.0.0.1:9400",
                       node_exporter_port: Any = 9100) -> dict[str, Any]:
    """``build_targets``: the dcgm-exporter and node_exporter target lists and warnings, or one failure naming all."""
    try:
        return build_targets(records, dcgm_listen_default, node_exporter_port)
    except TargetError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """gpu_monitoring filters."""

    def filters(self) -> dict[str, Any]:
        """Filter name -> function."""
        return {"monitoring_host_records": monitoring_host_records, "monitoring_targets": monitoring_targets}
