# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Prometheus file_sd scrape targets for gpufleet's GPU hosts, from the inventory (the ``gpu_monitoring`` role).

Pure Python: the input is one plain record per GPU host (``host_record`` reads it from a host's variables), the output
is the two target lists Prometheus' file-based service discovery reads (a list of ``{"targets": [...], "labels":
{...}}``). Every string that lands in a label or an address is checked first and every problem of every host is
reported at once (``TargetError``), so nothing is written from an inventory with one bad value.

Labels of every target: ``host`` (the inventory name), ``groups`` (the host's groups, sorted, between commas as
Prometheus' own list labels are, ``,ampere,gpu_nodes,``, so ``groups=~".*,ampere,.*"`` matches a group exactly),
``exporter`` (``dcgm-exporter`` or ``node_exporter``: the rules select on it, whatever the operator calls the jobs),
and when known ``gpu_model`` (the GPUs' NVML names from ``gpu_facts``, sorted, comma-joined; omitted when the facts
were not gathered) and ``mig_layout`` (the host's ``nvidia_mig_layout``; omitted when null).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: the label values of the ``exporter`` label
DCGM_EXPORTER = "dcgm-exporter"
NODE_EXPORTER = "node_exporter"

#: inventory host names: letters, digits and . _ - (and : for a literal IPv6 address)
_HOST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}$")
#: Ansible's valid group names
_GROUP = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: NVML's marketing names (``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-80GB``); no comma, it joins several
_GPU_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()/+-]{0,127}$")
#: MIG layout names (keys of nvidia_mig_layouts, mig-parted labels such as ``all-1g.10gb``)
_LAYOUT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
#: a DNS name
_DNS = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?$")
#: what an exporter's listen host may be to mean "every address of the host"
_WILDCARD = {"", "0.0.0.0", "::", "[::]"}
#: listen hosts only the host itself can reach
_THIS_HOST_ONLY = {"127.0.0.1", "localhost", "::1", "[::1]"}
_NOT_LABELS = {"all", "ungrouped"}


class TargetError(ValueError):
    """Inventory values that cannot become scrape targets; ``problems`` has one sentence each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("gpu_monitoring: " + "; ".join(self.problems) + ". Nothing was written.")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _address(value: Any) -> str | None:
    """``value`` as a host part of a target (an IPv6 address bracketed), or None when it is not one."""
    if not isinstance(value, str):
        return None
    text = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return value if _DNS.fullmatch(value) else None
    return f"[{ip}]" if ip.version == 6 else str(ip)


def _listen(value: Any) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port``, ``:port``) -> (host, port), or None when it is not one."""
    if not isinstance(value, str):
        return None
    match = re.fullmatch(r"^(\[[0-9A-Fa-f:.]+\]|[^:\[\]]*):([0-9]{1,5})$", value)
    if not match or not 1 <= int(match.group(2)) <= 65535:
        return None
    host = match.group(1)
    if host in _WILDCARD:
        return host, int(match.group(2))
    shown = _address(host)
    return (shown, int(match.group(2))) if shown is not None else None


def _port(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    try:
        port = int(value)
    except ValueError:
        return None
    return port if 1 <= port <= 65535 else None


def _target(name: str, record: Mapping[str, Any], dcgm_listen_default: str, node_exporter_port: int,
            problems: list[str], warnings: list[str]) -> tuple[dict[str, str], str, str | None] | None:
    """One host's labels, node_exporter target and dcgm-exporter target (None when off); problems appended."""
    before = len(problems)
    address_var = "gpu_monitoring_address" if record.get("address_var") == "gpu_monitoring_address" else (
        "ansible_host" if record.get("address_var") == "ansible_host" else "inventory_hostname")
    address = _address(record.get("address", name))
    if address is None:
        problems.append(f"{name}: {address_var} is not an IP address or DNS name (got {_shown(record.get('address'))});"
                        " set gpu_monitoring_address to the address Prometheus scrapes the host on")
    groups = record.get("groups", [])
    if not isinstance(groups, Sequence) or isinstance(groups, (str, bytes)):
        problems.append(f"{name}: group_names is not a list of groups (got {_shown(groups)})")
        groups = []
    for group in groups:
        if not isinstance(group, str) or not _GROUP.fullmatch(group):
            problems.append(f"{name}: group {_shown(group)} cannot be a label value; name groups with letters, digits"
                            " and _ only")
    labels = {"host": name, "groups": "," + ",".join(sorted({g for g in groups if g not in _NOT_LABELS})) + ","}
    gpu_names = record.get("gpu_names")
    if gpu_names is not None:
        if not isinstance(gpu_names, Sequence) or isinstance(gpu_names, (str, bytes)):
            problems.append(f"{name}: ansible_facts.gpufleet_gpus is not gpu_facts' list of GPUs "
                            f"(got {_shown(gpu_names)}); gather the facts again")
        else:
            bad = [n for n in gpu_names if not isinstance(n, str) or not _GPU_NAME.fullmatch(n)]
            if bad:
                problems.append(f"{name}: the GPU name {_shown(bad[0])} in ansible_facts.gpufleet_gpus cannot be a "
                                "label value (letters, digits, blanks and . _ ( ) / + - only); gather the facts again")
            elif gpu_names:
                labels["gpu_model"] = ",".join(sorted(set(gpu_names)))
    layout = record.get("mig_layout")
    if layout is not None:
        if not isinstance(layout, str) or not _LAYOUT.fullmatch(layout):
            problems.append(f"{name}: nvidia_mig_layout cannot be a label value (got {_shown(layout)}); name layouts "
                            "with letters, digits and . _ - only")
        else:
            labels["mig_layout"] = layout
    dcgm: str | None = None
    enabled = record.get("dcgm_exporter_enabled", True)
    if enabled is None:
        enabled = True
    if not isinstance(enabled, bool):
        problems.append(f"{name}: nvidia_dcgm_exporter_enabled must be true or false (got {_shown(enabled)})")
    elif enabled:
        listen_value = record.get("dcgm_exporter_listen")
        listen = _listen(dcgm_listen_default if listen_value is None else listen_value)
        if listen is None:
            problems.append(f"{name}: nvidia_dcgm_exporter_listen is not host:port (got {_shown(listen_value)}); set it"
                            " as the nvidia_dcgm role reads it, e.g. 0.0.0.0:9400")
        elif address is not None:
            host, port = listen
            dcgm = f"{address if host in _WILDCARD else host}:{port}"
            if host in _THIS_HOST_ONLY:
                warnings.append(f"{name}: dcgm-exporter listens on {host}:{port} (nvidia_dcgm_exporter_listen), which "
                                "only the host itself can reach; open it (e.g. 0.0.0.0:9400) unless Prometheus runs "
                                "there")
    if len(problems) > before or address is None:
        return None
    return labels, f"{address}:{node_exporter_port}", dcgm


def build_targets(records: Any, dcgm_listen_default: Any = "127.0.0.1:9400",
                  node_exporter_port: Any = 9100) -> dict[str, Any]:
    """The file_sd target lists of GPU hosts: ``{"dcgm_exporter": [...], "node_exporter": [...], "warnings": [...]}``.

    ``records`` is a list of dicts with ``host`` (the inventory name), ``groups``, ``address`` and ``address_var``
    (the variable it came from, named in errors), ``dcgm_exporter_enabled`` and ``dcgm_exporter_listen`` (the host's
    ``nvidia_dcgm_*`` values, None when unset), ``gpu_names`` (None when gpu_facts was not gathered) and
    ``mig_layout``. An exporter listening on a wildcard address (``0.0.0.0:9400``, ``:9400``) is scraped on the
    host's address, one bound to an address on that address. Raises ``TargetError`` naming every bad value.
    """
    problems: list[str] = []
    warnings: list[str] = []
    port = _port(node_exporter_port)
    if port is None:
        problems.append(f"gpu_monitoring_node_exporter_port must be a port 1-65535 (got {_shown(node_exporter_port)})")
    if _listen(dcgm_listen_default) is None:
        problems.append("gpu_monitoring_dcgm_exporter_listen_default is not host:port "
                        f"(got {_shown(dcgm_listen_default)})")
    if not isinstance(records, Sequence) or isinstance(records, (str, bytes)):
        raise TargetError([*problems, f"the GPU hosts must be a list of host records (got {_shown(records)})"])
    if problems:
        raise TargetError(problems)
    assert port is not None
    built: list[tuple[dict[str, str], str, str | None]] = []
    seen: dict[str, str] = {}
    for record in records:
        if not isinstance(record, Mapping):
            problems.append(f"a host record is not a mapping (got {_shown(record)})")
            continue
        name = record.get("host")
        if not isinstance(name, str) or not _HOST.fullmatch(name):
            problems.append(f"the inventory host {_shown(name)} cannot be a label value; name hosts with letters, "
                            "digits and . _ - only")
            continue
        if name in seen:
            problems.append(f"{name}: listed twice")
            continue
        seen[name] = name
        result = _target(name, record, str(dcgm_listen_default), port, problems, warnings)
        if result is not None:
            built.append(result)
    for kind, index in (("dcgm-exporter", 2), ("node_exporter", 1)):
        owners: dict[str, list[str]] = {}
        for labels, node, dcgm in built:
            target = (node, dcgm)[index - 1]
            if target is not None:
                owners.setdefault(target, []).append(labels["host"])
        for target, hosts in sorted(owners.items()):
            if len(hosts) > 1:
                problems.append(f"{', '.join(sorted(hosts))}: the same {kind} target {target}; Prometheus would scrape "
                                "one exporter for all of them (set gpu_monitoring_address, or "
                                "nvidia_dcgm_exporter_listen to an address of each host)")
    if problems:
        raise TargetError(problems)
    built.sort(key=lambda item: item[0]["host"])
    return {
        "dcgm_exporter": [{"targets": [dcgm], "labels": dict(labels, exporter=DCGM_EXPORTER)}
                          for labels, _node, dcgm in built if dcgm is not None],
        "node_exporter": [{"targets": [node], "labels": dict(labels, exporter=NODE_EXPORTER)}
                          for labels, node, _dcgm in built],
        "warnings": warnings,
    }


def host_record(name: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """The record ``build_targets`` reads, from one host's variables (only the documented, public ones)."""
    if hostvars.get("gpu_monitoring_address") is not None:
        address, address_var = hostvars.get("gpu_monitoring_address"), "gpu_monitoring_address"
    elif hostvars.get("ansible_host") is not None:
        address, address_var = hostvars.get("ansible_host"), "ansible_host"
    else:
        address, address_var = name, "inventory_hostname"
    facts = hostvars.get("ansible_facts") or {}
    gpus = facts.get("gpufleet_gpus") if isinstance(facts, Mapping) else None
    gpu_names: Any = None
    if isinstance(gpus, Sequence) and not isinstance(gpus, (str, bytes)):
        gpu_names = [g.get("name") if isinstance(g, Mapping) else g for g in gpus]
    elif gpus is not None:
        gpu_names = gpus
    return {
        "host": name,
        "groups": list(hostvars.get("group_names") or []),
        "address": address,
        "address_var": address_var,
        "dcgm_exporter_enabled": hostvars.get("nvidia_dcgm_exporter_enabled"),
        "dcgm_exporter_listen": hostvars.get("nvidia_dcgm_exporter_listen"),
        "gpu_names": gpu_names,
        "mig_layout": hostvars.get("nvidia_mig_layout"),
    }
