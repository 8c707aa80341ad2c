"""Testinfra checks (podman backend) of the nvidia_mps scenario: one MPS daemon per GPU, answering, with limits;
the device plugin's MPS sharing config (nvidia_gpu_sharing)."""

from __future__ import annotations

import json

import pytest
import yaml

STATE = "/var/lib/nvidia-sim/state.json"
CONTROL = "/usr/bin/nvidia-cuda-mps-control"


def _uuids(host) -> list[str]:
    return [g["uuid"] for g in json.loads(host.file(STATE).content_string)["gpus"]]


def _ask(host, uuid: str, command: str) -> str:
    return host.check_output(f"echo {command} | CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps/{uuid} {CONTROL}")


def test_one_daemon_per_gpu_running_and_enabled(host) -> None:
    uuids = _uuids(host)
    assert len(uuids) == 2
    for uuid in uuids:
        service = host.service(f"nvidia-mps@{uuid}.service")
        assert service.is_running, uuid
        assert service.is_enabled, uuid
    assert not host.service("nvidia-mps.service").is_running


def test_daemons_answer_with_the_configured_percentage(host) -> None:
    for uuid in _uuids(host):
        assert _ask(host, uuid, "get_default_active_thread_percentage") == "50.0"


def test_pinned_memory_limit_applied(host) -> None:
    for uuid in _uuids(host):
        assert _ask(host, uuid, "'get_default_device_pinned_mem_limit 0'") == "8G"


def test_compute_mode_exclusive_process(host) -> None:
    out = host.check_output("nvidia-smi --query-gpu=uuid,compute_mode --format=csv,noheader")
    modes = dict(line.split(", ") for line in out.splitlines())
    assert modes == dict.fromkeys(_uuids(host), "Exclusive_Process")


@pytest.mark.parametrize("kind", ["pipe", "log"])
def test_directories_least_privilege(host, kind: str) -> None:
    root = "/run/nvidia-mps" if kind == "pipe" else "/var/log/nvidia-mps"
    for uuid in _uuids(host):
        directory = host.file(f"{root}/{uuid}")
        assert directory.is_directory
        assert (directory.user, directory.group, directory.mode) == ("root", "nvidia-mps", 0o750)


def test_side_effect_left_no_client_and_daemons_up(host) -> None:
    """side_effect.yml tried to stop MPS with a client connected; the refusal must have left everything running."""
    for uuid in _uuids(host):
        assert host.service(f"nvidia-mps@{uuid}.service").is_running
        servers = _ask(host, uuid, "get_server_list").split()
        clients = [c for s in servers for c in _ask(host, uuid, f"'get_client_list {s}'").split()]
        assert clients == []


def test_device_plugin_config_shares_each_gpu_with_mps(host) -> None:
    # NVIDIA k8s-device-plugin config v1: sharing.mps.resources, and the MPS root the plugin needs with MPS
    config = host.file("/etc/nvidia-device-plugin/config.yaml")
    assert (config.user, config.mode) == ("root", 0o644)
    doc = yaml.safe_load(config.content_string)
    assert doc["version"] == "v1"
    assert doc["flags"]["mpsRoot"] == "/run/nvidia/mps"
    assert [(r["name"], r["replicas"]) for r in doc["sharing"]["mps"]["resources"]] == [("nvidia.com/gpu", 2)]
