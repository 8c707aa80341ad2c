"""Testinfra checks (podman backend) of the nvidia_dcgm scenario: host engine, health watches, exporter metrics."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

STATE = "/var/lib/nvidia-sim/state.json"
# The lab records each host's own loopback address (hosts share one network); the sim inventory binds the host
# engine and the exporter there (inventories/sim/group_vars/all/services.yml).
LAB_FACT = "/etc/ansible/facts.d/gpufleet_lab.fact"


def _gpus(host) -> list[dict]:
    return json.loads(host.file(STATE).content_string)["gpus"]


@pytest.fixture
def address(host) -> str:
    return json.loads(host.file(LAB_FACT).content_string)["loopback"]


def test_dcgm4_for_cuda12_installed_without_dcgm3(host) -> None:
    assert host.package("datacenter-gpu-manager-4-core").is_installed
    assert host.package("datacenter-gpu-manager-4-cuda12").is_installed
    assert not host.package("datacenter-gpu-manager-4-cuda13").is_installed
    assert not host.package("datacenter-gpu-manager").is_installed


def test_host_engine_running_and_sees_every_gpu(host, address) -> None:
    service = host.service("nvidia-dcgm")
    assert service.is_running
    assert service.is_enabled
    dropin = host.file("/etc/systemd/system/nvidia-dcgm.service.d/gpufleet.conf").content_string
    assert f"-b {address} -p 5555" in dropin
    assert host.socket(f"tcp://{address}:5555").is_listening
    out = host.check_output(f"dcgmi discovery --host {address}:5555 -l")
    assert f"{len(_gpus(host))} GPU" in out


def test_health_watches_set(host, address) -> None:
    doc = json.loads(host.check_output(f"dcgmi health --host {address}:5555 -c -j"))
    assert sorted(doc["watched_systems"]) == ["m", "p", "t"]


def test_exporter_bound_to_loopback_with_our_counters(host, address) -> None:
    service = host.service("nvidia-dcgm-exporter")
    assert service.is_running
    assert service.is_enabled
    dropin = host.file("/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpufleet.conf").content_string
    assert f"-f /etc/dcgm-exporter/gpufleet-counters.csv -a {address}:9400" in dropin
    assert host.socket(f"tcp://{address}:9400").is_listening


def test_metrics_show_every_gpu_of_the_host(address) -> None:
    """Scraped from the test machine itself: the hosts share its network."""
    with urllib.request.urlopen(f"http://{address}:9400/metrics", timeout=10) as resp:
        text = resp.read().decode()
    gpus = sorted({int(m) for m in re.findall(r'(?m)^DCGM_FI_DEV_GPU_TEMP\{[^}]*\bgpu="(\d+)"', text)})
    assert gpus == [0, 1, 2, 3]
    assert re.search(r'(?m)^DCGM_FI_DEV_GPU_TEMP\{[^}]*UUID="GPU-[0-9a-f-]+"', text)


def test_a30_host_gets_the_profiling_counters(host) -> None:
    """The A30 is MIG-capable: nvidia_dcgm_exporter_profiling auto adds the DCGM_FI_PROF_* counters."""
    fields = [line.split(",")[0] for line in host.file("/etc/dcgm-exporter/gpufleet-counters.csv").content_string
              .splitlines() if line.startswith("DCGM_FI_")]
    assert "DCGM_FI_DEV_GPU_UTIL" in fields
    assert [f for f in fields if f.startswith("DCGM_FI_PROF_")] == [
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES"]


def test_hpc_job_mapping_labels_the_gpu_of_a_job(host, address) -> None:
    """A job file in the role's job-mapping directory (as a Slurm prolog writes it) labels that GPU's metrics."""
    dropin = host.file("/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpufleet.conf").content_string
    assert "Environment=DCGM_HPC_JOB_MAPPING_DIR=/run/gpufleet/dcgm-jobs" in dropin.splitlines()
    assert "d /run/gpufleet/dcgm-jobs 0755 root root -" in host.file(
        "/etc/tmpfiles.d/gpufleet-dcgm-job-mapping.conf").content_string.splitlines()
    host.run_expect([0], "echo 4242 > /run/gpufleet/dcgm-jobs/2")
    try:
        with urllib.request.urlopen(f"http://{address}:9400/metrics", timeout=10) as resp:
            text = resp.read().decode()
    finally:
        host.run_expect([0], "rm -f /run/gpufleet/dcgm-jobs/2")
    labelled = re.findall(r'(?m)^DCGM_FI_DEV_GPU_TEMP\{[^}]*\bgpu="(\d+)"[^}]*\bhpc_job="4242"', text)
    assert labelled == ["2"]
