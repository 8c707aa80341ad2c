"""The device-plugin oracle first runs NVIDIA's own test cases: a port that fails them checks nothing.

Cases from NVIDIA/k8s-device-plugin ``api/config/v1/replicas_test.go`` (the ``ReplicatedResources`` form of the
v0.15-v0.17 releases, commit fe7630fd): each JSON input, and whether the plugin accepts it and what it reads.
Then the refusals of ``cmd/nvidia-device-plugin/main.go`` ``validateFlags`` and the one semantic difference
between v0.17.4 and v0.20.x, with the messages as the plugin prints them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("device_plugin_oracle", HERE / "device_plugin_oracle" / "oracle.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


oracle = _load()
UUID = "4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"


# TestReplicatedDeviceRef
@pytest.mark.parametrize(("ref", "kind"), [
    ("0", "gpuIndex"), ("0:0", "migIndex"), (f"GPU-{UUID}", "uuid"),
    ("MIG-3eb87630-93d5-b2b6-b8ff-9b359caf4ee2", "uuid"), ("MIG-GPU-662077db-fa3f-0d8f-9502-21ab0ef058a2/10/0", "uuid"),
])
def test_replicated_device_ref(ref: str, kind: str) -> None:
    found = (oracle.is_gpu_index(ref), oracle.is_mig_index(ref), oracle.is_gpu_uuid(ref) or oracle.is_mig_uuid(ref))
    assert found == (kind == "gpuIndex", kind == "migIndex", kind == "uuid")


# TestUnmarshalReplicatedDevices: input, expected (None = error)
DEVICES: list[tuple[str, Any]] = [
    ("", None), ('"not-all"', None), ("-2", None), ("2.0", None), ("[-1]", None), ('["-1"]', None),
    ('["invalid-UUID"]', None), ('["GPU-UUID"]', None), ('["MIG-UUID"]', None), (f'["MIG-GPU-{UUID}"]', None),
    ('"all"', "all"), ("2", 2), ("[0]", ["0"]), ('["0"]', ["0"]), ('["0:0"]', ["0:0"]),
    (f'["GPU-{UUID}"]', [f"GPU-{UUID}"]), (f'["MIG-{UUID}"]', [f"MIG-{UUID}"]),
    (f'["MIG-GPU-{UUID}/0/0"]', [f"MIG-GPU-{UUID}/0/0"]),
    (f'[0, "0:0", "GPU-{UUID}"]', ["0", "0:0", f"GPU-{UUID}"]),
    (f'["0", "0:0", "GPU-{UUID}"]', ["0", "0:0", f"GPU-{UUID}"]),
]


def _json(text: str) -> Any:
    """Go's encoding/json: an empty or malformed input is an error, as json.loads makes it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise oracle.PluginConfigError(str(exc)) from exc


@pytest.mark.parametrize(("text", "expected"), DEVICES, ids=[f"devices-{i}" for i in range(len(DEVICES))])
def test_unmarshal_replicated_devices(text: str, expected: Any) -> None:
    if expected is None:
        with pytest.raises(oracle.PluginConfigError):
            oracle.unmarshal_devices(_json(text))
    else:
        assert oracle.unmarshal_devices(_json(text)) == expected


# TestUnmarshalReplicatedResource: input, expected (name, rename, devices, replicas) or None = error
RESOURCE: list[tuple[str, tuple[str, str, Any, int] | None]] = [
    ("", None), ("{}", None), ('{"name": "valid",}', None), ('{"name": "valid", "devices": "all",}', None),
    ('{"name": "valid", "devices": "all", "rename": "valid-shared",}', None),
    ('{"name": "valid", "devices": "all", "replicas": 2}', ("nvidia.com/valid", "", "all", 2)),
    ('{"name": "valid", "devices": "all", "replicas": 2, "rename": "valid-shared"}',
     ("nvidia.com/valid", "nvidia.com/valid-shared", "all", 2)),
    ('{"name": "valid", "replicas": -1,}', None), ('{"name": "valid", "replicas": 0,}', None),
    ('{"name": "valid", "replicas": 2}', ("nvidia.com/valid", "", "all", 2)),
    ('{"name": "valid", "replicas": 2, "rename": "valid-shared"}',
     ("nvidia.com/valid", "nvidia.com/valid-shared", "all", 2)),
    ('{"name": "$invalid$", "replicas": 2, "rename": "valid-shared"}', None),
    ('{"name": "valid", "replicas": 2, "rename": "$invalid$"}', None),
]


@pytest.mark.parametrize(("text", "expected"), RESOURCE, ids=[f"resource-{i}" for i in range(len(RESOURCE))])
def test_unmarshal_replicated_resource(text: str, expected: tuple[str, str, Any, int] | None) -> None:
    if expected is None:
        with pytest.raises(oracle.PluginConfigError):
            oracle.unmarshal_resource(_json(text))
    else:
        res = oracle.unmarshal_resource(_json(text))
        assert (res.name, res.rename, res.devices, res.replicas) == expected


# TestUnmarshalReplicatedResources: input, expected resource names or None = error
RESOURCES: list[tuple[str, list[str] | None]] = [
    ("", None), ("{}", None), ('{"resources": []}', None),
    ('{"resources": [{"name": "valid", "replicas": 2}]}', ["nvidia.com/valid"]),
    ('{"resources": [{"name": "valid1", "replicas": 2}, {"name": "valid2", "replicas": 2}]}',
     ["nvidia.com/valid1", "nvidia.com/valid2"]),
    ('{"resources": [{"name": "$invalid$", "replicas": 2}]}', None),
]


@pytest.mark.parametrize(("text", "expected"), RESOURCES, ids=[f"resources-{i}" for i in range(len(RESOURCES))])
def test_unmarshal_replicated_resources(text: str, expected: list[str] | None) -> None:
    if expected is None:
        with pytest.raises(oracle.PluginConfigError):
            oracle.unmarshal_replicated(_json(text))
    else:
        rep = oracle.unmarshal_replicated(_json(text))
        assert [r.name for r in rep.resources] == expected
        assert [r.devices for r in rep.resources] == ["all"] * len(expected)


MPS_GPU = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"


# validateFlags (cmd/nvidia-device-plugin/main.go): the refusals the issue met, with the plugin's words.
@pytest.mark.parametrize(("text", "env", "message"), [
    (MPS_GPU, {}, "using MPS requires --mps-root to be specified"),
    ("flags: {migStrategy: mixed, mpsRoot: /run/nvidia/mps}\n" + MPS_GPU.split("\n", 1)[1], {},
     "using --mig-strategy=mixed is not supported with MPS"),
    ("flags: {mpsRoot: /run/nvidia/mps}\n" + MPS_GPU.split("\n", 1)[1], {"MIG_STRATEGY": "mixed"},
     "using --mig-strategy=mixed is not supported with MPS"),
    ("version: v2\n", {}, "unable to parse config file: unknown version: v2"),
    ("flags: {migStrategy: auto}\n", {}, "unknown MIG strategy: auto"),
])
def test_plugin_refusals(text: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(oracle.PluginConfigError) as err:
        oracle.load(text, environment=env)
    assert str(err.value) == message


def test_mps_root_from_the_chart_environment_is_accepted() -> None:
    loaded = oracle.load(MPS_GPU, environment={"MPS_ROOT": "/run/nvidia/mps"})
    assert (loaded.strategy, loaded.mps_root, loaded.advertised()) == ("mps", "/run/nvidia/mps", {"nvidia.com/gpu": 4})


def test_environment_mig_strategy_overrides_the_file() -> None:
    assert oracle.load("flags: {migStrategy: mixed}\n", environment={"MIG_STRATEGY": "single"}).mig_strategy == "single"


def test_media_extension_name_with_plus_is_not_a_resource_name() -> None:
    with pytest.raises(oracle.PluginConfigError) as err:
        oracle.new_resource_name("nvidia.com/mig-1g.10gb+me")
    assert str(err.value).startswith("incorrect format for resource name 'nvidia.com/mig-1g.10gb+me'")
    assert oracle.new_resource_name("nvidia.com/mig-1g.10gb.me") == "nvidia.com/mig-1g.10gb.me"


MPS_NO_FAIL = ("flags: {mpsRoot: /run/nvidia/mps}\nsharing:\n  mps:\n    failRequestsGreaterThanOne: false\n"
               "    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n")


@pytest.mark.parametrize(("version", "fails"), [((0, 17, 4), True), ((0, 19, 9), True), ((0, 20, 0), False)])
def test_mps_fail_requests_false_is_honoured_only_from_v0_20(version: tuple[int, int, int], fails: bool) -> None:
    assert oracle.load(MPS_NO_FAIL, version=version).fail_requests_greater_than_one is fails


def test_mps_fail_requests_unset_is_true_on_both_releases() -> None:
    text = MPS_NO_FAIL.replace("    failRequestsGreaterThanOne: false\n", "")
    assert [oracle.load(text, version=v).fail_requests_greater_than_one for v in ((0, 17, 4), (0, 20, 0))] == [True,
                                                                                                              True]


def test_custom_rename_is_ignored_with_the_plugins_warning() -> None:
    text = "sharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2, rename: gpu-x}\n"
    loaded = oracle.load(text)
    assert loaded.advertised() == {"nvidia.com/gpu": 2}
    assert loaded.warnings == ["Setting the 'rename' field in sharing.timeSlicing.resources is not yet supported in "
                               "the config. Ignoring..."]


def test_unknown_keys_are_ignored_by_the_plugin() -> None:
    text = ("sharing:\n  timeSlicing:\n    renameBydefault: true\n    resources:\n"
            "    - {name: nvidia.com/gpu, replicas: 2}\n")
    assert oracle.load(text).advertised() == {"nvidia.com/gpu": 2}
