"""gpu_monitoring's scrape targets from the inventory (plugins/module_utils/monitoring_targets.py): the targets and
labels of good inventories, the exact message for each bad value, and a fuzz of the entry point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter.monitoring import monitoring_targets
from ansible_collections.gpufleet.nvidia.plugins.module_utils.monitoring_targets import (
    TargetError,
    build_targets,
    host_record,
)
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]


def rec(host: str = "gpu-1", **over: Any) -> dict[str, Any]:
    base = {"host": host, "groups": ["gpu_nodes", "hopper"], "address": "10.0.0.1", "address_var": "ansible_host",
            "dcgm_exporter_enabled": None, "dcgm_exporter_listen": "0.0.0.0:9400", "gpu_names": None,
            "mig_layout": None}
    return {**base, **over}


def test_targets_and_labels_of_a_small_fleet() -> None:
    result = build_targets([
        rec("sim-a100-1", address="127.0.2.1", dcgm_exporter_listen="127.0.2.1:9400", mig_layout="balanced",
            gpu_names=["NVIDIA A100-SXM4-80GB"] * 8, groups=["all", "ampere", "gpu_nodes"]),
        rec("h100-1", dcgm_exporter_listen=":9400", gpu_names=[]),
        rec("l40s-1", address="fe80::1", dcgm_exporter_enabled=False),
    ], "127.0.0.1:9400", 9100)
    assert result == {
        "dcgm_exporter": [
            {"targets": ["10.0.0.1:9400"],
             "labels": {"host": "h100-1", "groups": ",gpu_nodes,hopper,", "exporter": "dcgm-exporter"}},
            {"targets": ["127.0.2.1:9400"],
             "labels": {"host": "sim-a100-1", "groups": ",ampere,gpu_nodes,", "exporter": "dcgm-exporter",
                        "gpu_model": "NVIDIA A100-SXM4-80GB", "mig_layout": "balanced"}},
        ],
        "node_exporter": [
            {"targets": ["10.0.0.1:9100"],
             "labels": {"host": "h100-1", "groups": ",gpu_nodes,hopper,", "exporter": "node_exporter"}},
            {"targets": ["[fe80::1]:9100"],
             "labels": {"host": "l40s-1", "groups": ",gpu_nodes,hopper,", "exporter": "node_exporter"}},
            {"targets": ["127.0.2.1:9100"],
             "labels": {"host": "sim-a100-1", "groups": ",ampere,gpu_nodes,", "exporter": "node_exporter",
                        "gpu_model": "NVIDIA A100-SXM4-80GB", "mig_layout": "balanced"}},
        ],
        "warnings": [],
    }


def test_an_unset_listen_address_is_nvidia_dcgms_loopback_default_and_warns() -> None:
    result = build_targets([rec(dcgm_exporter_listen=None)])
    assert result["dcgm_exporter"][0]["targets"] == ["127.0.0.1:9400"]
    assert result["warnings"] == [
        "gpu-1: dcgm-exporter listens on 127.0.0.1:9400 (nvidia_dcgm_exporter_listen), which only the host itself "
        "can reach; open it (e.g. 0.0.0.0:9400) unless Prometheus runs there"]


def test_the_default_is_nvidia_dcgms_own() -> None:
    dcgm = yaml.safe_load((REPO / "roles/nvidia_dcgm/defaults/main.yml").read_text(encoding="utf-8"))
    mine = yaml.safe_load((REPO / "roles/gpu_monitoring/defaults/main.yml").read_text(encoding="utf-8"))
    assert mine["gpu_monitoring_dcgm_exporter_listen_default"] == dcgm["nvidia_dcgm_exporter_listen"]


END = ". Nothing was written."


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([rec('gpu"1')], "gpu_monitoring: the inventory host 'gpu\"1' cannot be a label value; name hosts with "
                         "letters, digits and . _ - only"),
        ([rec("gpu-1\nx")], "gpu_monitoring: the inventory host 'gpu-1\\nx' cannot be a label value; name hosts with "
                            "letters, digits and . _ - only"),
        ([rec(groups=["gpu nodes"])], "gpu_monitoring: gpu-1: group 'gpu nodes' cannot be a label value; name groups "
                                      "with letters, digits and _ only"),
        ([rec(mig_layout='bal"anced')], "gpu_monitoring: gpu-1: nvidia_mig_layout cannot be a label value (got "
                                        "'bal\"anced'); name layouts with letters, digits and . _ - only"),
        ([rec(gpu_names=["NVIDIA H100\n"])], "gpu_monitoring: gpu-1: the GPU name 'NVIDIA H100\\n' in "
                                             "ansible_facts.gpufleet_gpus cannot be a label value (letters, digits, "
                                             "blanks and . _ ( ) / + - only); gather the facts again"),
        ([rec(address="10.0.0.1 ; rm")], "gpu_monitoring: gpu-1: ansible_host is not an IP address or DNS name (got "
                                         "'10.0.0.1 ; rm'); set gpu_monitoring_address to the address Prometheus "
                                         "scrapes the host on"),
        ([rec(dcgm_exporter_listen="0.0.0.0:99999")], "gpu_monitoring: gpu-1: nvidia_dcgm_exporter_listen is not "
                                                      "host:port (got '0.0.0.0:99999'); set it as the nvidia_dcgm "
                                                      "role reads it, e.g. 0.0.0.0:9400"),
        ([rec(dcgm_exporter_enabled="yes")], "gpu_monitoring: gpu-1: nvidia_dcgm_exporter_enabled must be true or "
                                             "false (got 'yes')"),
        ([rec("a", dcgm_exporter_listen=None), rec("b", address="10.0.0.2", dcgm_exporter_listen=None)],
         "gpu_monitoring: a, b: the same dcgm-exporter target 127.0.0.1:9400; Prometheus would scrape one exporter "
         "for all of them (set gpu_monitoring_address, or nvidia_dcgm_exporter_listen to an address of each host)"),
        ([rec("a"), rec("a")], "gpu_monitoring: a: listed twice"),
        ([rec('x"'), rec("b", mig_layout="a b")],
         "gpu_monitoring: the inventory host 'x\"' cannot be a label value; name hosts with letters, digits and . _ - "
         "only; b: nvidia_mig_layout cannot be a label value (got 'a b'); name layouts with letters, digits and . _ - "
         "only"),
    ],
    ids=["quote-in-host", "newline-in-host", "blank-in-group", "quote-in-layout", "newline-in-gpu-name",
         "command-in-address", "bad-port", "enabled-not-bool", "two-hosts-one-target", "host-twice",
         "every-problem-at-once"],
)
def test_bad_inventory_values_are_named(records: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(TargetError) as info:
        build_targets(records)
    assert str(info.value) == message + END
    with pytest.raises(AnsibleFilterError, match=r"^gpu_monitoring: "):
        monitoring_targets(records)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("x", "127.0.0.1:9400", 9100), "gpu_monitoring: the GPU hosts must be a list of host records (got 'x')"),
        (([], "127.0.0.1:9400", 0), "gpu_monitoring: gpu_monitoring_node_exporter_port must be a port 1-65535 (got 0)"),
        (([], "nowhere", 9100), "gpu_monitoring: gpu_monitoring_dcgm_exporter_listen_default is not host:port (got "
                                "'nowhere')"),
    ],
)
def test_bad_settings_are_named(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(TargetError) as info:
        build_targets(*args)
    assert str(info.value) == message + END


def test_host_record_reads_only_public_variables() -> None:
    hostvars = {"group_names": ["ampere"], "gpu_monitoring_address": "127.0.2.1", "ansible_host": "sim-a100-1",
                "nvidia_dcgm_exporter_listen": "127.0.2.1:9400", "nvidia_mig_layout": "balanced",
                "__nvidia_dcgm_exporter_all_counters": ["not read"],
                "ansible_facts": {"gpufleet_gpus": [{"name": "NVIDIA A100-SXM4-80GB", "index": 0}]}}
    assert host_record("sim-a100-1", hostvars) == {
        "host": "sim-a100-1", "groups": ["ampere"], "address": "127.0.2.1", "address_var": "gpu_monitoring_address",
        "dcgm_exporter_enabled": None, "dcgm_exporter_listen": "127.0.2.1:9400",
        "gpu_names": ["NVIDIA A100-SXM4-80GB"], "mig_layout": "balanced"}
    assert host_record("h", {})["gpu_names"] is None  # facts not gathered: gpu_model is left out
    assert host_record("h", {"ansible_host": "10.0.0.9"})["address_var"] == "ansible_host"


_ANY = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
_RECORD = st.fixed_dictionaries({}, optional={
    "host": st.text(max_size=12) | _ANY, "groups": st.lists(st.text(max_size=8), max_size=3) | _ANY,
    "address": st.sampled_from(["10.0.0.1", "::1", "[::1]", "gpu.example", "", "a b"]) | _ANY,
    "address_var": st.sampled_from(["gpu_monitoring_address", "ansible_host"]) | _ANY,
    "dcgm_exporter_enabled": _ANY,
    "dcgm_exporter_listen": st.sampled_from(["0.0.0.0:9400", ":9400", "[::]:1", "127.0.0.1:0", "x:y"]) | _ANY,
    "gpu_names": st.lists(st.text(max_size=10), max_size=3) | _ANY, "mig_layout": _ANY})


@settings(max_examples=300, deadline=None)
@given(records=st.lists(_RECORD | _ANY, max_size=4) | _ANY, listen=_ANY | st.just("0.0.0.0:9400"),
       port=_ANY | st.integers(min_value=-5, max_value=70000))
def test_fuzz_targets_or_a_named_error(records: Any, listen: Any, port: Any) -> None:
    try:
        result = build_targets(records, listen, port)
    except TargetError as exc:
        problems, text = exc.problems, str(exc)
    else:
        problems, text = [], ""
    if text:
        assert problems
        assert text.startswith("gpu_monitoring: ")
        return
    for kind in ("dcgm_exporter", "node_exporter"):
        for group in result[kind]:
            assert all(isinstance(v, str) and "\n" not in v and '"' not in v for v in group["labels"].values())
            assert len(group["targets"]) == 1
