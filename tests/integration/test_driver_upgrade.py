"""playbooks/driver_upgrade.yml on two simulated hosts: a branch change 550 -> 570, the busy-GPU refusal, and a
roll with drain hooks, one host at a time.

Two podman hosts (2xL40S) start from the prepared ``plain-550`` image (molecule/_shared/lab_hosts.py: nvml_python
and driver 550 from the simulated repository, converged once and committed; issue 33: the fresh install these
tests used to repeat is proven by the image's build, the nvidia_driver scenario and the lifecycle tests).
A simulated compute process on the second host (the simulated driver's hardware module, as `gpusim process add`
does) makes it busy. The exact message, the driver versions (dpkg) and the order of the hook calls are what the
tests compare.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _lab_play import failed_messages, run_playbook

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.image import ensure_image
from gpufleet_lab.loader import lab_hosts
from gpufleet_lab.podman import containers_conf, project_root
from gpufleet_sim.repo import key_fingerprint

pytestmark = pytest.mark.hosts

ROOT = project_root()
FIRST, SECOND = "drvup-a-l40s", "drvup-b-l40s"
REPO = "http://127.0.0.1:8765/"
BUSY_PID = 4242
# The hooks a site would point at its scheduler (cordon and drain, then uncordon). Here the drain ends the
# simulated GPU process, as evicting the pods would, and both hooks write down when they ran.
DRAIN = """\
- name: Record the drain
  ansible.builtin.shell: "echo drain {{ inventory_hostname }} >> {{ hook_log }}"
  delegate_to: localhost
  changed_when: true
- name: End the GPU work, as the scheduler's drain would
  ansible.builtin.command:
    argv: [/usr/bin/python3, -c, "import sys; sys.path.insert(0, '/usr/lib/nvidia-sim/python');
           from nvidia_sim import hardware; hardware.remove_process(0, BUSY_PID)"]
  when: inventory_hostname == 'SECOND'
  changed_when: true
""".replace("BUSY_PID", str(BUSY_PID)).replace("SECOND", SECOND)
UNDRAIN = """\
- name: Record the undrain
  ansible.builtin.shell: "echo undrain {{ inventory_hostname }} >> {{ hook_log }}"
  delegate_to: localhost
  changed_when: true
"""



def run(lab: dict[str, Path], playbook: Path, *extra: str) -> tuple[int, list[str]]:
    """Run a playbook on both hosts; return the exit status and the messages of the failed tasks."""
    rc, doc = run_playbook(lab["inventory"], playbook, extra, work=lab["work"], timeout=900)
    return rc, failed_messages(doc)


def driver(host: str) -> str:
    return exec_in(host, ["dpkg-query", "-W", "-f", "${Version}", "nvidia-driver"])


def packages(host: str) -> str:
    return exec_in(host, ["dpkg", "-l"])


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The repository server, two hosts at driver 550 with gpufleet's NVML venv, and an inventory."""
    reposerver.check_repo(reposerver.repo_dir())
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    ensure_image()
    work = tmp_path_factory.mktemp("driver-upgrade")
    gnupg = work / "gnupg"
    gnupg.mkdir(mode=0o700)
    fingerprint = key_fingerprint(reposerver.repo_dir() / "gpusim-archive-keyring.gpg", gnupg)
    common = {
        **ANSIBLE_HOST_VARS,
        "nvidia_driver_repo_url": REPO, "nvidia_driver_repo_suite": "./",
        "nvidia_driver_repo_key_url": REPO + "gpusim-archive-keyring.gpg",
        "nvidia_driver_repo_key_fingerprint": fingerprint,
        "nvml_python_index_url": REPO + "pypi/simple/", "nvml_python_index_allow_http": True,
        "hook_log": str(work / "hooks.log")}
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {FIRST: {}, SECOND: {}}}},
                                             "vars": common}}), encoding="utf-8")
    (work / "drain.yml").write_text(DRAIN, encoding="utf-8")
    (work / "undrain.yml").write_text(UNDRAIN, encoding="utf-8")
    server_pid = reposerver.start()
    try:
        image = lab_hosts().ensure_baselines({"plain-550"})["plain-550"]
        start_hosts([HostSpec(FIRST, "2xL40S", "127.0.213.1"), HostSpec(SECOND, "2xL40S", "127.0.213.2")],
                    image=image)
        lab = {"work": work, "inventory": inventory}
        assert (driver(FIRST), driver(SECOND)) == ("550.163.01-1", "550.163.01-1")
        yield lab
    finally:
        stop_hosts([FIRST, SECOND])
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def test_busy_host_stops_the_roll_after_the_idle_one_changed(lab: dict[str, Path]) -> None:
    exec_in(SECOND, ["/usr/bin/python3", "-c", "import sys; sys.path.insert(0, '/usr/lib/nvidia-sim/python'); "
                     f"from nvidia_sim import hardware; hardware.add_process(0, {BUSY_PID})"])
    before = packages(SECOND)
    rc, failures = run(lab, ROOT / "playbooks" / "driver_upgrade.yml", "nvidia_driver_branch=570")
    assert rc == 2, failures
    assert failures == [
        f"driver_upgrade: {SECOND} runs 1 GPU processes (PIDs {BUSY_PID}); drain the host first "
        "(gpufleet_driver_upgrade_drain_tasks), or pass -e gpufleet_driver_upgrade_force=true. The roll stops here; "
        "hosts not reached keep their driver."]
    assert driver(FIRST) == "570.172.08-1"
    assert packages(SECOND) == before


def test_roll_with_drain_hooks_changes_one_host_at_a_time(lab: dict[str, Path]) -> None:
    """The drain hook runs before the busy check (it ends the GPU work), the undrain hook after the change."""
    rc, failures = run(lab, ROOT / "playbooks" / "driver_upgrade.yml", "nvidia_driver_branch=570",
                       f"gpufleet_driver_upgrade_drain_tasks={lab['work'] / 'drain.yml'}",
                       f"gpufleet_driver_upgrade_undrain_tasks={lab['work'] / 'undrain.yml'}")
    assert (rc, failures) == (0, [])
    assert (driver(FIRST), driver(SECOND)) == ("570.172.08-1", "570.172.08-1")
    assert (lab["work"] / "hooks.log").read_text(encoding="utf-8").splitlines() == [
        f"drain {FIRST}", f"undrain {FIRST}", f"drain {SECOND}", f"undrain {SECOND}"]
    assert "cuda-drivers-550" not in packages(SECOND)
