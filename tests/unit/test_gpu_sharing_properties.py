"""Hypothesis over the sharing filters (issue 13): any input gives messages, never an uncaught exception, and
every input the filters accept gives a file the device plugin's own rules (the oracle) load as intended."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

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

JUNK = st.recursive(st.none() | st.booleans() | st.integers(-3, 10) | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)
NAMES = st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.me",
                         "nvidia.com/mig-1g.10gb+me", "nvidia.com/mig-1g.24gb-me", "nvidia.com/mig-1g.24gb.me.all",
                         "nvidia.com/mig-1c.3g.40gb", "gpu", "", "nvidia.com/mig-" + "9" * 60 + "g.1gb"]) | JUNK
RESOURCE = st.fixed_dictionaries({}, optional={"name": NAMES, "replicas": st.integers(-1, 9) | JUNK,
                                               "rename": JUNK}) | JUNK
SPEC = st.fixed_dictionaries({}, optional={"resources": st.lists(RESOURCE, max_size=3) | JUNK,
                                           "rename_by_default": st.booleans() | JUNK,
                                           "fail_requests_greater_than_one": st.booleans() | JUNK,
                                           "extra": JUNK}) | JUNK
STRATEGY = st.sampled_from(["none", "single", "mixed"]) | JUNK
ROOTS = st.sampled_from(["/run/nvidia/mps", "/x\ny"]) | JUNK
VERSIONS = st.sampled_from(["0.17.4", "0.20.0", "v0.19.1"]) | JUNK


@settings(max_examples=600, deadline=None, database=None)
@given(time_slicing=SPEC | st.none(), mps=SPEC | st.none(), strategy=STRATEGY, root=ROOTS, version=VERSIONS)
def test_no_uncaught_exception_and_accepted_means_loadable(time_slicing: Any, mps: Any, strategy: Any, root: Any,
                                                          version: Any) -> None:
    errors = gs.gpu_sharing_errors(time_slicing, mps, strategy, root, version)
    assert isinstance(errors, list)
    assert all(isinstance(e, str) and "\n" not in e for e in errors)
    if errors:
        with pytest.raises(AnsibleFilterError) as err:
            gs.gpu_sharing_config(time_slicing, mps, strategy, root, version)
        assert err.value.message == "; ".join(errors)
        return
    doc = gs.gpu_sharing_config(time_slicing, mps, strategy, root, version)
    release = gs._parse_version(version)
    loaded = oracle.load(yaml.safe_dump(doc, sort_keys=False), version=release)
    spec = mps or time_slicing
    if spec:
        suffix = ".shared" if spec.get("rename_by_default") else ""
        assert loaded.advertised() == {r["name"] + suffix: r["replicas"] for r in spec["resources"]}
        assert loaded.strategy == ("mps" if mps else "time-slicing")
    assert loaded.warnings == []
    assert loaded.mig_strategy == strategy


@settings(max_examples=300, deadline=None, database=None)
@given(gpus=JUNK | st.lists(st.dictionaries(st.sampled_from(["index", "mig", "gpu_instances"]), JUNK), max_size=3),
       strategy=STRATEGY, layout=JUNK)
def test_host_resources_fail_only_with_a_message(gpus: Any, strategy: Any, layout: Any) -> None:
    try:
        names = gs.gpu_sharing_host_resources(gpus, strategy, layout)
    except AnsibleFilterError as exc:
        message = exc.message
    else:
        assert names == sorted(set(names))
        return
    assert message.startswith(("gpu_sharing_host_resources: ", "gpu_sharing_mig_resource: "))


def test_empty_list_as_a_name_is_a_sentence_not_a_crash() -> None:
    spec = {"resources": [{"name": [], "replicas": 2}, {"name": [], "replicas": 2}]}
    assert gs.gpu_sharing_errors(spec, None, "none") == [
        "nvidia_gpu_sharing_time_slicing.resources[0].name must be nvidia.com/gpu or nvidia.com/mig-<profile> with "
        "'+' written as '.' (e.g. nvidia.com/mig-1g.10gb.me; got [])",
        "nvidia_gpu_sharing_time_slicing.resources[1].name must be nvidia.com/gpu or nvidia.com/mig-<profile> with "
        "'+' written as '.' (e.g. nvidia.com/mig-1g.10gb.me; got [])"]
