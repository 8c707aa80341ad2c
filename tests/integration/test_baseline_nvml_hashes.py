"""nvml_python with a pinned sha256 on a real (simulated) host: pip's hash-checking mode refuses a wheel whose
hash differs, installs the pinned one, and a second run and a check-mode run change nothing.

One podman host and the simulated repository's PEP 503 index (plain http, so nvml_python_index_allow_http).
"""

from __future__ import annotations

import hashlib
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
from gpufleet_lab.podman import containers_conf, project_root

pytestmark = pytest.mark.hosts

ROOT = project_root()
HOST = "nvml-hash-t4"
REPO = "http://127.0.0.1:8765/"
VENV = "/opt/gpufleet/venv"
PLAYBOOK = """\
- name: nvml_python
  hosts: all
  gather_facts: true
  roles:
    - role: gpufleet.nvidia.nvml_python
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    reposerver.check_repo(reposerver.repo_dir())
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    ensure_image()
    work = tmp_path_factory.mktemp("nvml-hash")
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {HOST: {
        **ANSIBLE_HOST_VARS,
        "nvml_python_index_url": REPO + "pypi/simple/", "nvml_python_index_allow_http": True}}}}), encoding="utf-8")
    (work / "site.yml").write_text(PLAYBOOK, encoding="utf-8")
    server_pid = reposerver.start()
    try:
        start_hosts([HostSpec(HOST, "1xT4", "127.0.214.1")])
        yield {"work": work, "inventory": inventory, "playbook": work / "site.yml"}
    finally:
        stop_hosts([HOST])
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def run(lab: dict[str, Path], *extra: str, check: bool = False) -> tuple[int, list[str], int]:
    """Run the role; return the exit status, the failed tasks' messages and the number of changed tasks."""
    rc, doc = run_playbook(lab["inventory"], lab["playbook"], extra, check=check)
    return rc, failed_messages(doc), doc["stats"][HOST]["changed"]


def installed() -> str:
    return exec_in(HOST, [f"{VENV}/bin/python", "-c",
                          "import importlib.metadata as m\ntry:\n print(m.version('nvidia-ml-py'))\n"
                          "except m.PackageNotFoundError:\n print('absent')"]).strip()


def test_a_wheel_with_another_hash_is_refused(lab: dict[str, Path]) -> None:
    rc, failures, _ = run(lab, "nvml_python_package_sha256=" + "0" * 64)
    assert rc == 2, failures
    assert len(failures) == 1
    assert "THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE" in failures[0]
    assert installed() == "absent"


def test_the_pinned_hash_installs_and_a_rerun_changes_nothing(lab: dict[str, Path]) -> None:
    wheel = reposerver.repo_dir() / "pypi" / "files" / "nvidia_ml_py-13.615.71-py3-none-any.whl"
    sha = "nvml_python_package_sha256=" + hashlib.sha256(wheel.read_bytes()).hexdigest()
    rc, failures, changed = run(lab, sha)
    assert (rc, failures) == (0, [])
    assert changed > 0
    assert installed() == "13.615.71"
    assert run(lab, sha)[:3] == (0, [], 0)
    assert run(lab, sha, check=True)[:3] == (0, [], 0)
