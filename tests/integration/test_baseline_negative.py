"""nvidia_driver refusals on a real (simulated) host: the exact message a user sees, and the host unchanged.

One fresh podman host (8xH100 with NVSwitches), one started from the prepared nvswitch-570 image for the downgrade
cases, and the simulated repository. Each refusal runs the real role with
ansible-playbook and compares `dpkg -l`, /etc/apt/sources.list.d and /etc/modprobe.d before and after. The
fabric-manager case uses a copy of the repository whose index has no fabric manager of the driver's version; the
reboot case writes an NVIDIA package into /run/reboot-required.pkgs (how Debian asks for a reboot).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
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
HOST = "baseline-neg-h100"
#: the downgrade tests' host: from the prepared nvswitch-570 image (driver 570 installed by this role on an
#: 8xH100-NVSwitch, as the tests did themselves on HOST until issue 33)
HOST_570 = "baseline-neg-h100-570"
REPO = "http://127.0.0.1:8765/"
DOCTORED_PORT = 8766
DOCTORED = f"http://127.0.0.1:{DOCTORED_PORT}/"
PLAYBOOK = """\
- name: nvidia_driver
  hosts: all
  gather_facts: true
  roles:
    - role: gpufleet.nvidia.nvidia_driver
"""



def _doctored_index(text: str) -> str:
    """The repository index with the fabric manager of 570 at another version than the driver's."""
    stanzas = text.strip().split("\n\n")
    out = []
    for stanza in stanzas:
        if stanza.startswith("Package: nvidia-fabricmanager-570\n"):
            stanza = re.sub(r"^Version: .*$", "Version: 570.124.06-1", stanza, flags=re.MULTILINE)
        out.append(stanza)
    return "\n\n".join(out) + "\n"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The repository server, a doctored copy of it, the host, and an inventory; everything removed afterwards."""
    reposerver.check_repo(reposerver.repo_dir())
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    ensure_image()
    work = tmp_path_factory.mktemp("baseline-neg")
    gnupg = work / "gnupg"
    gnupg.mkdir(mode=0o700)
    repo_dir = reposerver.repo_dir()
    doctored = work / "doctored-repo"
    doctored.mkdir()
    (doctored / "Packages").write_text(_doctored_index((repo_dir / "Packages").read_text(encoding="utf-8")),
                                       encoding="utf-8")
    fingerprint = key_fingerprint(repo_dir / "gpusim-archive-keyring.gpg", gnupg)
    host_vars = {**ANSIBLE_HOST_VARS,
                 "nvidia_driver_repo_url": REPO, "nvidia_driver_repo_suite": "./",
                 "nvidia_driver_repo_key_url": REPO + "gpusim-archive-keyring.gpg",
                 "nvidia_driver_repo_key_fingerprint": fingerprint}
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {HOST: host_vars}}}), encoding="utf-8")
    inventory_570 = work / "hosts-570.yml"
    inventory_570.write_text(json.dumps({"all": {"hosts": {HOST_570: host_vars}}}), encoding="utf-8")
    (work / "site.yml").write_text(PLAYBOOK, encoding="utf-8")
    server_pid = reposerver.start()
    doctored_server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(DOCTORED_PORT), "--bind", "127.0.0.1", "--directory", str(doctored)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        start_hosts([HostSpec(HOST, "8xH100-NVSwitch", "127.0.211.1")])
        image = lab_hosts().ensure_baselines({"nvswitch-570"})["nvswitch-570"]
        start_hosts([HostSpec(HOST_570, "8xH100-NVSwitch", "127.0.211.2")], image=image)
        yield {"work": work, "inventory": inventory, "inventory_570": inventory_570, "playbook": work / "site.yml",
               "env_home": gnupg}
    finally:
        stop_hosts([HOST, HOST_570])
        doctored_server.terminate()
        doctored_server.wait(timeout=10)
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def run_role(lab: dict[str, object], *extra: str, check: bool = False,
             inventory: str = "inventory") -> tuple[int, list[str]]:
    """Run the role on the host (``inventory_570``: on HOST_570); return the exit status and the failed tasks'
    messages."""
    rc, doc = run_playbook(Path(str(lab[inventory])), Path(str(lab["playbook"])), extra,
                           work=Path(str(lab["work"])), check=check)
    return rc, failed_messages(doc)


def snapshot(host: str = HOST) -> dict[str, str]:
    """What a refusal must leave alone: installed packages and the apt/modprobe configuration."""
    files = "find /etc/apt/sources.list.d /etc/modprobe.d /usr/share/keyrings -type f -exec sha256sum {} + | sort"
    return {
        "dpkg": exec_in(host, ["dpkg", "-l"]),
        "selections": exec_in(host, ["dpkg", "--get-selections"]),
        "files": exec_in(host, ["sh", "-c", files]),
    }


def _refused(lab: dict[str, object], expected: str, *extra: str, host: str = HOST) -> None:
    before = snapshot(host)
    rc, failures = run_role(lab, *extra, inventory="inventory_570" if host == HOST_570 else "inventory")
    assert rc == 2, failures
    assert failures == [expected]
    assert snapshot(host) == before


# Check mode of this play on a fresh 8xH100-NVSwitch changes nothing: proven by
# test_driver_lifecycle.py::test_the_default_branch_is_not_past_its_end_of_life (the same play, preset, snapshot and
# assertions, and no warning besides); this file's copy of it went in issue 33.


def test_unknown_branch_is_refused(lab: dict[str, object]) -> None:
    _refused(lab, (
        f"nvidia_driver: driver branch 999 is not in the repository {REPO} (no package cuda-drivers-999; branches "
        "there: 550, 570, 580). Set nvidia_driver_branch to one of them. Nothing was changed."),
        "nvidia_driver_branch=999")


def test_unreachable_repository_is_refused(lab: dict[str, object]) -> None:
    _refused(lab, (
        "nvidia_driver: cannot read the repository index http://127.0.0.1:9/Packages (Status code was -1 and not "
        "[200]: Request failed: <urlopen error [Errno 111] Connection refused>); check nvidia_driver_repo_url, "
        "the network and the proxy. Nothing was changed."),
        "nvidia_driver_repo_url=http://127.0.0.1:9/")


def test_fabric_manager_version_mismatch_is_refused(lab: dict[str, object]) -> None:
    _refused(lab, (
        f"nvidia_driver: the fabric manager must have exactly the driver's version, but the repository {DOCTORED} "
        "has no nvidia-fabricmanager-570 570.172.08-1 (versions there: 570.124.06-1). Pick a driver version that "
        "has one (nvidia_driver_version). Nothing was changed."),
        f"nvidia_driver_repo_url={DOCTORED}", "nvidia_driver_branch=570")


def test_pending_reboot_without_reboot_ok_is_refused(lab: dict[str, object]) -> None:
    exec_in(HOST, ["sh", "-c", "printf 'linux-image-6.1.0-29-amd64\\nnvidia-kernel-open-dkms\\nlibnvidia-ml1\\n' "
                               "> /run/reboot-required.pkgs"])
    try:
        _refused(lab, (
            f"nvidia_driver: {HOST} needs a reboot for the NVIDIA driver (/run/reboot-required.pkgs names "
            "nvidia-kernel-open-dkms, libnvidia-ml1) and nvidia_driver_reboot_ok is not set. Set "
            "nvidia_driver_reboot_ok: true to let the role reboot the host, or false to reboot it yourself later. "
            "Nothing was changed."))
    finally:
        exec_in(HOST, ["rm", "-f", "/run/reboot-required.pkgs"])


def test_installed_570_then_downgrade_is_refused(lab: dict[str, object]) -> None:
    """HOST_570 got driver 570 from this role when its image was prepared (molecule/_shared/baseline.yml)."""
    assert exec_in(HOST_570, ["dpkg-query", "-W", "-f", "${Version}", "nvidia-driver"]) == "570.172.08-1"
    _refused(lab, (
        f"nvidia_driver: refusing to downgrade the NVIDIA driver on {HOST_570} from 570.172.08-1 to 550.163.01-1; "
        "set nvidia_driver_allow_downgrade: true to do it. Nothing was changed."),
        "nvidia_driver_branch=550", host=HOST_570)


def test_allowed_downgrade_changes_branch_and_fabric_manager(lab: dict[str, object]) -> None:
    rc, failures = run_role(lab, "nvidia_driver_branch=550", "nvidia_driver_allow_downgrade=true",
                            inventory="inventory_570")
    assert (rc, failures) == (0, [])
    versions = exec_in(HOST_570, ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"]).splitlines()
    nvidia = {line.split()[0]: line.split()[1] for line in versions
              if re.match(r"(nvidia|libnvidia-ml|cuda-drivers)", line)}
    assert nvidia["nvidia-driver"] == "550.163.01-1"
    assert nvidia["nvidia-fabricmanager-550"] == "550.163.01-1"
    assert "cuda-drivers-570" not in nvidia
    assert "nvidia-fabricmanager-570" not in nvidia
    assert "nvidia-driver-pinning-570" not in nvidia
    assert exec_in(HOST_570, ["systemctl", "is-active", "nvidia-fabricmanager"]).strip() == "active"
