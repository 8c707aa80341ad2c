"""Testinfra checks (podman backend) of the site scenario: every stage of site.yml did its part on each host.

Baseline (driver, fabric manager, toolkit, NVML bindings) everywhere; MIG on the A30 host; MPS on the L40S host;
the device plugin's sharing config on the H100 (time-slicing) and L40S (MPS) hosts; DCGM + exporter and a
healthy health verdict everywhere. Expected values come from the platforms (molecule.yml), the sim inventory's
group_vars (MIG layout `balanced`, MPS) and this scenario's host_vars, never from the roles.
"""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
import yaml

#: Each platform's preset (molecule.yml): GPUs and whether it has NVSwitches.
EXPECTED = {"site-h100": (8, True), "site-a30": (4, False), "site-l40s": (2, False)}
SMI_LINE = re.compile(r"^GPU \d+: .+ \(UUID: (GPU-[0-9a-f-]+)\)$")


def _name(host) -> str:
    return host.check_output("hostname")


def _held(host) -> set[str]:
    out = host.check_output("dpkg --get-selections")
    return {line.split()[0] for line in out.splitlines() if line.split()[1:] == ["hold"]}


#: site.yml pins no branch: the driver role's documented default, 580, whose fabric manager package NVIDIA's
#: repository names without the branch suffix (docs/roles.md, "Package names").
BRANCH, FM_PACKAGE = "580", "nvidia-fabricmanager"


@pytest.mark.parametrize(
    "package",
    [f"nvidia-driver-pinning-{BRANCH}", f"cuda-drivers-{BRANCH}", "nvidia-driver", "nvidia-kernel-open-dkms",
     "libnvidia-ml1", "nvidia-container-toolkit", "nvidia-container-toolkit-base",
     "libnvidia-container-tools", "libnvidia-container1"],
)
def test_baseline_packages_held(host, package: str) -> None:
    assert host.package(package).is_installed
    assert package in _held(host)


def test_fabric_manager_follows_nvswitches(host) -> None:
    """On the NVSwitch host: at exactly the driver's version, held, enabled and running, and the switches it
    configured in its log (the claims the nvidia_driver scenario's 8xH100 carried until issue 33)."""
    _, nvswitch = EXPECTED[_name(host)]
    assert host.package(FM_PACKAGE).is_installed is nvswitch
    if nvswitch:
        assert host.package(FM_PACKAGE).version == host.package("nvidia-driver").version
        assert host.service("nvidia-fabricmanager").is_enabled
        assert host.service("nvidia-fabricmanager").is_running
        assert FM_PACKAGE in _held(host)
        log = host.file("/var/log/fabricmanager.log").content_string
        assert "Successfully configured all the available NVSwitches" in log


def test_driver_defaults(host) -> None:
    """site.yml sets no driver options: the open kernel modules only, no module parameters file and no
    persistenced override (the nvidia_driver scenario proves them where they are set)."""
    assert host.package("nvidia-kernel-open-dkms").is_installed
    assert not host.package("nvidia-kernel-dkms").is_installed
    assert not host.file("/etc/modprobe.d/nvidia.conf").exists
    assert not host.file("/etc/systemd/system/nvidia-persistenced.service.d/gpufleet.conf").exists


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


def test_cdi_names_exactly_the_mig_devices_that_exist(host) -> None:
    """The MIG play runs after the toolkit's: the spec must follow the layout, not the GPUs as they were before it.

    Truth is ``nvidia-smi -L`` after the run; the A30 host must list MIG devices at all (4 GPUs x 3 instances of
    layout ``balanced``), the others none.
    """
    smi = host.check_output("nvidia-smi -L")
    existing = set(re.findall(r"\(UUID: (MIG-[0-9a-f-]+)\)", smi))
    listed = {line.split("=", 1)[1] for line in host.check_output("nvidia-ctk cdi list").splitlines()
              if line.startswith("nvidia.com/gpu=MIG-")}
    assert len(existing) == (12 if _name(host) == "site-a30" else 0), smi
    assert listed == existing


def test_nvml_bindings_see_the_gpus(host) -> None:
    script = "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())"
    assert int(host.check_output(f'/opt/gpufleet/venv/bin/python3 -c "{script}"')) == EXPECTED[_name(host)][0]


def test_blacklist_and_source(host) -> None:
    assert "blacklist nouveau" in host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string
    assert "Signed-By: /usr/share/keyrings/gpufleet-" in host.file(
        "/etc/apt/sources.list.d/gpufleet-127-0-0-1-8765.sources").content_string


#: the ampere group's MIG layout `balanced`, A30 entry: on every GPU
A30_GPU_INSTANCES = {"2g.12gb": 1, "1g.6gb": 2}
#: `nvidia-smi mig -lgi` rows: GPU, name, profile id, instance id, placement
LGI_ROW = re.compile(r"^\|\s+(\d+)\s+MIG (\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s+\|$")
#: host -> (sharing kind in the device plugin's config, replicas), from host_vars/; None: no config
SHARING = {"site-h100": ("timeSlicing", 4), "site-a30": None, "site-l40s": ("mps", 2)}


def _address(host) -> str:
    return json.loads(host.file("/etc/ansible/facts.d/gpufleet_lab.fact").content_string)["loopback"]


def test_mig_layout_only_on_the_ampere_host(host) -> None:
    counts: dict[int, dict[str, int]] = {}
    out = host.run("nvidia-smi mig -lgi")
    for line in out.stdout.splitlines():
        match = LGI_ROW.match(line.strip())
        if match:
            per_gpu = counts.setdefault(int(match.group(1)), {})
            per_gpu[match.group(2)] = per_gpu.get(match.group(2), 0) + 1
    if _name(host) == "site-a30":
        assert counts == dict.fromkeys(range(4), A30_GPU_INSTANCES)
        record = json.loads(host.file("/etc/gpufleet/mig-state.json").content_string)
        assert (record["state"], record["layout_name"]) == ("success", "balanced")
    else:
        assert counts == {}
        assert not host.file("/etc/gpufleet/mig-state.json").exists


def test_mps_only_on_the_ada_host(host) -> None:
    service = host.service("nvidia-mps.service")
    if _name(host) == "site-l40s":
        assert service.is_running
        assert service.is_enabled
        answer = host.check_output("echo get_default_active_thread_percentage | "
                                   "CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps /usr/bin/nvidia-cuda-mps-control")
        assert answer == "50.0"
    else:
        assert not service.is_running


def test_device_plugin_sharing_config(host) -> None:
    config = host.file("/etc/nvidia-device-plugin/config.yaml")
    expected = SHARING[_name(host)]
    if expected is None:
        assert not config.exists
        return
    kind, replicas = expected
    doc = yaml.safe_load(config.content_string)
    assert doc["version"] == "v1"
    assert list(doc["sharing"]) == [kind]
    assert [(r["name"], r["replicas"]) for r in doc["sharing"][kind]["resources"]] == [("nvidia.com/gpu", replicas)]


def test_dcgm_host_engine_and_exporter(host) -> None:
    address = _address(host)
    for unit in ("nvidia-dcgm", "nvidia-dcgm-exporter"):
        assert host.service(unit).is_running, unit
        assert host.service(unit).is_enabled, unit
    with urllib.request.urlopen(f"http://{address}:9400/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    gpus = set(re.findall(r'(?m)^DCGM_FI_DEV_GPU_TEMP\{[^}]*\bgpu="(\d+)"', metrics))
    assert gpus == {str(i) for i in range(EXPECTED[_name(host)][0])}


def test_health_verdict_is_ok(host) -> None:
    report = json.loads(host.file("/var/lib/gpufleet/health.json").content_string)
    assert report["status"] == "ok", [c for c in report["checks"] if c["status"] != "ok"]
    assert report["gpu_count"] == EXPECTED[_name(host)][0]
