"""Testinfra checks (podman backend) of the nvidia_driver scenario: real state on each simulated host."""

from __future__ import annotations

import json
import re

import pytest

STATE = "/var/lib/nvidia-sim/state.json"
#: The role's documented default branch, 580, at the version the simulated repository serves for it; from R580 on
#: NVIDIA's repository names the fabric manager without the branch suffix (docs/roles.md, "Package names").
VERSION = "580.105.08-1"
DRIVER_PACKAGES = ("nvidia-driver-pinning-580", "cuda-drivers-580", "nvidia-driver", "nvidia-kernel-open-dkms",
                   "libnvidia-ml1", "nvidia-smi", "nvidia-persistenced", "nvidia-cuda-mps")
FM_PACKAGE = "nvidia-fabricmanager"
#: Each platform's preset (molecule.yml): GPUs and whether it has NVSwitches.
EXPECTED = {"drv-a30": (4, False)}
SMI_LINE = re.compile(r"^GPU \d+: .+ \(UUID: (GPU-[0-9a-f-]+)\)$")


def _name(host) -> str:
    return host.check_output("hostname")


def _selections(host) -> dict[str, str]:
    out = host.check_output("dpkg --get-selections")
    return dict(line.split() for line in out.splitlines() if line.strip())


@pytest.mark.parametrize("package", DRIVER_PACKAGES)
def test_driver_packages_installed_at_one_version_and_held(host, package: str) -> None:
    pkg = host.package(package)
    assert pkg.is_installed, package
    assert pkg.version == VERSION
    assert _selections(host)[package] == "hold"


def test_proprietary_module_package_absent(host) -> None:
    assert not host.package("nvidia-kernel-dkms").is_installed


def test_fabric_manager_only_with_nvswitches(host) -> None:
    _, nvswitch = EXPECTED[_name(host)]
    fm = host.package(FM_PACKAGE)
    assert fm.is_installed is nvswitch
    if nvswitch:
        assert fm.version == VERSION
        assert _selections(host)[FM_PACKAGE] == "hold"
        service = host.service("nvidia-fabricmanager")
        assert service.is_enabled
        assert service.is_running
        log = host.file("/var/log/fabricmanager.log").content_string
        assert "Successfully configured all the available NVSwitches" in log


def test_repository_source_is_signed_by_the_pinned_keyring(host) -> None:
    sources = host.check_output("grep -l '^URIs: http://127.0.0.1:8765/' /etc/apt/sources.list.d/*.sources")
    assert sources.split() == ["/etc/apt/sources.list.d/gpufleet-127-0-0-1-8765.sources"]
    text = host.file(sources.strip()).content_string
    signed_by = re.search(r"^Signed-By: (\S+)$", text, re.MULTILINE)
    assert signed_by, text
    keyring = host.file(signed_by.group(1))
    assert keyring.exists
    assert keyring.path.startswith("/usr/share/keyrings/gpufleet-")
    assert keyring.mode == 0o644
    fingerprints = host.check_output(f"gpg --batch --show-keys --with-colons {keyring.path} | grep '^fpr' | head -1")
    assert keyring.path.endswith(fingerprints.strip(":").split(":")[-1][-16:].lower() + ".gpg")
    assert not host.file("/etc/apt/trusted.gpg").exists


def test_nouveau_blacklisted(host) -> None:
    text = host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string
    assert "Ansible managed" in text
    assert [line for line in text.splitlines() if line and not line.startswith("#")] == [
        "blacklist nouveau", "options nouveau modeset=0"]


def test_module_parameters_where_set(host) -> None:
    """converge.yml sets one; the file is absent where none is set: molecule/site test_driver_defaults."""
    params = host.file("/etc/modprobe.d/nvidia.conf")
    assert "options nvidia NVreg_EnableStreamMemOPs=1" in params.content_string.splitlines()


def test_persistenced_enabled_running_and_overridden_where_asked(host) -> None:
    """converge.yml asks for arguments; no override where none is asked: molecule/site test_driver_defaults."""
    service = host.service("nvidia-persistenced")
    assert service.is_enabled
    assert service.is_running
    override = host.file("/etc/systemd/system/nvidia-persistenced.service.d/gpufleet.conf")
    assert "ExecStart=/usr/bin/nvidia-persistenced --user root --verbose" in override.content_string
    assert "--user root" in host.check_output("ps -o args= -C nvidia-persistenced")


def test_nvidia_smi_lists_the_hosts_gpus(host) -> None:
    gpus, _ = EXPECTED[_name(host)]
    state = json.loads(host.file(STATE).content_string)
    listed = [SMI_LINE.match(line) for line in host.check_output("nvidia-smi -L").splitlines()]
    assert all(listed)
    assert [m.group(1) for m in listed if m] == [g["uuid"] for g in state["gpus"]]
    assert len(listed) == gpus


def test_nvml_python_venv(host) -> None:
    script = "import importlib.metadata as m, pynvml; print(m.version('nvidia-ml-py'))"
    version = host.check_output(f'/opt/gpufleet/venv/bin/python3 -c "{script}"')
    assert version == "13.615.71"
    cfg = host.file("/opt/gpufleet/venv/pyvenv.cfg").content_string
    assert "include-system-site-packages = true" in cfg
