"""Testinfra checks (podman backend) of the nvidia_dcgm scenario: host engine, health watches, exporter metrics."""

from __future__ import annotations

import json
import re
import urllib.request

STATE = "/var/lib/nvidia-sim/state.json"
METRICS = "http://127.0.0.1:9400/metrics"


def _gpus(host) -> list[dict]:
    return json.loads(host.file(STATE).content_string)["gpus"]


def test_dcgm4_for_cuda12_installed_without_dcgm3(host) -> None:
    assert host.package("datacenter-gpu-manager-4-core").is_installed
    assert host.package("datacenter-gpu-manager-4-cuda12").is_installed
    assert not host.package("datacenter-gpu-manager-4-cuda13").is_installed
    assert not host.package("datacenter-gpu-manager").is_installed


def test_host_engine_running_and_sees_every_gpu(host) -> None:
    service = host.service("nvidia-dcgm")
    assert service.is_running
    assert service.is_enabled
    out = host.check_output("dcgmi discovery -l")
    assert f"{len(_gpus(host))} GPU" in out


def test_health_watches_set(host) -> None:
    doc = json.loads(host.check_output("dcgmi health -c -j"))
    assert sorted(doc["watched_systems"]) == ["m", "p", "t"]


def test_exporter_bound_to_loopback_with_our_counters(host) -> None:
    service = host.service("nvidia-dcgm-exporter")
    assert service.is_running
    assert service.is_enabled
    dropin = host.file("/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpufleet.conf").content_string
    assert "-f /etc/dcgm-exporter/gpufleet-counters.csv -a 127.0.0.1:9400" in dropin
    assert host.socket("tcp://127.0.0.1:9400").is_listening


def test_metrics_show_every_gpu_of_the_host() -> None:
    """Scraped from the test machine itself: the hosts share its network."""
    with urllib.request.urlopen(METRICS, timeout=10) as resp:
        text = resp.read().decode()
    gpus = sorted({int(m) for m in re.findall(r'(?m)^DCGM_FI_DEV_GPU_TEMP\{[^}]*\bgpu="(\d+)"', text)})
    assert gpus == [0, 1, 2, 3]
    assert re.search(r'(?m)^DCGM_FI_DEV_GPU_TEMP\{[^}]*UUID="GPU-[0-9a-f-]+"', text)
