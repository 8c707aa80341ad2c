"""nvidia_driver on an HGX B200 (NVLink 5: Blackwell GPUs behind fourth-generation NVSwitches), issue 17.

One 8xB200-NVSwitch podman host started from the prepared ``nvswitch-570`` baseline image (NVML bindings, driver
570 and its fabric manager; see molecule/_shared/lab_hosts.py), then the role with branch 580 and the open kernel
modules:

1. converge: driver 580 with the open modules, ``nvlsm`` at exactly the driver's version and held, started before the
   fabric manager (the fabric manager's "configured" line comes after the subnet manager is up), the InfiniBand
   modules skipped on this container host with the message, and every GPU's fabric Completed/Success through NVML
   (read on the host with the unmodified pynvml, not through the role);
2. a second run changes nothing;
3. with ``nvlsm`` masked (and so stopped), verification fails naming every GPU whose fabric did not complete.

Chosen over a Molecule scenario: one host from an image other tests already build, three playbook runs, so the
proof costs about a minute of CI instead of a scenario's converge/idempotence/verify on fresh hosts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lab_play import results as all_results
from _lab_play import run_playbook

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.podman import containers_conf, project_root

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

ROOT = project_root()
HOST = "nvl5-b200"
DRIVER = "580.105.08"
PLAYBOOK = """\
- name: nvidia_driver on an NVLink 5 HGX host
  hosts: all
  gather_facts: true
  vars:
    nvidia_driver_branch: "580"
    nvidia_driver_kernel_module: open
  roles:
    - role: gpufleet.nvidia.nvidia_driver
"""
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


def _lab_hosts() -> Any:
    spec = importlib.util.spec_from_file_location("lab_hosts", ROOT / "molecule" / "_shared" / "lab_hosts.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The host from the prepared baseline image, the playbook and an inventory; everything removed afterwards."""
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    work = tmp_path_factory.mktemp("nvl5")
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {HOST: ANSIBLE_HOST_VARS}}}), encoding="utf-8")
    # the simulated repository's variables (URL, key and its fingerprint), as every sim inventory has them
    (work / "group_vars").symlink_to(ROOT / "inventories" / "sim" / "group_vars")
    (work / "site.yml").write_text(PLAYBOOK, encoding="utf-8")
    server_pid = reposerver.start()
    try:
        image = _lab_hosts().ensure_baselines({"nvswitch-570"})["nvswitch-570"]
        start_hosts([HostSpec(HOST, "8xB200-NVSwitch", "127.0.219.1")], image=image)
        yield {"work": work, "inventory": inventory, "playbook": work / "site.yml"}
    finally:
        stop_hosts([HOST])
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def run_role(lab: dict[str, Path], *extra: str) -> tuple[int, dict[str, Any]]:
    rc, doc = run_playbook(lab["inventory"], lab["playbook"], extra, work=lab["work"])
    results = all_results(doc)
    changed = [task["task"]["name"] for play in doc["plays"] for task in play["tasks"]
               if any(r.get("changed") for r in task["hosts"].values())]
    return rc, {"failed": [r.get("msg", "") for r in results if r.get("failed")], "changed": changed,
                "debug": [str(r.get("msg", "")) for r in results if "msg" in r and not r.get("failed")]}


def version(package: str) -> str:
    return exec_in(HOST, ["dpkg-query", "-W", "-f", "${Version} ${db:Status-Want}", package]).strip()


def monotonic_start(unit: str) -> int:
    out = exec_in(HOST, ["systemctl", "show", "--property=ActiveEnterTimestampMonotonic", unit])
    return int(out.strip().split("=", 1)[1])


def fabric() -> list[list[Any]]:
    return list(json.loads(exec_in(HOST, ["/opt/gpufleet/venv/bin/python3", "-c", FABRIC])))


def test_converges_with_nvlsm_before_the_fabric_manager(lab: dict[str, Path]) -> None:
    rc, out = run_role(lab)
    assert (rc, out["failed"]) == (0, []), out["failed"]
    assert version("nvidia-kernel-open-dkms") == f"{DRIVER}-1 hold"
    assert version("nvidia-fabricmanager") == f"{DRIVER}-1 hold"  # unsuffixed from R580, as NVIDIA names it
    assert version("nvlsm") == f"{DRIVER}-1 hold"
    assert exec_in(HOST, ["systemctl", "is-active", "nvlsm", "nvidia-fabricmanager"]).split() == ["active", "active"]
    assert monotonic_start("nvlsm") < monotonic_start("nvidia-fabricmanager")
    fm_log = exec_in(HOST, ["cat", "/var/log/fabricmanager.log"])
    current = fm_log[fm_log.rindex(f"Fabric Manager version {DRIVER}"):]
    assert "Detected NVLink 5 system" in current
    assert "Successfully configured all the available NVSwitches (2)" in current
    assert "waiting for the NVLink Subnet Manager" not in current
    assert (f"nvidia_driver: {HOST} is a container; not loading ib_umad, mlx5_ib (a kernel-only step: the host "
            "kernel serves them).") in out["debug"]
    gpus = fabric()
    assert len(gpus) == 8
    assert {(state, status) for state, status, _, _ in gpus} == {(3, 0)}          # Completed, Success
    assert all(clique != 0 and uuid != "00" * 16 for _, _, clique, uuid in gpus)


def test_second_run_changes_nothing(lab: dict[str, Path]) -> None:
    rc, out = run_role(lab)
    assert (rc, out["failed"]) == (0, []), out["failed"]
    assert out["changed"] == []


def test_masked_nvlsm_fails_verification_naming_the_gpus(lab: dict[str, Path]) -> None:
    exec_in(HOST, ["systemctl", "mask", "--now", "nvlsm"])
    try:
        bus_ids = [g["pci"]["bus_id"] for g in json.loads(exec_in(HOST, ["cat", "/var/lib/nvidia-sim/state.json"]))
                   ["gpus"]]
        rc, out = run_role(lab, "nvidia_driver_fabric_timeout=5")
        assert rc != 0
        listed = "; ".join(f"GPU {i} ({bus}): fabric state In Progress" for i, bus in enumerate(bus_ids))
        assert out["failed"] == [
            f"nvidia_driver: the NVLink fabric of 8 GPUs on {HOST} did not complete within 5 s: {listed}. Check the "
            "fabric manager's log and the NVLink Subnet Manager (systemctl status nvlsm)."]
        assert (f"WARNING nvidia_driver: nvlsm is masked on {HOST}; not starting it. Without it the GPUs' fabric "
                "does not complete (systemctl unmask nvlsm).") in out["debug"]
        assert {state for state, _, _, _ in fabric()} == {2}                      # In Progress
    finally:
        exec_in(HOST, ["systemctl", "unmask", "nvlsm"])
