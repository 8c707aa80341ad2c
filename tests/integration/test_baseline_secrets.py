"""A repository URL with credentials on a real (simulated) host: apt's way (apt_auth.conf(5)), nothing shown.

nvidia_driver with `http://ci-bot:<token>@127.0.0.1:8765/` (the simulated repository ignores the credentials, which
is enough to see where they go): the deb822 source holds the URL without them, /etc/apt/auth.conf.d/<source>.conf
holds them (root, 0600), the driver installs, and the token appears nowhere in the run's output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.image import ensure_image
from gpufleet_lab.podman import containers_conf, project_root
from gpufleet_sim.repo import key_fingerprint

pytestmark = pytest.mark.hosts

ROOT = project_root()
HOST = "baseline-secrets-t4"
TOKEN = "tok-3f9a1c77e2"
REPO = f"http://ci-bot:{TOKEN}@127.0.0.1:8765/"
SOURCE = "gpufleet-127-0-0-1-8765"
PLAYBOOK = """\
- name: nvidia_driver
  hosts: all
  gather_facts: true
  roles:
    - role: gpufleet.nvidia.nvidia_driver
"""



@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    reposerver.check_repo(reposerver.repo_dir())
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    ensure_image()
    work = tmp_path_factory.mktemp("baseline-secrets")
    gnupg = work / "gnupg"
    gnupg.mkdir(mode=0o700)
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {HOST: {
        **ANSIBLE_HOST_VARS,
        "nvidia_driver_repo_url": REPO, "nvidia_driver_repo_suite": "./",
        "nvidia_driver_repo_key_url": REPO + "gpusim-archive-keyring.gpg",
        "nvidia_driver_repo_key_fingerprint": key_fingerprint(reposerver.repo_dir() / "gpusim-archive-keyring.gpg",
                                                           gnupg)}}}}), encoding="utf-8")
    (work / "site.yml").write_text(PLAYBOOK, encoding="utf-8")
    server_pid = reposerver.start()
    try:
        start_hosts([HostSpec(HOST, "1xT4", "127.0.215.1")])
        yield {"work": work, "inventory": inventory, "playbook": work / "site.yml"}
    finally:
        stop_hosts([HOST])
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def test_credentials_go_to_auth_conf_and_nowhere_else(lab: dict[str, Path]) -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), XDG_CACHE_HOME=str(lab["work"] / "cache"))
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(lab["inventory"]),
                           str(lab["playbook"]), "--diff", "-vv"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert TOKEN not in output
    source = exec_in(HOST, ["cat", f"/etc/apt/sources.list.d/{SOURCE}.sources"])
    assert "URIs: http://127.0.0.1:8765/\n" in source
    assert TOKEN not in source
    auth = f"/etc/apt/auth.conf.d/{SOURCE}.conf"
    assert exec_in(HOST, ["stat", "-c", "%a %U %G", auth]).strip() == "600 root root"
    assert exec_in(HOST, ["grep", "-v", "^#", auth]) == (
        f"machine http://127.0.0.1:8765 login ci-bot password {TOKEN}\n")
    assert exec_in(HOST, ["dpkg-query", "-W", "-f", "${Version}", "nvidia-driver"]) == "580.105.08-1"  # the default
    grep = exec_in(HOST, ["grep", "-rl", TOKEN, "/etc/apt/sources.list.d", "/etc/apt/preferences.d",
                          "/usr/share/keyrings"], check=False)
    assert grep == ""
