# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Filters of the nvidia_gpu_sharing role: validate the sharing variables and build the device plugin's config.

The document follows NVIDIA k8s-device-plugin's ``api/config/v1`` (``version: v1``, ``flags.migStrategy``,
``flags.mpsRoot``, ``sharing.timeSlicing`` or ``sharing.mps`` with ``renameByDefault``,
``failRequestsGreaterThanOne`` and ``resources: [{name, replicas}]``). What the plugin itself refuses (replicas
below 2, a resource name that is not a DNS-1123 subdomain, MPS without an MPS root, MPS with the ``mixed`` MIG
strategy) is refused here first, with the variable named; what it skips in silence (a resource name no device of
the host has, an unknown key) is refused here too. ``tests/unit/device_plugin_oracle`` checks every document
against the plugin's own rules.

Resource names of MIG devices are derived from the MIG profile name the way the plugin derives them
(:func:`mig_resource_name`): ``nvidia.com/mig-`` + the profile name with every ``+`` replaced by ``.``
(``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``; ``1g.24gb-me`` -> ``nvidia.com/mig-1g.24gb-me``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

MIG_STRATEGIES = ("none", "single", "mixed")
SHARING_KEYS = ("rename_by_default", "fail_requests_greater_than_one", "resources")
RESOURCE_KEYS = ("name", "replicas")
FULL_GPU = "nvidia.com/gpu"
RESOURCE_PREFIX = "nvidia.com/"
# api/config/v1/consts.go: MaxResourceNameLength (the fully-qualified name).
MAX_RESOURCE_NAME = 63
# The plugin's MIG resource names: "mig-" + a go-nvlib profile name ([<C>c.]<G>g.<GB>gb[+attr|-attr]) with "+"
# replaced by ".": mig-1g.10gb, mig-1c.3g.40gb, mig-1g.10gb.me, mig-1g.24gb-me, mig-1g.24gb.gfx, mig-1g.24gb.me.all.
_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(?:[1-9][0-9]*c\.)?[1-9][0-9]*g\.[0-9]+gb"
                           r"(?:[.-][a-z][a-z0-9]*(?:\.[a-z][a-z0-9]*)*)?$")
# Where NVIDIA's Helm chart runs the MPS control daemon (its mps.root value; the chart passes it as MPS_ROOT).
DEFAULT_MPS_ROOT = "/run/nvidia/mps"
DEFAULT_PLUGIN_VERSION = "0.17.4"
# From this release the plugin honours failRequestsGreaterThanOne: false under MPS (a pointer field in
# api/config/v1/replicas.go, defaulted to true in config.go); earlier releases always refuse requests > 1 with MPS.
MPS_FAIL_REQUESTS_HONOURED = (0, 20, 0)
# The node label the chart's config manager (config-manager --node-label) reads to pick a key of its ConfigMap.
CONFIG_NODE_LABEL = "nvidia.com/device-plugin.config"
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VERSION = re.compile(r"^v?([0-9]+)\.([0-9]+)\.([0-9]+)$")


def mig_resource_name(profile: Any) -> str:
    """The resource name the device plugin advertises for MIG devices of ``profile`` (mixed strategy).

    ``nvidia.com/mig-`` followed by the profile name with every ``+`` replaced by ``.``, e.g. ``1g.10gb+me`` ->
    ``nvidia.com/mig-1g.10gb.me``, ``1g.24gb+me.all`` -> ``nvidia.com/mig-1g.24gb.me.all``.

    Raises:
        AnsibleFilterError: ``profile`` is not a MIG profile name.
    """
    if not isinstance(profile, str) or not profile:
        raise AnsibleFilterError(f"gpu_sharing_mig_resource: the MIG profile must be a name like 1g.10gb or "
                                 f"1g.10gb+me (got {profile!r})")
    name = RESOURCE_PREFIX + "mig-" + profile.replace("+", ".")
    if not _MIG_RESOURCE.fullmatch(name):
        raise AnsibleFilterError(f"gpu_sharing_mig_resource: {profile!r} is not a MIG profile name; expected "
                                 f"[<C>c.]<G>g.<GB>gb with an optional +attr or -attr, e.g. 1g.10gb+me")
    return name


def _parse_version(version: Any) -> tuple[int, int, int] | None:
    match = _VERSION.fullmatch(version) if isinstance(version, str) else None
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None


def _name_error(where: str, name: Any) -> str | None:
    if name == FULL_GPU:
        return None
    if isinstance(name, str) and _MIG_RESOURCE.fullmatch(name) and len(name) <= MAX_RESOURCE_NAME:
        return None
    if isinstance(name, str) and name.startswith(RESOURCE_PREFIX + "mig-") and "+" in name:
        fixed = name.replace("+", ".")
        return (f"{where}.name {name} is not a name the device plugin advertises: it replaces '+' in MIG profile "
                f"names with '.'; use {fixed}")
    return (f"{where}.name must be {FULL_GPU} or nvidia.com/mig-<profile> with '+' written as '.' "
            f"(e.g. nvidia.com/mig-1g.10gb.me; got {name!r})")


def _resource_errors(kind: str, index: int, res: Any, mig_strategy: str) -> list[str]:
    where = f"nvidia_gpu_sharing_{kind}.resources[{index}]"
    if not isinstance(res, Mapping):
        return [f"{where} must be a mapping with name and replicas (got {type(res).__name__})"]
    errors = [f"{where} has unknown key {key!r} (allowed: name, replicas)" for key in res if key not in RESOURCE_KEYS]
    name = res.get("name")
    replicas = res.get("replicas")
    name_error = _name_error(where, name)
    if name_error:
        errors.append(name_error)
    elif name != FULL_GPU and kind == "mps":
        errors.append(f"{where}.name {name} is a MIG device: MPS sharing supports only {FULL_GPU}")
    elif name != FULL_GPU and mig_strategy != "mixed":
        errors.append(f"{where}.name {name} needs nvidia_gpu_sharing_mig_strategy mixed (got {mig_strategy})")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
        errors.append(f"{where}.replicas must be an integer >= 2 (got {replicas!r})")
    return errors


def _sharing_errors(kind: str, spec: Any, mig_strategy: str, plugin_version: tuple[int, int, int] | None) -> list[str]:
    var = f"nvidia_gpu_sharing_{kind}"
    if not isinstance(spec, Mapping):
        return [f"{var} must be a mapping with resources (got {type(spec).__name__})"]
    errors = [f"{var} has unknown key {key!r} (allowed: {', '.join(SHARING_KEYS)})" for key in spec
              if key not in SHARING_KEYS]
    for key in ("rename_by_default", "fail_requests_greater_than_one"):
        if key in spec and not isinstance(spec[key], bool):
            errors.append(f"{var}.{key} must be true or false (got {spec[key]!r})")
    if (kind == "mps" and spec.get("fail_requests_greater_than_one") is False and plugin_version is not None
            and plugin_version < MPS_FAIL_REQUESTS_HONOURED):
        errors.append(f"{var}.fail_requests_greater_than_one false is ignored by device plugin "
                      f"v{'.'.join(map(str, plugin_version))}: with MPS it refuses requests for more than one "
                      f"replica before v0.20.0; remove the key or set nvidia_gpu_sharing_plugin_version to 0.20.0 "
                      f"or later")
    resources = spec.get("resources")
    if not isinstance(resources, list) or not resources:
        errors.append(f"{var}.resources must be a non-empty list of {{name, replicas}}")
        return errors
    for index, res in enumerate(resources):
        errors += _resource_errors(kind, index, res, mig_strategy)
    names = [r.get("name") for r in resources if isinstance(r, Mapping) and isinstance(r.get("name"), str)]
    errors += [f"{var}.resources names {name} more than once" for name in sorted({n for n in names
                                                                                 if names.count(n) > 1})]
    return errors


def gpu_sharing_errors(time_slicing: Any, mps: Any, mig_strategy: Any = "none", mps_root: Any = DEFAULT_MPS_ROOT,
                       plugin_version: Any = DEFAULT_PLUGIN_VERSION) -> list[str]:
    """Return every problem with the sharing variables (empty when they are valid)."""
    errors = []
    if mig_strategy not in MIG_STRATEGIES:
        errors.append(f"nvidia_gpu_sharing_mig_strategy must be one of {', '.join(MIG_STRATEGIES)} "
                      f"(got {mig_strategy!r})")
    version = _parse_version(plugin_version)
    if version is None:
        errors.append(f"nvidia_gpu_sharing_plugin_version must be a release like 0.17.4 (got {plugin_version!r})")
    if time_slicing and mps:
        errors.append("nvidia_gpu_sharing_time_slicing and nvidia_gpu_sharing_mps are mutually exclusive: "
                      "the device plugin shares GPUs one way; set only one")
        return errors
    if time_slicing:
        errors += _sharing_errors("time_slicing", time_slicing, mig_strategy, version)
    if mps:
        if mig_strategy == "mixed":
            errors.append("nvidia_gpu_sharing_mps cannot be used with nvidia_gpu_sharing_mig_strategy mixed: the "
                          "device plugin refuses MPS with the mixed MIG strategy; use none or single")
        if not isinstance(mps_root, str) or not mps_root.startswith("/") or "\n" in mps_root:
            errors.append(f"nvidia_gpu_sharing_mps_root must be an absolute path (the device plugin refuses MPS "
                          f"without one; NVIDIA's Helm chart uses {DEFAULT_MPS_ROOT}; got {mps_root!r})")
        errors += _sharing_errors("mps", mps, mig_strategy, version)
    return errors


def gpu_sharing_config(time_slicing: Any, mps: Any, mig_strategy: Any = "none", mps_root: Any = DEFAULT_MPS_ROOT,
                       plugin_version: Any = DEFAULT_PLUGIN_VERSION) -> dict[str, Any]:
    """Return the device plugin's config document (``version: v1``) for valid sharing variables.

    Raises:
        AnsibleFilterError: the variables are invalid (every problem, joined).
    """
    errors = gpu_sharing_errors(time_slicing, mps, mig_strategy, mps_root, plugin_version)
    if errors:
        raise AnsibleFilterError("; ".join(errors))
    flags: dict[str, Any] = {"migStrategy": mig_strategy}
    doc: dict[str, Any] = {"version": "v1", "flags": flags}
    kind, spec = ("mps", mps) if mps else ("timeSlicing", time_slicing)
    if spec:
        if kind == "mps":
            flags["mpsRoot"] = mps_root
        # MPS defaults failRequestsGreaterThanOne to true, time-slicing to false (api/config/v1/config.go, v0.20).
        doc["sharing"] = {kind: {
            "renameByDefault": bool(spec.get("rename_by_default", False)),
            "failRequestsGreaterThanOne": bool(spec.get("fail_requests_greater_than_one", kind == "mps")),
            "resources": [{"name": r["name"], "replicas": int(r["replicas"])} for r in spec["resources"]],
        }}
    return doc


def gpu_sharing_strategy(time_slicing: Any, mps: Any) -> str:
    """The strategy label the plugin will advertise: ``mps``, ``time-slicing`` or ``none``."""
    if mps:
        return "mps"
    return "time-slicing" if time_slicing else "none"


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _gpu_devices(gpu: Mapping[str, Any], desired: Mapping[str, Any] | None) -> tuple[bool, list[str]]:
    """(MIG enabled, the MIG device profiles) of one GPU: the desired layout where one is given, else NVML's."""
    if desired is not None:
        enabled = desired.get("mig_enabled") is True
        instances = _list(desired.get("gpu_instances"))
    else:
        mig = gpu.get("mig")
        enabled = isinstance(mig, Mapping) and mig.get("current") is True
        instances = _list(gpu.get("gpu_instances"))
    profiles = []
    for gi in instances:
        cis = _list(gi.get("compute_instances")) if isinstance(gi, Mapping) else []
        profiles += [ci["profile"] for ci in cis if isinstance(ci, Mapping) and isinstance(ci.get("profile"), str)]
    return enabled, profiles


def gpu_sharing_host_resources(gpus: Any, mig_strategy: Any = "none", mig_layout: Any = None) -> list[str]:
    """The resource names the device plugin would advertise on a host, sorted.

    ``gpus`` is ``gpufleet.nvidia.gpu_facts``' ``gpus``; ``mig_layout`` the per-GPU layout that
    ``gpufleet.nvidia.mig_validate`` returns for the layout the ``nvidia_mig`` role applies (null: the MIG state
    NVML reports now). Full GPUs are ``nvidia.com/gpu``; MIG devices are ``nvidia.com/gpu`` under the ``single``
    strategy and :func:`mig_resource_name` of their profile under ``mixed``; MIG devices are not advertised under
    ``none``.

    Raises:
        AnsibleFilterError: ``gpus`` is not a list of GPUs, or ``mig_layout`` not a list of per-GPU layouts.
    """
    if not isinstance(gpus, list) or not all(isinstance(g, Mapping) for g in gpus):
        raise AnsibleFilterError("gpu_sharing_host_resources: gpus must be the list gpufleet.nvidia.gpu_facts "
                                 f"returns (got {type(gpus).__name__})")
    if mig_layout is not None and (not isinstance(mig_layout, list)
                                   or not all(isinstance(e, Mapping) for e in mig_layout)):
        raise AnsibleFilterError("gpu_sharing_host_resources: mig_layout must be the list gpufleet.nvidia.mig_validate "
                                 f"returns, or null (got {type(mig_layout).__name__})")
    desired = {e["index"]: e for e in mig_layout or [] if isinstance(e.get("index"), int)}
    names: set[str] = set()
    for gpu in gpus:
        index = gpu.get("index")
        enabled, profiles = _gpu_devices(gpu, desired.get(index) if isinstance(index, int) else None)
        if not enabled or mig_strategy == "none":
            names.add(FULL_GPU)
        elif mig_strategy == "single":
            names.update([FULL_GPU] if profiles else [])
        else:
            names.update(mig_resource_name(p) for p in profiles)
    return sorted(names)


def gpu_sharing_host_errors(config: Any, resources: Any) -> list[str]:
    """Every resource name of the config document that matches no device of the host (``resources``)."""
    sharing = config.get("sharing") if isinstance(config, Mapping) else None
    resources = [str(r) for r in _list(resources)]
    errors = []
    for kind, spec in (sharing if isinstance(sharing, Mapping) else {}).items():
        var = "nvidia_gpu_sharing_" + ("mps" if kind == "mps" else "time_slicing")
        for index, res in enumerate(_list(spec.get("resources")) if isinstance(spec, Mapping) else []):
            if not isinstance(res, Mapping) or res.get("name") not in resources:
                name = res.get("name") if isinstance(res, Mapping) else res
                errors.append(f"{var}.resources[{index}].name {name} matches no device of this host "
                              f"(it has: {', '.join(resources) or 'no GPU'}); the device plugin would skip it "
                              f"without a word: fix the name or the MIG layout")
    return errors


def gpu_sharing_env_warnings(environment: Any, mig_strategy: Any) -> list[str]:
    """Warn when the plugin's environment sets a MIG_STRATEGY that overrides the file's ``flags.migStrategy``."""
    if not isinstance(environment, Mapping):
        return []
    value = environment.get("MIG_STRATEGY")
    if value is None or value == mig_strategy:
        return []
    return [f"the device plugin's environment sets MIG_STRATEGY={value}, which overrides the config file's "
            f"migStrategy {mig_strategy}: remove MIG_STRATEGY from the plugin's environment or set "
            f"nvidia_gpu_sharing_mig_strategy to {value}"]


def gpu_sharing_configmap(entries: Any, name: Any = "nvidia-device-plugin-configs",
                          namespace: Any = "nvidia-device-plugin") -> dict[str, Any]:
    """A ConfigMap for the chart's config manager: one data key per config, selected by the node label.

    ``entries`` is a list of ``{host, key, document}`` (``document`` the config file's text). Hosts that share a key
    must share the document.

    Raises:
        AnsibleFilterError: a name, key or namespace Kubernetes refuses, or one key with two documents.
    """
    for what, value in (("nvidia_gpu_sharing_configmap_name", name),
                        ("nvidia_gpu_sharing_configmap_namespace", namespace)):
        if not isinstance(value, str) or len(value) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(value):
            raise AnsibleFilterError(f"{what} must be a DNS-1123 subdomain (lower-case letters, digits, '-' and "
                                     f"'.', at most 253 characters; got {value!r})")
    data: dict[str, str] = {}
    owners: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else []:
        key, host, document = entry.get("key"), entry.get("host"), entry.get("document")
        if not isinstance(key, str) or not _LABEL_VALUE.fullmatch(key):
            raise AnsibleFilterError(f"nvidia_gpu_sharing_config_name of {host} must be a node label value (letters, "
                                     f"digits, '-', '_' and '.', at most 63 characters, starting and ending with a "
                                     f"letter or digit; got {key!r})")
        if key in data and data[key] != document:
            raise AnsibleFilterError(f"nvidia_gpu_sharing_config_name {key} names two different configs "
                                     f"({owners[key]} and {host}): give one of them another name")
        data[key] = str(document)
        owners.setdefault(key, str(host))
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gpufleet"}},
            "data": dict(sorted(data.items()))}


class FilterModule:
    """Filters of the nvidia_gpu_sharing role."""

    def filters(self) -> dict[str, Any]:
        """Return the filters."""
        return {
            "gpu_sharing_errors": gpu_sharing_errors,
            "gpu_sharing_config": gpu_sharing_config,
            "gpu_sharing_strategy": gpu_sharing_strategy,
            "gpu_sharing_mig_resource": mig_resource_name,
            "gpu_sharing_host_resources": gpu_sharing_host_resources,
            "gpu_sharing_host_errors": gpu_sharing_host_errors,
            "gpu_sharing_env_warnings": gpu_sharing_env_warnings,
            "gpu_sharing_configmap": gpu_sharing_configmap,
        }
