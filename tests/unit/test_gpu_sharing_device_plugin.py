"""Every config the nvidia_gpu_sharing filters generate, loaded by the device plugin's own rules (the oracle).

Issue 19's cases, each failing on the filters before the fix: MPS files without ``flags.mpsRoot``, MPS with the
``mixed`` strategy, media-extension MIG names, ``failRequestsGreaterThanOne`` per plugin release, resource names
that match no device, a conflicting ``MIG_STRATEGY``, and the ConfigMap for the Helm chart's config manager.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gs = _load("gpu_sharing_filters", ROOT / "plugins" / "filter" / "gpu_sharing.py")
oracle = _load("device_plugin_oracle", ROOT / "tests" / "unit" / "device_plugin_oracle" / "oracle.py")


def render(time_slicing: Any, mps: Any, strategy: str, version: str = "0.17.4") -> str:
    """The file body as the role's template writes it (to_nice_yaml: block style, key order kept)."""
    doc = gs.gpu_sharing_config(time_slicing, mps, strategy, plugin_version=version)
    return yaml.safe_dump(doc, indent=2, sort_keys=False, default_flow_style=False)


def res(*pairs: tuple[str, int]) -> list[dict[str, Any]]:
    return [{"name": n, "replicas": r} for n, r in pairs]


# kind, MIG strategy, resources, rename_by_default -> what the plugin advertises (NVIDIA's naming, fixed data)
MATRIX: list[tuple[str, str, str, list[dict[str, Any]], bool, dict[str, int]]] = [
    ("ts-gpu-none", "time_slicing", "none", res(("nvidia.com/gpu", 4)), False, {"nvidia.com/gpu": 4}),
    ("ts-gpu-renamed", "time_slicing", "none", res(("nvidia.com/gpu", 4)), True, {"nvidia.com/gpu.shared": 4}),
    ("ts-mig-single", "time_slicing", "single", res(("nvidia.com/gpu", 3)), False, {"nvidia.com/gpu": 3}),
    ("ts-mig-single-renamed", "time_slicing", "single", res(("nvidia.com/gpu", 3)), True,
     {"nvidia.com/gpu.shared": 3}),
    ("ts-mig-mixed", "time_slicing", "mixed", res(("nvidia.com/mig-1g.10gb", 2), ("nvidia.com/mig-3g.40gb", 5)),
     False, {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 5}),
    ("ts-mig-mixed-renamed", "time_slicing", "mixed", res(("nvidia.com/mig-1g.10gb.me", 2), ("nvidia.com/gpu", 2)),
     True, {"nvidia.com/mig-1g.10gb.me.shared": 2, "nvidia.com/gpu.shared": 2}),
    ("ts-blackwell-mixed", "time_slicing", "mixed",
     res(("nvidia.com/mig-1g.24gb-me", 2), ("nvidia.com/mig-1g.24gb.gfx", 2), ("nvidia.com/mig-1g.24gb.me.all", 2)),
     False, {"nvidia.com/mig-1g.24gb-me": 2, "nvidia.com/mig-1g.24gb.gfx": 2, "nvidia.com/mig-1g.24gb.me.all": 2}),
    ("mps-gpu-none", "mps", "none", res(("nvidia.com/gpu", 4)), False, {"nvidia.com/gpu": 4}),
    ("mps-gpu-renamed", "mps", "none", res(("nvidia.com/gpu", 4)), True, {"nvidia.com/gpu.shared": 4}),
    ("mps-mig-single", "mps", "single", res(("nvidia.com/gpu", 2)), False, {"nvidia.com/gpu": 2}),
    ("mps-mig-single-renamed", "mps", "single", res(("nvidia.com/gpu", 2)), True, {"nvidia.com/gpu.shared": 2}),
]


@pytest.mark.parametrize(("kind", "strategy", "resources", "rename", "advertised"), [c[1:] for c in MATRIX],
                         ids=[c[0] for c in MATRIX])
@pytest.mark.parametrize("version", [(0, 17, 4), (0, 20, 0)], ids=["v0.17.4", "v0.20.0"])
def test_generated_config_loads_in_the_plugin(kind: str, strategy: str, resources: list[dict[str, Any]],
                                              rename: bool, advertised: dict[str, int],
                                              version: tuple[int, int, int]) -> None:
    spec = {"rename_by_default": rename, "resources": resources}
    text = render(spec if kind == "time_slicing" else None, spec if kind == "mps" else None, strategy,
                  ".".join(map(str, version)))
    loaded = oracle.load(text, version=version)  # no MPS_ROOT in the environment: the file must carry it
    assert loaded.strategy == ("mps" if kind == "mps" else "time-slicing")
    assert loaded.mig_strategy == strategy
    assert loaded.advertised() == advertised
    assert loaded.warnings == []
    assert loaded.fail_requests_greater_than_one is (kind == "mps")


def test_mps_file_carries_the_charts_mps_root() -> None:
    loaded = oracle.load(render(None, {"resources": res(("nvidia.com/gpu", 2))}, "none"))
    assert loaded.mps_root == "/run/nvidia/mps"


def test_mps_with_mixed_is_refused_before_the_plugin_refuses_it() -> None:
    assert gs.gpu_sharing_errors(None, {"resources": res(("nvidia.com/gpu", 2))}, "mixed") == [
        "nvidia_gpu_sharing_mps cannot be used with nvidia_gpu_sharing_mig_strategy mixed: the device plugin refuses "
        "MPS with the mixed MIG strategy; use none or single"]


def test_mps_without_an_absolute_root_is_refused() -> None:
    assert gs.gpu_sharing_errors(None, {"resources": res(("nvidia.com/gpu", 2))}, "none", mps_root="run/mps") == [
        "nvidia_gpu_sharing_mps_root must be an absolute path (the device plugin refuses MPS without one; NVIDIA's "
        "Helm chart uses /run/nvidia/mps; got 'run/mps')"]


def test_plus_in_a_mig_name_is_refused_with_the_name_to_use() -> None:
    spec = {"resources": res(("nvidia.com/mig-1g.10gb+me", 2))}
    assert gs.gpu_sharing_errors(spec, None, "mixed") == [
        "nvidia_gpu_sharing_time_slicing.resources[0].name nvidia.com/mig-1g.10gb+me is not a name the device plugin "
        "advertises: it replaces '+' in MIG profile names with '.'; use nvidia.com/mig-1g.10gb.me"]


# MIG profile (NVIDIA's MIG user guide names) -> the resource the plugin advertises under the mixed strategy.
@pytest.mark.parametrize(("profile", "resource"), [
    ("1g.10gb", "nvidia.com/mig-1g.10gb"), ("1g.10gb+me", "nvidia.com/mig-1g.10gb.me"),
    ("1c.3g.40gb", "nvidia.com/mig-1c.3g.40gb"), ("1g.24gb-me", "nvidia.com/mig-1g.24gb-me"),
    ("1g.24gb+gfx", "nvidia.com/mig-1g.24gb.gfx"), ("1g.24gb+me.all", "nvidia.com/mig-1g.24gb.me.all"),
    ("2g.48gb+me.all", "nvidia.com/mig-2g.48gb.me.all"),
])
def test_mig_resource_name(profile: str, resource: str) -> None:
    assert gs.mig_resource_name(profile) == resource
    assert oracle.new_resource_name(resource) == resource


@pytest.mark.parametrize("profile", ["", "3g", "1g.10gb+", "gpu", None])
def test_mig_resource_name_refuses_what_is_not_a_profile(profile: Any) -> None:
    with pytest.raises(AnsibleFilterError, match="gpu_sharing_mig_resource: "):
        gs.mig_resource_name(profile)


MPS_NO_FAIL = {"fail_requests_greater_than_one": False, "resources": res(("nvidia.com/gpu", 2))}


def test_mps_fail_requests_false_refused_where_the_plugin_ignores_it() -> None:
    assert gs.gpu_sharing_errors(None, MPS_NO_FAIL, "none", plugin_version="0.19.3") == [
        "nvidia_gpu_sharing_mps.fail_requests_greater_than_one false is ignored by device plugin v0.19.3: with MPS "
        "it refuses requests for more than one replica before v0.20.0; remove the key or set "
        "nvidia_gpu_sharing_plugin_version to 0.20.0 or later"]


def test_mps_fail_requests_false_is_written_and_honoured_from_v0_20() -> None:
    loaded = oracle.load(render(None, MPS_NO_FAIL, "none", "0.20.0"), version=(0, 20, 0))
    assert loaded.fail_requests_greater_than_one is False


def test_plugin_version_must_be_a_release() -> None:
    assert gs.gpu_sharing_errors(None, None, "none", plugin_version="latest") == [
        "nvidia_gpu_sharing_plugin_version must be a release like 0.17.4 (got 'latest')"]


# Hosts as gpufleet.nvidia.gpu_facts reports them (NVML shape), and nvidia_mig's resolved layouts.
def gpu(index: int, mig: bool = False, *profiles: str) -> dict[str, Any]:
    return {"index": index, "mig": {"supported": True, "current": mig, "pending": mig},
            "gpu_instances": [{"profile": p.split("c.")[-1], "compute_instances": [{"profile": p}]} for p in profiles]}


@pytest.mark.parametrize(("gpus", "strategy", "layout", "expected"), [
    ([gpu(0), gpu(1)], "none", None, ["nvidia.com/gpu"]),
    ([gpu(0, True, "3g.40gb", "1g.10gb+me")], "mixed", None, ["nvidia.com/mig-1g.10gb.me", "nvidia.com/mig-3g.40gb"]),
    ([gpu(0, True, "3g.40gb"), gpu(1)], "mixed", None, ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]),
    ([gpu(0, True, "1c.3g.40gb")], "single", None, ["nvidia.com/gpu"]),
    ([gpu(0, True)], "mixed", None, []),
    # The layout nvidia_mig applies wins over what NVML shows now (check mode, or before the MIG play).
    ([gpu(0)], "mixed", [{"index": 0, "mig_enabled": True,
                          "gpu_instances": [{"profile": "2g.20gb", "compute_instances": [{"profile": "2g.20gb"}]}]}],
     ["nvidia.com/mig-2g.20gb"]),
])
def test_host_resources(gpus: list[dict[str, Any]], strategy: str, layout: Any, expected: list[str]) -> None:
    assert gs.gpu_sharing_host_resources(gpus, strategy, layout) == expected


def test_a_resource_the_host_lacks_is_refused_naming_it() -> None:
    config = gs.gpu_sharing_config({"resources": res(("nvidia.com/mig-1g.10gb.me", 2))}, None, "mixed")
    host = gs.gpu_sharing_host_resources([gpu(0, True, "3g.40gb")], "mixed")
    assert gs.gpu_sharing_host_errors(config, host) == [
        "nvidia_gpu_sharing_time_slicing.resources[0].name nvidia.com/mig-1g.10gb.me matches no device of this host "
        "(it has: nvidia.com/mig-3g.40gb); the device plugin would skip it without a word: fix the name or the MIG "
        "layout"]


def test_unknown_keys_are_refused_where_the_plugin_ignores_them() -> None:
    spec = {"resources": [{"name": "nvidia.com/gpu", "replicas": 2, "rename": "x"}], "renameByDefault": True}
    assert gs.gpu_sharing_errors(spec, None, "none") == [
        "nvidia_gpu_sharing_time_slicing has unknown key 'renameByDefault' (allowed: rename_by_default, "
        "fail_requests_greater_than_one, resources)",
        "nvidia_gpu_sharing_time_slicing.resources[0] has unknown key 'rename' (allowed: name, replicas)"]


@pytest.mark.parametrize(("env", "warnings"), [
    ({}, []), ({"MIG_STRATEGY": "mixed"}, []), ({"NVIDIA_VISIBLE_DEVICES": "all"}, []),
    ({"MIG_STRATEGY": "single"}, ["the device plugin's environment sets MIG_STRATEGY=single, which overrides the "
                                  "config file's migStrategy mixed: remove MIG_STRATEGY from the plugin's environment "
                                  "or set nvidia_gpu_sharing_mig_strategy to single"]),
])
def test_conflicting_mig_strategy_in_the_environment_warns(env: dict[str, str], warnings: list[str]) -> None:
    assert gs.gpu_sharing_env_warnings(env, "mixed") == warnings


# The ConfigMap schema, from the Kubernetes API reference (ConfigMap v1 core; ObjectMeta): apiVersion v1, kind
# ConfigMap, metadata.name a DNS-1123 subdomain (<= 253), data keys [-._a-zA-Z0-9]+ (<= 253), string values.
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def configmap_problems(doc: Any) -> list[str]:
    problems = []
    if not isinstance(doc, dict):
        return ["not a mapping"]
    if doc.get("apiVersion") != "v1":
        problems.append("apiVersion")
    if doc.get("kind") != "ConfigMap":
        problems.append("kind")
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.match(name):
        problems.append("metadata.name")
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    if namespace is not None and (not isinstance(namespace, str) or not _SUBDOMAIN.match(namespace)):
        problems.append("metadata.namespace")
    data = doc.get("data", {})
    if not isinstance(data, dict):
        problems.append("data")
    else:
        for key, value in data.items():
            if not isinstance(key, str) or len(key) > 253 or not _DATA_KEY.match(key) or key in (".", ".."):
                problems.append(f"data key {key!r}")
            if not isinstance(value, str):
                problems.append(f"data[{key!r}] not a string")
    return problems


@pytest.mark.parametrize(("doc", "problems"), [
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}, []),
    ({"apiVersion": "v2", "kind": "Secret", "metadata": {"name": "A_b"}, "data": {"k/x": 1}},
     ["apiVersion", "kind", "metadata.name", "data key 'k/x'", "data['k/x'] not a string"]),
])
def test_configmap_schema_check_can_fail(doc: Any, problems: list[str]) -> None:
    assert configmap_problems(doc) == problems


def test_configmap_for_the_chart_is_valid_and_each_key_loads_in_the_plugin() -> None:
    ts = render({"resources": res(("nvidia.com/gpu", 4))}, None, "none")
    mps = render(None, {"resources": res(("nvidia.com/gpu", 2))}, "single")
    entries = [{"host": "gpu-a", "key": "gpu-a.example.com", "document": ts},
               {"host": "gpu-b", "key": "mps-2", "document": mps},
               {"host": "gpu-c", "key": "mps-2", "document": mps}]
    manifest = gs.gpu_sharing_configmap(entries)
    # What kubectl reads: the manifest through YAML.
    doc = yaml.safe_load(yaml.safe_dump(manifest, sort_keys=False))
    assert configmap_problems(doc) == []
    assert doc["metadata"]["name"] == "nvidia-device-plugin-configs"
    assert sorted(doc["data"]) == ["gpu-a.example.com", "mps-2"]
    assert oracle.load(doc["data"]["mps-2"]).strategy == "mps"
    assert oracle.load(doc["data"]["gpu-a.example.com"]).advertised() == {"nvidia.com/gpu": 4}


def test_configmap_refuses_one_key_for_two_configs() -> None:
    entries = [{"host": "a", "key": "k", "document": "x"}, {"host": "b", "key": "k", "document": "y"}]
    with pytest.raises(AnsibleFilterError) as err:
        gs.gpu_sharing_configmap(entries)
    assert err.value.message == ("nvidia_gpu_sharing_config_name k names two different configs (a and b): give one "
                                 "of them another name")


def test_configmap_refuses_a_key_with_a_trailing_newline() -> None:
    """re.match's ``$`` matches before a final newline; the key must be a label value as a whole."""
    with pytest.raises(AnsibleFilterError) as err:
        gs.gpu_sharing_configmap([{"host": "a", "key": "mps-2\n", "document": "x"}])
    assert err.value.message.startswith("nvidia_gpu_sharing_config_name of a must be a node label value")


def test_configmap_refuses_a_name_kubernetes_refuses() -> None:
    with pytest.raises(AnsibleFilterError) as err:
        gs.gpu_sharing_configmap([], name="Device_Plugin")
    assert err.value.message == ("nvidia_gpu_sharing_configmap_name must be a DNS-1123 subdomain (lower-case "
                                 "letters, digits, '-' and '.', at most 253 characters; got 'Device_Plugin')")
