"""Testinfra checks (podman backend) of the site scenario: every baseline role did its part on each host."""

from __future__ import annotations

import json
import re

import pytest

#: Each platform's preset (molecule.yml): GPUs and whether it has NVSwitches.
EXPECTED = {"site-h100": (8, True), "site-l40s": (2, False)}
SMI_LINE = re.compile(r"^GPU \d+: .+ \(UUID: (GPU-[0-9a-f-]+)\)$")


def _name(host) -> str:
    return host.check_output("hostname")


def _held(host) -> set[str]:
    out = host.check_output("dpkg --get-selections")
    return {line.split()[0] for line in out.splitlines() if line.split()[1:] == ["hold"]}


@pytest.mark.parametrize(
    "package",
    ["nvidia-driver-pinning-570", "cuda-drivers-570", "nvidia-driver", "nvidia-kernel-open-dkms",
     "libnvidia-ml1", "nvidia-container-toolkit", "nvidia-container-toolkit-base",
     "libnvidia-container-tools", "libnvidia-container1"],
)
def test_baseline_packages_held(host, package: str) -> None:
    assert host.package(package).is_installed
    assert package in _held(host)


def test_fabric_manager_follows_nvswitches(host) -> None:
    _, nvswitch = EXPECTED[_name(host)]
    assert host.package("nvidia-fabricmanager-570").is_installed is nvswitch
    if nvswitch:
        assert host.service("nvidia-fabricmanager").is_running
        assert "nvidia-fabricmanager-570" in _held(host)


def test_driver_lists_the_gpus(host) -> None:
    gpus, _ = EXPECTED[_name(host)]
    state = json.loads(host.file("/var/lib/nvidia-sim/state.json").content_string)
    lines = host.check_output("nvidia-smi -L").splitlines()
    uuids = [m.group(1) for m in map(SMI_LINE.match, lines) if m]
    assert uuids == [g["uuid"] for g in state["gpus"]]
    assert len(uuids) == gpus


def test_services(host) -> None:
    assert host.service("nvidia-persistenced").is_running
    assert host.service("nvidia-persistenced").is_enabled


def test_cdi_names_every_gpu(host) -> None:
    state = json.loads(host.file("/var/lib/nvidia-sim/state.json").content_string)
    listed = host.check_output("nvidia-ctk cdi list").splitlines()
    assert all(f"nvidia.com/gpu={g['uuid']}" in listed for g in state["gpus"])


def test_nvml_bindings_see_the_gpus(host) -> None:
    script = "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())"
    assert int(host.check_output(f'/opt/gpufleet/venv/bin/python3 -c "{script}"')) == EXPECTED[_name(host)][0]


def test_blacklist_and_source(host) -> None:
    assert "blacklist nouveau" in host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string
    assert "Signed-By: /usr/share/keyrings/gpufleet-" in host.file(
        "/etc/apt/sources.list.d/gpufleet-127-0-0-1-8765.sources").content_string
