"""nvidia_driver from a mirror of NVIDIA's tree, with only its root set (issue 20), on a real (simulated) host.

The simulated server serves NVIDIA's layout, ``compute/cuda/repos/<distro>/<arch>/`` (``gpufleet_sim.repo``), so
``nvidia_driver_repo_mirror: http://127.0.0.1:8765/compute/cuda/repos`` with no ``nvidia_driver_repo_url`` and no
key URL runs the role's own path derivation and key location, the code every default install runs. The simulated key
cannot carry NVIDIA's fingerprint, so the inventory pins the simulated one with
``nvidia_driver_repo_key_fingerprint`` (as ``inventories/sim`` does); without it the role's NVIDIA pin refuses the
key, which is tested too.

One 1xT4 host from the plain test-host image: every prepared baseline image already has the driver installed, and
the subject here is the install. Refusals compare the exact message and a snapshot of the host before and after.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _lab_play import failed_messages, run_playbook

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.image import ensure_image
from gpufleet_lab.podman import containers_conf, project_root
from gpufleet_sim.repo import key_fingerprint

pytestmark = pytest.mark.hosts

ROOT = project_root()
HOST = "mirror-root-t4"
SERVER = "http://127.0.0.1:8765"
MIRROR = f"{SERVER}/compute/cuda/repos"
# Written out, not derived: what NVIDIA's tree holds for a Debian 12 x86_64 host.
HOST_REPO = f"{MIRROR}/debian12/x86_64/"
# How `apt-cache policy` names a version's origin in that repository.
IN_POLICY = re.compile(rf"^ +[0-9]+ {re.escape(HOST_REPO.rstrip('/'))}/? .*Packages$", re.MULTILINE)
NVIDIA_PIN = "EB693B3035CD5710E231E123A4B469963BF863CC"
PLAYBOOK = """\
- name: nvidia_driver
  hosts: all
  gather_facts: true
  roles:
    - role: gpufleet.nvidia.nvidia_driver
"""



@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The repository server, the host and an inventory with only the mirror root; everything removed afterwards."""
    repo_dir = reposerver.repo_dir()
    reposerver.check_repo(repo_dir)
    tree = repo_dir / "compute/cuda/repos/debian12/x86_64"
    assert (tree / "InRelease").is_file(), f"{tree} is missing: run `gpusim build` (the repository predates it)"
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    ensure_image()
    work = tmp_path_factory.mktemp("mirror-root")
    gnupg = work / "gnupg"
    gnupg.mkdir(mode=0o700)
    fingerprint = key_fingerprint(tree / "3bf863cc.pub", gnupg)
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {HOST: {
        **ANSIBLE_HOST_VARS,
        "nvidia_driver_repo_mirror": MIRROR, "nvidia_driver_repo_key_fingerprint": fingerprint}}}}),
        encoding="utf-8")
    (work / "site.yml").write_text(PLAYBOOK, encoding="utf-8")
    server_pid = reposerver.start()
    try:
        start_hosts([HostSpec(HOST, "1xT4", "127.0.216.1")])
        yield {"work": work, "inventory": inventory, "playbook": work / "site.yml", "fingerprint": fingerprint}
    finally:
        stop_hosts([HOST])
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def run_role(lab: dict[str, object], *extra: str) -> tuple[int, list[str], dict[str, int]]:
    """Run the role on the host; return the exit status, the failed tasks' messages and the host's stats."""
    rc, doc = run_playbook(Path(str(lab["inventory"])), Path(str(lab["playbook"])), extra,
                           work=Path(str(lab["work"])))
    return rc, failed_messages(doc), doc["stats"].get(HOST, {})


def snapshot() -> dict[str, str]:
    """What a refusal must leave alone: installed packages and the apt/modprobe configuration."""
    files = "find /etc/apt/sources.list.d /etc/modprobe.d /usr/share/keyrings -type f -exec sha256sum {} + | sort"
    return {
        "dpkg": exec_in(HOST, ["dpkg", "-l"]),
        "selections": exec_in(HOST, ["dpkg", "--get-selections"]),
        "files": exec_in(HOST, ["sh", "-c", files]),
    }


def _refused(lab: dict[str, object], expected: str, *extra: str) -> None:
    before = snapshot()
    rc, failures, _ = run_role(lab, *extra)
    assert rc == 2, failures
    assert failures == [expected]
    assert snapshot() == before


def test_wrong_root_fails_in_preflight_naming_the_url_it_tried(lab: dict[str, object]) -> None:
    _refused(lab, (
        f"nvidia_driver: cannot read the repository index {SERVER}/cuda/repos/debian12/x86_64/Packages (Status code "
        "was 404 and not [200]: HTTP Error 404: File not found); check nvidia_driver_repo_mirror (the root of a "
        "mirror of NVIDIA's compute/cuda/repos, which must hold debian12/x86_64/), the network and the proxy. "
        "Nothing was changed."),
        f"nvidia_driver_repo_mirror={SERVER}/cuda/repos/")


def test_a_root_that_is_not_a_web_url_is_refused(lab: dict[str, object]) -> None:
    _refused(lab, (
        "nvidia_driver: nvidia_driver_repo_mirror must be the http(s) URL of the root of a mirror of NVIDIA's "
        "compute/cuda/repos tree, such as https://mirror.example/compute/cuda/repos (got "
        "\"file:///srv/mirror/compute/cuda/repos\"). Nothing was changed."),
        "nvidia_driver_repo_mirror=file:///srv/mirror/compute/cuda/repos")


def test_without_a_pin_the_key_is_checked_against_nvidias(lab: dict[str, object]) -> None:
    """The key comes from <root>/<distro>/<arch>/3bf863cc.pub and NVIDIA's pin refuses the simulated one."""
    _refused(lab, (
        f"nvidia_driver: the repository key {HOST_REPO}3bf863cc.pub has fingerprint {lab['fingerprint']}, not the "
        f"pinned {NVIDIA_PIN}; refusing it. Check the key's origin, then fix nvidia_driver_repo_key_url or "
        "nvidia_driver_repo_key_fingerprint. Nothing was changed."),
        "nvidia_driver_repo_key_fingerprint=")


def test_cuda_keyring_gives_apt_the_key_and_source_as_nvidias_does(lab: dict[str, object]) -> None:
    """NVIDIA's documented install (dpkg -i cuda-keyring, apt update) works against the simulated tree."""
    before = snapshot()
    deb = "/tmp/cuda-keyring_1.1-1_all.deb"
    exec_in(HOST, ["curl", "-fsS", "-o", deb, f"{HOST_REPO}cuda-keyring_1.1-1_all.deb"])
    try:
        exec_in(HOST, ["dpkg", "-i", deb])
        assert exec_in(HOST, ["cat", "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"]) == (
            f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {HOST_REPO} /\n")
        exec_in(HOST, ["apt-get", "update"])  # exits non-zero when the signature or the key does not check out
        policy = exec_in(HOST, ["apt-cache", "policy", "cuda-drivers-570"])
        assert "Candidate: 570.172.08-1" in policy, policy
        assert IN_POLICY.search(policy), policy
    finally:
        exec_in(HOST, ["sh", "-c", f"dpkg --purge cuda-keyring && rm -f {deb} && apt-get update -qq"])
    assert snapshot()["files"] == before["files"]


def test_mirror_root_alone_installs_the_driver_and_converges(lab: dict[str, object]) -> None:
    rc, failures, stats = run_role(lab)
    assert (rc, failures) == (0, [])
    assert stats["changed"] > 0
    sources = exec_in(HOST, ["sh", "-c", "cat /etc/apt/sources.list.d/*.sources"])
    assert f"URIs: {HOST_REPO}\n" in sources, sources
    # no branch pinned: the role's default, 580
    assert exec_in(HOST, ["dpkg-query", "-W", "-f", "${Version}", "cuda-drivers-580"]) == "580.105.08-1"
    policy = exec_in(HOST, ["apt-cache", "policy", "nvidia-driver"])
    assert IN_POLICY.search(policy), policy
    assert len(re.findall(r"^GPU [0-9]+: ", exec_in(HOST, ["nvidia-smi", "-L"]), re.MULTILINE)) == 1
    rc, failures, stats = run_role(lab)
    assert (rc, failures, stats["changed"]) == (0, [], 0)
