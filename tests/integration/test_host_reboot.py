"""Hosts that reboot (issue 20): a lab host restarts after ``reboot`` with a new boot id and power-cycled GPUs,
``nvidia_driver_reboot_ok: true`` reboots a host whose change needs it and the run goes on and converges, and after
a reboot the MIG layout comes back through ``gpufleet-mig-apply.service`` before the GPU clients (DCGM's host
engine and exporter) start, with ``gpu_health`` passing.

One podman host, a 4xA30 (MIG without NVSwitches), shared by the tests in order: the lab's own reboot first, then
the role refusing (null) and doing (true) the reboot that ``/run/reboot-required.pkgs`` asks for, on a host
converged from the bare image with the driver, the NVML bindings, the sim inventory's ``balanced`` MIG layout,
DCGM and gpu_health, then a reboot of the converged host with a GPU fallen off the bus.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lab_play import results, run_playbook

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, boot_id, exec_in, start_hosts, stop_hosts
from gpufleet_lab.image import ensure_image
from gpufleet_lab.podman import containers_conf, podman, project_root

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

ROOT = project_root()
HOST = "reboot-a30"
ADDRESS = "127.0.219.1"
STATE = "/var/lib/nvidia-sim/state.json"
SIM_PY = "/usr/lib/nvidia-sim/python"
PLAYBOOK = """\
- name: Driver, NVML bindings, MIG layout, DCGM and health
  hosts: all
  gather_facts: true
  roles:
    - role: gpufleet.nvidia.nvidia_driver
    - role: gpufleet.nvidia.nvml_python
    - role: gpufleet.nvidia.nvidia_mig
    - role: gpufleet.nvidia.nvidia_dcgm
    - role: gpufleet.nvidia.gpu_health
"""
REBOOT = """\
- name: Reboot
  hosts: all
  gather_facts: false
  tasks:
    - name: Reboot the host and wait for it
      ansible.builtin.reboot:
        reboot_timeout: 120
"""
#: the sim inventory's ``balanced`` layout on an A30 (inventories/sim/group_vars/ampere/mig.yml), as nvidia-smi -L
#: names the MIG devices, per GPU
BALANCED_A30 = ["MIG 1g.6gb", "MIG 1g.6gb", "MIG 2g.12gb"]
PENDING_MESSAGE = (
    f"nvidia_driver: {HOST} needs a reboot for the NVIDIA driver (/run/reboot-required.pkgs names libnvidia-ml1) "
    "and nvidia_driver_reboot_ok is not set. Set nvidia_driver_reboot_ok: true to let the role reboot the host, or "
    "false to reboot it yourself later. Nothing was changed.")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The repository server, the host and an inventory that shares the sim inventory's group variables."""
    reposerver.check_repo(reposerver.repo_dir())
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    ensure_image()
    work = tmp_path_factory.mktemp("host-reboot")
    inventory = work / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text(json.dumps({"all": {"children": {"gpu_nodes": {"children": {"ampere": {
        "hosts": {HOST: dict(ANSIBLE_HOST_VARS)}}}}}}}), encoding="utf-8")
    (inventory / "group_vars").symlink_to(ROOT / "inventories" / "sim" / "group_vars")
    (work / "site.yml").write_text(PLAYBOOK, encoding="utf-8")
    (work / "reboot.yml").write_text(REBOOT, encoding="utf-8")
    server_pid = reposerver.start()
    try:
        start_hosts([HostSpec(HOST, "4xA30", ADDRESS)])
        yield {"work": work, "inventory": inventory, "playbook": work / "site.yml", "reboot": work / "reboot.yml"}
    finally:
        stop_hosts([HOST])
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def state() -> dict[str, Any]:
    return json.loads(exec_in(HOST, ["cat", STATE]))


def edit_state(change: str) -> None:
    """Change the host's simulated hardware with the host's python3 (``doc``: the state document)."""
    code = (f"import json; p = {STATE!r}; doc = json.load(open(p)); {change}; "
            "open(p, 'w').write(json.dumps(doc, indent=2))")
    exec_in(HOST, ["python3", "-c", code])


def ansible_reboot(lab: dict[str, Path]) -> dict[str, Any]:
    """``ansible.builtin.reboot`` through the lab's connection; return its result."""
    rc, doc = run_playbook(lab["inventory"], lab["reboot"], work=lab["work"], timeout=300)
    (result,) = results(doc)
    assert rc == 0, (result.get("msg"), podman(["ps", "-a", "--format", "{{.Names}} {{.Status}}"]).stdout)
    return result


def run(lab: dict[str, Path], *extra: str, timeout: int = 900) -> tuple[int, dict[str, Any]]:
    rc, doc = run_playbook(lab["inventory"], lab["playbook"], extra, work=lab["work"], timeout=timeout)
    tasks = [(task["task"]["name"], result) for play in doc["plays"] for task in play["tasks"]
             for result in task["hosts"].values()]
    return rc, {"failed": [r.get("msg", "") for r in results(doc) if r.get("failed")],
                "changed": [name for name, r in tasks if r.get("changed")],
                "results": dict(tasks),
                "why": [f"{name}: {r.get('msg', '')} {str(r.get('stderr', ''))[-800:]} "
                        f"{str(r.get('stdout', ''))[-800:]}" for name, r in tasks
                        if r.get("failed") or r.get("unreachable")]}


def monotonic(unit: str, prop: str) -> int:
    return int(exec_in(HOST, ["systemctl", "show", "--value", "-p", prop, unit]).strip())


def mig_devices() -> list[list[str]]:
    """The MIG devices ``nvidia-smi -L`` lists under each GPU (profile names, sorted)."""
    gpus: list[list[str]] = []
    for line in exec_in(HOST, ["nvidia-smi", "-L"]).splitlines():
        if line.startswith("GPU "):
            gpus.append([])
        elif line.strip().startswith("MIG "):
            gpus[-1].append(line.strip().split(" Device")[0].strip())
    return [sorted(devices) for devices in gpus]


def test_a_lab_host_reboots_with_a_new_boot_id_and_power_cycled_gpus(lab: dict[str, Path]) -> None:
    before = boot_id(HOST)
    assert exec_in(HOST, ["cat", "/proc/sys/kernel/random/boot_id"]).strip() == before
    assert state()["boot_id"] == before
    # MIG enabled on GPU 1 but pending (an A30 needs a reset), persistence mode on, an XID recorded
    edit_state("g = doc['gpus'][1]; g['mig']['pending'] = 1; g['persistence_mode'] = 1; "
               "g['events'] = [{'seq': 1, 'type': 8, 'data': 13, 'gi_id': 4294967295, 'ci_id': 4294967295, "
               "'time': 0}]")
    result = ansible_reboot(lab)
    assert result["rebooted"] is True
    after = boot_id(HOST)
    assert after != before
    assert exec_in(HOST, ["cat", "/proc/sys/kernel/random/boot_id"]).strip() == after
    gpu = state()["gpus"][1]
    assert (gpu["mig"]["current"], gpu["persistence_mode"], gpu["events"]) == (1, 0, [])
    assert state()["boot_id"] == after
    # the boot id is the lab's to give: read-only inside the host
    proc = podman(["exec", HOST, "sh", "-c", "echo x > /proc/sys/kernel/random/boot_id"], check=False)
    assert proc.returncode != 0
    assert "Read-only file system" in proc.stderr
    assert exec_in(HOST, ["systemctl", "is-system-running"], check=False).strip() in ("running", "degraded")
    edit_state("doc['gpus'][1]['mig']['pending'] = 0; doc['gpus'][1]['mig']['current'] = 0")


def snapshot() -> dict[str, str]:
    files = "find /etc/apt/sources.list.d /etc/modprobe.d /usr/share/keyrings -type f -exec sha256sum {} + | sort"
    return {"dpkg": exec_in(HOST, ["dpkg", "-l"]), "files": exec_in(HOST, ["sh", "-c", files])}


def test_a_needed_reboot_without_reboot_ok_stops_before_any_change(lab: dict[str, Path]) -> None:
    exec_in(HOST, ["sh", "-c", "echo libnvidia-ml1 > /run/reboot-required.pkgs"])
    before = snapshot()
    rc, out = run(lab)
    assert rc == 2
    assert out["failed"] == [PENDING_MESSAGE]
    assert snapshot() == before


def test_reboot_ok_reboots_the_host_and_the_run_goes_on_and_converges(lab: dict[str, Path]) -> None:
    before = boot_id(HOST)
    rc, out = run(lab, "nvidia_driver_reboot_ok=true")
    assert (rc, out["failed"]) == (0, []), out["why"]
    (reboot,) = [r for name, r in out["results"].items()
                 if name.endswith("Reboot for the NVIDIA driver and wait for the host")]
    assert reboot["rebooted"] is True
    assert boot_id(HOST) != before
    assert exec_in(HOST, ["test", "-e", "/run/reboot-required.pkgs"], check=False) == ""
    assert podman(["exec", HOST, "test", "-e", "/run/reboot-required.pkgs"], check=False).returncode == 1
    # the roles after the reboot ran: the layout is on every GPU, DCGM runs, the health check passed
    assert mig_devices() == [BALANCED_A30] * 4
    assert exec_in(HOST, ["systemctl", "is-active", "nvidia-dcgm"]).strip() == "active"
    # the role applied the layout itself; the boot unit is enabled, to put it back at the next boot
    assert exec_in(HOST, ["systemctl", "is-enabled", "gpufleet-mig-apply"]).strip() == "enabled"
    rc, again = run(lab, "nvidia_driver_reboot_ok=true")
    assert (rc, again["failed"], again["changed"]) == (0, [], []), again["why"]


def host_clock_us() -> int:
    """CLOCK_MONOTONIC in microseconds, as systemd's ``*TimestampMonotonic`` read it (a container shares the
    machine's clock, so it does not restart at a lab reboot: a unit that ran after this reading ran in a later boot)."""
    return int(exec_in(HOST, ["python3", "-c", "import time; print(time.monotonic_ns() // 1000)"]).strip())


def health_watches() -> list[str]:
    out = exec_in(HOST, ["dcgmi", "health", "--host", f"{ADDRESS}:5555", "-c", "-j"])
    return sorted(json.loads(out)["watched_systems"])


def test_after_a_reboot_the_mig_layout_is_back_before_the_gpu_clients_and_health_passes(
        lab: dict[str, Path]) -> None:
    # a GPU falls off the bus on the converged host: the driver role's own check sees it and stops the run
    exec_in(HOST, ["python3", "-c", f"import sys; sys.path.insert(0, {SIM_PY!r}); "
                   "from nvidia_sim import hardware; hardware.inject('fallen-off-bus', '2', {})"])
    listing = exec_in(HOST, ["nvidia-smi", "-L"], check=False)
    assert "Unable to determine the device handle for gpu 2: GPU is lost." in listing
    rc, sick = run(lab, "nvidia_driver_reboot_ok=true", timeout=300)
    assert rc == 2, sick["why"]
    assert sick["failed"] == [
        f"nvidia_driver: nvidia-smi -L on {HOST} exited with status 15: {listing.strip()} but the PCI bus has 4; "
        "check the driver (dmesg, nvidia-smi) and reboot if the module is old."]
    before, clock = boot_id(HOST), host_clock_us()
    assert ansible_reboot(lab)["rebooted"] is True
    assert boot_id(HOST) != before
    # the power cycle took the instances away and brought GPU 2 back; gpufleet-mig-apply.service put the
    # recorded layout back at boot, before any Ansible run
    assert not any(gpu.get("lost") for gpu in state()["gpus"])
    assert mig_devices() == [BALANCED_A30] * 4
    assert exec_in(HOST, ["systemctl", "show", "--value", "-p", "Result", "gpufleet-mig-apply"]).strip() == "success"
    applied = monotonic("gpufleet-mig-apply.service", "ExecMainStartTimestampMonotonic")
    apply_done = monotonic("gpufleet-mig-apply.service", "ExecMainExitTimestampMonotonic")
    # ... in this boot, after nvidia-persistenced (its After=) and before the GPU clients (its Before=) started
    assert clock < monotonic("nvidia-persistenced.service", "ActiveEnterTimestampMonotonic") <= applied <= apply_done
    for client in ("nvidia-dcgm.service", "nvidia-dcgm-exporter.service"):
        started = monotonic(client, "ExecMainStartTimestampMonotonic")
        assert apply_done <= started, (client, apply_done, started)
    # persistence mode is back on: nvidia-persistenced set it again after the power cycle turned it off
    assert [gpu["persistence_mode"] for gpu in state()["gpus"]] == [1] * 4
    # DCGM's host engine forgets its health watches when it restarts (here: at boot) ...
    assert health_watches() == []
    rc, out = run(lab, "nvidia_driver_reboot_ok=true")
    # ... so the role sets them again: the one change a run after a reboot makes (the MIG role changes nothing)
    assert (rc, out["failed"], out["changed"]) == (
        0, [], ["gpufleet.nvidia.nvidia_dcgm : Set the health watches (a)"]), out["why"]
    assert health_watches() == ["d", "i", "m", "n", "p", "t"]
    (health,) = [r["health"] for name, r in out["results"].items()
                 if name == "gpufleet.nvidia.gpu_health : Check every GPU (one NVML session per host)"]
    assert (health["level"], health["status"]) == ("PASS", "ok"), health
    assert json.loads(exec_in(HOST, ["cat", "/var/lib/gpufleet/health.json"])) == health
