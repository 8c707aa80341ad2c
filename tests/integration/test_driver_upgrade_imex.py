"""playbooks/driver_upgrade.yml carries IMEX along (issue 17): on a GB200 tray whose IMEX came from nvidia_imex at
driver 570 (``nvidia-imex-570``), an upgrade to the role's default branch moves IMEX to the new driver version in
the same change, under the name NVIDIA's repository gives it from R580 on (``nvidia-imex``), keeping its settings.

One podman host (``4xGB200``) from the prepared ``plain-570`` baseline (NVML bindings and simulated driver 570), in an
NVLink domain of its own. The judges are dpkg (versions, the old package gone), the configuration file's checksum,
systemd's InvocationID of ``nvidia-imex`` (the daemon restarted on the new version), ``nvidia-imex-ctl -N -j``, and a
second nvidia_imex run that changes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _lab_play import failed_messages, run_playbook
from _lab_play import results as all_results

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.loader import lab_hosts
from gpufleet_lab.podman import containers_conf, project_root
from gpufleet_sim.repo import key_fingerprint

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

ROOT = project_root()
TRAY, ADDRESS = "drvup-imex", "127.0.228.1"
REPO = "http://127.0.0.1:8765/"
IMEX = """\
- name: IMEX on the tray
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.nvidia_imex
"""



def run(lab: dict[str, Path], playbook: Path, *extra: str) -> tuple[int, list[str], int]:
    """Run a playbook on the tray; return the exit status, the failed tasks' messages, the changed-task count."""
    rc, doc = run_playbook(lab["inventory"], playbook, extra, work=lab["work"], timeout=900)
    return rc, failed_messages(doc), sum(1 for r in all_results(doc) if r.get("changed"))


def status(package: str) -> str:
    """``<version> <dpkg status abbreviation>`` of a package, empty when dpkg does not know it."""
    return exec_in(TRAY, ["dpkg-query", "-W", "-f", "${Version} ${db:Status-Abbrev}", package], check=False).strip()


def invocation() -> str:
    out = exec_in(TRAY, ["systemctl", "show", "-p", "InvocationID", "--value", "nvidia-imex"]).strip()
    assert out, "nvidia-imex has no InvocationID"
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The repository server and the tray at driver 570 with IMEX configured by nvidia_imex; removed afterwards."""
    reposerver.check_repo(reposerver.repo_dir())
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    work = tmp_path_factory.mktemp("drvup-imex")
    gnupg = work / "gnupg"
    gnupg.mkdir(mode=0o700)
    fingerprint = key_fingerprint(reposerver.repo_dir() / "gpusim-archive-keyring.gpg", gnupg)
    common = {**ANSIBLE_HOST_VARS,
              "nvidia_driver_repo_url": REPO, "nvidia_driver_repo_suite": "./",
              "nvidia_driver_repo_key_url": REPO + "gpusim-archive-keyring.gpg",
              "nvidia_driver_repo_key_fingerprint": fingerprint,
              "nvidia_imex_domain_groups": ["nvl72_x"], "nvidia_imex_address": ADDRESS,
              "nvidia_imex_proc_devices": "/usr/share/nvidia-sim/proc-devices", "nvidia_imex_verify_timeout": 60}
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"vars": common, "children": {
        "gpu_nodes": {"hosts": {TRAY: {}}}, "nvl72_x": {"hosts": {TRAY: {}}}}}}), encoding="utf-8")
    (work / "imex.yml").write_text(IMEX, encoding="utf-8")
    server_pid = reposerver.start()
    try:
        image = lab_hosts().ensure_baselines({"plain-570"})["plain-570"]
        start_hosts([HostSpec(TRAY, "4xGB200", ADDRESS)], image=image)
        lab = {"work": work, "inventory": inventory}
        rc, failures, _ = run(lab, work / "imex.yml")
        assert (rc, failures) == (0, [])
        assert status("nvidia-imex-570") == "570.172.08-1 ii"
        yield lab
    finally:
        stop_hosts([TRAY])
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def test_the_upgrade_carries_imex_to_the_new_driver_under_its_new_name(lab: dict[str, Path]) -> None:
    config = exec_in(TRAY, ["sha256sum", "/etc/nvidia-imex/config.cfg", "/etc/nvidia-imex/nodes_config.cfg"])
    before = invocation()

    rc, failures, _ = run(lab, ROOT / "playbooks" / "driver_upgrade.yml")  # the role's default branch, 580
    assert (rc, failures) == (0, [])

    assert status("nvidia-driver") == "580.105.08-1 hi"
    assert status("nvidia-imex") == "580.105.08-1 ii"
    assert status("nvidia-imex-570") in ("", "570.172.08-1 rc")  # removed; its configuration files stay
    assert exec_in(TRAY, ["dpkg", "--audit"]).strip() == ""
    assert exec_in(TRAY, ["sha256sum", "/etc/nvidia-imex/config.cfg",
                          "/etc/nvidia-imex/nodes_config.cfg"]) == config
    assert exec_in(TRAY, ["systemctl", "is-active", "nvidia-imex"]).strip() == "active"
    assert invocation() != before  # the daemon runs the new version
    doc = json.loads(exec_in(TRAY, ["nvidia-imex-ctl", "-N", "-j"]))
    assert [(node["host"], node["status"]) for node in doc["nodes"].values()] == [(ADDRESS, "READY")]

    # nvidia_imex afterwards finds its package (580's name, the driver's version) and settings as it left them
    rc, failures, changed = run(lab, lab["work"] / "imex.yml")
    assert (rc, failures, changed) == (0, [], 0)
