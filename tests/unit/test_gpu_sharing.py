"""The nvidia_gpu_sharing role's filters: validation messages and the device plugin document, as tables."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    path = ROOT / "plugins" / "filter" / "gpu_sharing.py"
    spec = importlib.util.spec_from_file_location("gpu_sharing_filters", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gs = _load()
GPU4 = {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}

ERROR_CASES: list[tuple[str, Any, Any, str, list[str]]] = [
    ("off", None, None, "none", []),
    ("time-slicing-ok", GPU4, None, "none", []),
    ("mps-ok", None, GPU4, "none", []),
    ("mig-time-slicing-mixed-ok", {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}, None,
     "mixed", []),
    ("both", GPU4, GPU4, "none",
     ["nvidia_gpu_sharing_time_slicing and nvidia_gpu_sharing_mps are mutually exclusive: the device plugin "
      "shares GPUs one way; set only one"]),
    ("replicas-1", {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}, None, "none",
     ["nvidia_gpu_sharing_time_slicing.resources[0].replicas must be an integer >= 2 (got 1)"]),
    ("replicas-string", None, {"resources": [{"name": "nvidia.com/gpu", "replicas": "4"}]}, "none",
     ["nvidia_gpu_sharing_mps.resources[0].replicas must be an integer >= 2 (got '4')"]),
    ("replicas-bool", {"resources": [{"name": "nvidia.com/gpu", "replicas": True}]}, None, "none",
     ["nvidia_gpu_sharing_time_slicing.resources[0].replicas must be an integer >= 2 (got True)"]),
    ("replicas-missing", {"resources": [{"name": "nvidia.com/gpu"}]}, None, "none",
     ["nvidia_gpu_sharing_time_slicing.resources[0].replicas must be an integer >= 2 (got None)"]),
    ("no-resources", {"rename_by_default": True}, None, "none",
     ["nvidia_gpu_sharing_time_slicing.resources must be a non-empty list of {name, replicas}"]),
    ("unknown-key", {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}], "renameByDefault": True}, None,
     "none", ["nvidia_gpu_sharing_time_slicing has unknown key 'renameByDefault' (allowed: rename_by_default, "
              "fail_requests_greater_than_one, resources)"]),
    ("bad-name", {"resources": [{"name": "gpu", "replicas": 2}]}, None, "none",
     ["nvidia_gpu_sharing_time_slicing.resources[0].name must be nvidia.com/gpu or nvidia.com/mig-<profile> with "
      "'+' written as '.' (e.g. nvidia.com/mig-1g.10gb.me; got 'gpu')"]),
    ("mig-needs-mixed", {"resources": [{"name": "nvidia.com/mig-3g.40gb", "replicas": 2}]}, None, "single",
     ["nvidia_gpu_sharing_time_slicing.resources[0].name nvidia.com/mig-3g.40gb needs "
      "nvidia_gpu_sharing_mig_strategy mixed (got single)"]),
    ("mps-no-mig", None, {"resources": [{"name": "nvidia.com/mig-3g.40gb", "replicas": 2}]}, "single",
     ["nvidia_gpu_sharing_mps.resources[0].name nvidia.com/mig-3g.40gb is a MIG device: MPS sharing supports "
      "only nvidia.com/gpu"]),
    ("duplicate", {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}, {"name": "nvidia.com/gpu",
                                                                            "replicas": 3}]}, None, "none",
     ["nvidia_gpu_sharing_time_slicing.resources names nvidia.com/gpu more than once"]),
    ("flag-not-bool", {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}], "rename_by_default": "yes"}, None,
     "none", ["nvidia_gpu_sharing_time_slicing.rename_by_default must be true or false (got 'yes')"]),
    ("bad-strategy", None, None, "auto", ["nvidia_gpu_sharing_mig_strategy must be one of none, single, mixed "
                                          "(got 'auto')"]),
]


@pytest.mark.parametrize(("time_slicing", "mps", "strategy", "errors"), [c[1:] for c in ERROR_CASES],
                         ids=[c[0] for c in ERROR_CASES])
def test_errors_table(time_slicing: Any, mps: Any, strategy: str, errors: list[str]) -> None:
    assert gs.gpu_sharing_errors(time_slicing, mps, strategy) == errors


CONFIG_CASES: list[tuple[str, Any, Any, str, dict[str, Any]]] = [
    ("off", None, None, "none", {"version": "v1", "flags": {"migStrategy": "none"}}),
    ("time-slicing-defaults", GPU4, None, "none",
     {"version": "v1", "flags": {"migStrategy": "none"},
      "sharing": {"timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": False,
                                  "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}),
    ("mps-defaults-fail-gt-one", None, GPU4, "single",
     {"version": "v1", "flags": {"migStrategy": "single", "mpsRoot": "/run/nvidia/mps"},
      "sharing": {"mps": {"renameByDefault": False, "failRequestsGreaterThanOne": True,
                          "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}),
    ("time-slicing-renamed-mixed", {"rename_by_default": True, "fail_requests_greater_than_one": True,
                                    "resources": [{"name": "nvidia.com/gpu", "replicas": 2},
                                                  {"name": "nvidia.com/mig-1g.10gb", "replicas": 7}]}, None, "mixed",
     {"version": "v1", "flags": {"migStrategy": "mixed"},
      "sharing": {"timeSlicing": {"renameByDefault": True, "failRequestsGreaterThanOne": True,
                                  "resources": [{"name": "nvidia.com/gpu", "replicas": 2},
                                                {"name": "nvidia.com/mig-1g.10gb", "replicas": 7}]}}}),
]


@pytest.mark.parametrize(("time_slicing", "mps", "strategy", "doc"), [c[1:] for c in CONFIG_CASES],
                         ids=[c[0] for c in CONFIG_CASES])
def test_config_table(time_slicing: Any, mps: Any, strategy: str, doc: dict[str, Any]) -> None:
    assert gs.gpu_sharing_config(time_slicing, mps, strategy) == doc


def test_config_refuses_invalid_with_every_problem() -> None:
    bad = {"resources": [{"name": "gpu", "replicas": 1}]}
    with pytest.raises(AnsibleFilterError) as err:
        gs.gpu_sharing_config(bad, None, "none")
    assert err.value.message == (
        "nvidia_gpu_sharing_time_slicing.resources[0].name must be nvidia.com/gpu or nvidia.com/mig-<profile> with "
        "'+' written as '.' (e.g. nvidia.com/mig-1g.10gb.me; got 'gpu'); "
        "nvidia_gpu_sharing_time_slicing.resources[0].replicas must be an integer >= 2 (got 1)")


@pytest.mark.parametrize(("time_slicing", "mps", "label"), [(None, None, "none"), (GPU4, None, "time-slicing"),
                                                            (None, GPU4, "mps")])
def test_strategy_label(time_slicing: Any, mps: Any, label: str) -> None:
    assert gs.gpu_sharing_strategy(time_slicing, mps) == label


def test_filters_registered() -> None:
    assert sorted(gs.FilterModule().filters()) == [
        "gpu_sharing_config", "gpu_sharing_configmap", "gpu_sharing_env_warnings", "gpu_sharing_errors",
        "gpu_sharing_host_errors", "gpu_sharing_host_resources", "gpu_sharing_mig_resource", "gpu_sharing_strategy"]
