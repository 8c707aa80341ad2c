"""Testinfra checks (podman backend) of the nvidia_driver_nvlink5 scenario, after converge, idempotence and check:
driver 580 with the open kernel modules, nvlsm at exactly the driver's version, held and started before the fabric
manager, the fabric manager's log of this start, and every GPU's fabric Completed/Success read with the unmodified
pynvml on the host (not through the role)."""

from __future__ import annotations

import json

#: the 580 driver of the simulated repository (simulator/src/gpufleet_sim/packaging.py)
DRIVER = "580.105.08"
VENV_PYTHON = "/opt/gpufleet/venv/bin/python3"
FABRIC = """
import json, ctypes, pynvml as N
N.nvmlInit()
out = []
for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    info = N.c_nvmlGpuFabricInfoV_t()
    N.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
    out.append([info.state, info.status, info.cliqueId, bytes(info.clusterUuid).hex()])
print(json.dumps(out))
"""


def _version(host, package: str) -> str:
    return host.check_output("dpkg-query -W -f '${Version} ${db:Status-Want}' %s", package)


def _monotonic_start(host, unit: str) -> int:
    out = host.check_output("systemctl show --property=ActiveEnterTimestampMonotonic %s", unit)
    return int(out.split("=", 1)[1])


def test_driver_580_open_modules_fabric_manager_and_nvlsm_held_at_the_driver_version(host) -> None:
    assert _version(host, "nvidia-kernel-open-dkms") == f"{DRIVER}-1 hold"
    assert _version(host, "nvidia-fabricmanager") == f"{DRIVER}-1 hold"  # unsuffixed from R580
    assert _version(host, "nvlsm") == f"{DRIVER}-1 hold"


def test_nvlsm_started_before_the_fabric_manager(host) -> None:
    assert host.check_output("systemctl is-active nvlsm nvidia-fabricmanager").split() == ["active", "active"]
    assert _monotonic_start(host, "nvlsm") < _monotonic_start(host, "nvidia-fabricmanager")


def test_fabric_manager_configured_the_nvlink5_switches_without_waiting(host) -> None:
    log = host.file("/var/log/fabricmanager.log").content_string
    current = log[log.rindex(f"Fabric Manager version {DRIVER}"):]
    assert "Detected NVLink 5 system" in current
    assert "Successfully configured all the available NVSwitches (2)" in current
    assert "waiting for the NVLink Subnet Manager" not in current


def test_every_gpu_fabric_completed_as_a_single_node_system(host) -> None:
    """An HGX B200 is one NVSwitch system: Completed/Success with clique 0 and a zero cluster UUID, as the real
    580 driver reports a single-node HGX (tests/data/ground-truth/public/H100_SXM_HGX__xml__1; issue 27)."""
    gpus = json.loads(host.check_output("%s -c %s", VENV_PYTHON, FABRIC))
    assert len(gpus) == 8
    assert {(state, status) for state, status, _, _ in gpus} == {(3, 0)}          # Completed, Success
    assert {(clique, uuid) for _, _, clique, uuid in gpus} == {(0, "00" * 16)}
