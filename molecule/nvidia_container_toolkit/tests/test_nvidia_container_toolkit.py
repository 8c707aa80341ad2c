"""Testinfra checks (podman backend) of the nvidia_container_toolkit scenario: real state on the simulated host."""

from __future__ import annotations

import json

import pytest

VERSION = "1.18.0-1"
PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1")


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_pinned_and_held(host, package: str) -> None:
    pkg = host.package(package)
    assert pkg.is_installed
    assert pkg.version == VERSION
    assert host.check_output(f"dpkg --get-selections {package}").split() == [package, "hold"]


def test_daemon_json_merged_and_own_keys_kept(host) -> None:
    doc = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert doc["data-root"] == "/srv/docker"
    assert doc["log-driver"] == "json-file"
    assert doc["log-opts"] == {"max-size": "10m"}
    assert doc["runtimes"]["nvidia"]["path"] in ("nvidia-container-runtime", "/usr/bin/nvidia-container-runtime")
    assert doc["default-runtime"] == "nvidia"


def test_containerd_drop_in_and_custom_config_kept(host) -> None:
    config = host.file("/etc/containerd/config.toml").content_string
    assert 'root = "/srv/containerd"' in config
    assert "SystemdCgroup = true" in config
    assert '"/etc/containerd/conf.d/*.toml"' in config
    dropin = host.file("/etc/containerd/conf.d/99-nvidia.toml").content_string
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dropin
    assert 'default_runtime_name = "nvidia"' in dropin


@pytest.mark.parametrize("unit", ["docker", "containerd"])
def test_runtime_restarted_once_for_its_config(host, unit: str) -> None:
    """Started by prepare, restarted once by converge; idempotence and check mode restart nothing."""
    assert host.service(unit).is_running
    starts = host.file(f"/var/log/{unit}-starts").content_string.split()
    assert len(starts) == 2, starts


def test_cdi_spec_lists_the_hosts_gpus(host) -> None:
    state = json.loads(host.file("/var/lib/nvidia-sim/state.json").content_string)
    # the toolkit ships nvidia-cdi-refresh.service: that unit owns the spec, at the path it writes; no static
    # spec beside it (it would keep naming devices that are gone)
    assert host.file("/var/run/cdi/nvidia.yaml").exists
    assert not host.file("/etc/cdi/nvidia.yaml").exists
    listed = host.check_output("nvidia-ctk cdi list").splitlines()
    for gpu in state["gpus"]:
        assert f"nvidia.com/gpu={gpu['uuid']}" in listed
    assert "nvidia.com/gpu=all" in listed


def test_cdi_refresh_enabled(host) -> None:
    assert host.service("nvidia-cdi-refresh").is_enabled


def test_one_signed_source_shared_with_the_driver(host) -> None:
    sources = host.check_output("ls /etc/apt/sources.list.d/").split()
    assert [s for s in sources if s.startswith("gpufleet-")] == ["gpufleet-127-0-0-1-8765.sources"]
    text = host.file("/etc/apt/sources.list.d/gpufleet-127-0-0-1-8765.sources").content_string
    assert "Signed-By: /usr/share/keyrings/gpufleet-" in text
