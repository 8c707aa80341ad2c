"""nvidia_driver: the files the role writes (also those whose effect is skipped on container hosts)."""

from __future__ import annotations

import pytest

ROLE = "nvidia_driver"
HEADER = "#\n# Ansible managed\n#\n"


def test_nouveau_blacklist(render_file) -> None:
    text = render_file(ROLE, "blacklist-nouveau.conf.j2")
    assert text.startswith(HEADER)
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "blacklist nouveau", "options nouveau modeset=0"]


@pytest.mark.parametrize(
    ("params", "lines"),
    [
        ({"nvidia": {"NVreg_EnableStreamMemOPs": 1}}, ["options nvidia NVreg_EnableStreamMemOPs=1"]),
        ({"nvidia": {"NVreg_RegistryDwords": "RmGpuComputeExecTimeout=0", "NVreg_EnableGpuFirmware": False},
          "nvidia_uvm": {"uvm_perf_prefetch_enable": 0}},
         ["options nvidia NVreg_EnableGpuFirmware=0 NVreg_RegistryDwords=RmGpuComputeExecTimeout=0",
          "options nvidia_uvm uvm_perf_prefetch_enable=0"]),
        ({"nvidia_drm": {"modeset": True}}, ["options nvidia_drm modeset=1"]),
    ],
)
def test_module_parameters(render_file, params, lines) -> None:
    text = render_file(ROLE, "nvidia-modprobe.conf.j2", nvidia_driver_module_params=params)
    assert text.startswith(HEADER)
    assert [line for line in text.splitlines() if line and not line.startswith("#")] == lines


def test_unattended_upgrades_blacklist(render_file) -> None:
    text = render_file(ROLE, "unattended-upgrades-blacklist.j2")
    assert text.startswith("//\n// Ansible managed\n//\n")
    body = [line for line in text.splitlines() if not line.startswith("//")]
    assert body == ["Unattended-Upgrade::Package-Blacklist {", '    "nvidia-";', '    "libnvidia-";',
                    '    "cuda-drivers";', '    "libcuda";', "};"]


def test_dkms_mok_signing(render_file) -> None:
    text = render_file(ROLE, "dkms-mok.conf.j2", nvidia_driver_mok_key="/var/lib/shim-signed/mok/MOK.priv",
                       nvidia_driver_mok_cert="/var/lib/shim-signed/mok/MOK.der")
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        'mok_signing_key="/var/lib/shim-signed/mok/MOK.priv"', 'mok_certificate="/var/lib/shim-signed/mok/MOK.der"']


def test_persistenced_override(render_file) -> None:
    text = render_file(ROLE, "nvidia-persistenced-override.conf.j2",
                       nvidia_driver_persistenced_args="--user root --persistence-mode --verbose")
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "[Service]", "ExecStart=", "ExecStart=/usr/bin/nvidia-persistenced --user root --persistence-mode --verbose"]
