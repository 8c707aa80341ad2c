"""nvidia_driver's lifecycle and kernel-module checks on real (simulated) hosts (issue 17): the exact messages, and
the host unchanged by every refusal.

Two podman hosts from the simulated repository: an HGX B200 (Blackwell) that only preflight ever touches - a branch
before 570, the proprietary modules and NVreg_EnableGpuFirmware=0 with the open ones are refused, and branch 570
pinned explicitly (past its end of life in February 2026 by NVIDIA's lifecycle page) is warned about in a check-mode
run - and an HGX H100 on which a check-mode run with the role's default branch (580, long-term support to June 2028)
warns about nothing, then is switched from the proprietary to the open kernel modules: the swap is planned and refused
without nvidia_driver_reboot_ok, and done with it (a container host: everything but the reboot).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _lab_play import results as all_results
from _lab_play import run_playbook

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.image import ensure_image
from gpufleet_lab.podman import containers_conf, project_root
from gpufleet_sim.repo import key_fingerprint

pytestmark = pytest.mark.hosts

ROOT = project_root()
B200, H100 = "drvlife-b200", "drvlife-h100"
REPO = "http://127.0.0.1:8765/"
PLAYBOOK = """\
- name: nvidia_driver
  hosts: all
  gather_facts: true
  roles:
    - role: gpufleet.nvidia.nvidia_driver
"""
EOL_570 = ("WARNING nvidia_driver: driver branch 570 (production branch) reached its end of life in 2026-02 and gets "
           "no more fixes; move nvidia_driver_branch to a supported branch (long-term support: 580, 620).")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The repository server, the two hosts and an inventory; everything removed afterwards."""
    reposerver.check_repo(reposerver.repo_dir())
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    ensure_image()
    work = tmp_path_factory.mktemp("drvlife")
    gnupg = work / "gnupg"
    gnupg.mkdir(mode=0o700)
    fingerprint = key_fingerprint(reposerver.repo_dir() / "gpusim-archive-keyring.gpg", gnupg)
    common = {**ANSIBLE_HOST_VARS,
              "nvidia_driver_repo_url": REPO, "nvidia_driver_repo_suite": "./",
              "nvidia_driver_repo_key_url": REPO + "gpusim-archive-keyring.gpg",
              "nvidia_driver_repo_key_fingerprint": fingerprint}
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {B200: common, H100: common}}}), encoding="utf-8")
    (work / "site.yml").write_text(PLAYBOOK, encoding="utf-8")
    server_pid = reposerver.start()
    try:
        start_hosts([HostSpec(B200, "8xB200-NVSwitch", "127.0.217.1"),
                     HostSpec(H100, "8xH100-NVSwitch", "127.0.217.2")])
        yield {"work": work, "inventory": inventory, "playbook": work / "site.yml"}
    finally:
        stop_hosts([B200, H100])
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def run_role(lab: dict[str, object], host: str, *extra: str, check: bool = False) -> tuple[int, dict[str, list[str]]]:
    """Run the role on one host; return the exit status, the failed tasks' messages, the debug messages and the
    number of changed tasks."""
    rc, doc = run_playbook(Path(str(lab["inventory"])), Path(str(lab["playbook"])), extra,
                           work=Path(str(lab["work"])), check=check, limit=host)
    results = all_results(doc)
    return rc, {
        "failed": [r.get("msg", "") for r in results if r.get("failed") or r.get("unreachable")],
        "said": [str(r["msg"]) for r in results if "msg" in r and not r.get("failed") and not r.get("skipped")
                 and isinstance(r.get("msg"), str) and r["msg"].startswith(("WARNING", "nvidia_driver:"))],
        "changed": [str(r.get("changed")) for r in results if r.get("changed")],
    }


def snapshot(host: str) -> dict[str, str]:
    """What a refusal must leave alone: installed packages and the apt/modprobe configuration."""
    files = "find /etc/apt/sources.list.d /etc/modprobe.d /usr/share/keyrings -type f -exec sha256sum {} + | sort"
    return {"dpkg": exec_in(host, ["dpkg", "-l"]), "selections": exec_in(host, ["dpkg", "--get-selections"]),
            "files": exec_in(host, ["sh", "-c", files])}


def refused(lab: dict[str, object], host: str, expected: str, *extra: str) -> dict[str, list[str]]:
    before = snapshot(host)
    rc, out = run_role(lab, host, *extra)
    assert rc == 2, out
    assert out["failed"] == [expected]
    assert snapshot(host) == before
    return out


def test_a_branch_before_570_is_refused_on_blackwell(lab: dict[str, object]) -> None:
    out = refused(lab, B200, (
        "nvidia_driver: driver branch 550 does not support the Blackwell GPUs at 0000:05:00.0, 0000:28:00.0, "
        "0000:59:00.0, 0000:89:00.0 and 4 more; Blackwell needs branch 570 or later. Set nvidia_driver_branch "
        "accordingly (long-term support: 580, 620). Nothing was changed."), "nvidia_driver_branch=550")
    assert out["said"] == [
        "WARNING nvidia_driver: driver branch 550 (production branch) reached its end of life in 2025-02 and gets no "
        "more fixes; move nvidia_driver_branch to a supported branch (long-term support: 580, 620)."]


def test_proprietary_modules_are_refused_on_blackwell(lab: dict[str, object]) -> None:
    refused(lab, B200, (
        "nvidia_driver: the Blackwell GPUs at 0000:05:00.0, 0000:28:00.0, 0000:59:00.0, 0000:89:00.0 and 4 more "
        "cannot run the proprietary kernel modules; set nvidia_driver_kernel_module: open (or auto). Nothing was "
        "changed."), "nvidia_driver_kernel_module=proprietary")


def test_gpu_firmware_off_is_refused_with_the_open_modules(lab: dict[str, object]) -> None:
    refused(lab, B200, (
        "nvidia_driver: nvidia_driver_module_params sets NVreg_EnableGpuFirmware=0 for the nvidia module, but the open "
        "kernel modules always run the GSP firmware (the parameter is only for the proprietary modules); remove it, "
        "or set nvidia_driver_kernel_module: proprietary on GPUs that can run them. Nothing was changed."),
        '{"nvidia_driver_module_params": {"nvidia": {"NVreg_EnableGpuFirmware": 0}}}',
        "nvidia_driver_kernel_module=auto")


def test_a_branch_past_its_end_of_life_is_warned_about(lab: dict[str, object]) -> None:
    before = snapshot(B200)
    rc, out = run_role(lab, B200, "nvidia_driver_branch=570", check=True)
    assert (rc, out["failed"]) == (0, [])
    assert [line for line in out["said"] if line.startswith("WARNING")] == [EOL_570]
    assert snapshot(B200) == before


def test_the_default_branch_is_not_past_its_end_of_life(lab: dict[str, object]) -> None:
    """No branch pinned: the role's default (580) is in support, so preflight warns about nothing."""
    before = snapshot(H100)
    rc, out = run_role(lab, H100, check=True)
    assert (rc, out["failed"]) == (0, [])
    assert [line for line in out["said"] if "WARNING" in line] == []
    assert snapshot(H100) == before


def kernel_packages(host: str) -> dict[str, str]:
    """The installed NVIDIA kernel module packages and their dpkg selection (install or hold)."""
    lines = exec_in(host, ["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n",
                           "nvidia-kernel-dkms", "nvidia-kernel-open-dkms"], check=False).splitlines()
    return {f[0]: f[1] for f in (line.split() for line in lines) if len(f) >= 3 and f[2].startswith(("ii", "hi"))}


def test_switching_proprietary_to_open_is_planned_refused_then_done(lab: dict[str, object]) -> None:
    rc, out = run_role(lab, H100, "nvidia_driver_kernel_module=proprietary")
    assert (rc, out["failed"]) == (0, [])
    assert kernel_packages(H100) == {"nvidia-kernel-dkms": "580.105.08-1"}

    before = snapshot(H100)
    rc, out = run_role(lab, H100, "nvidia_driver_kernel_module=open")
    assert rc == 2
    assert out["failed"] == [
        f"nvidia_driver: {H100} needs a reboot for the NVIDIA driver (the kernel modules change from proprietary to "
        "open and the running kernel keeps the proprietary module) and nvidia_driver_reboot_ok is not set. Set "
        "nvidia_driver_reboot_ok: true to let the role reboot the host, or false to reboot it yourself later. "
        "Nothing was changed."]
    assert (f"nvidia_driver: {H100} swaps the kernel modules from proprietary (nvidia-kernel-dkms) to open "
            "(nvidia-kernel-open-dkms 580.105.08-1); the packages conflict, so one replaces the other, and the new "
            "module loads at the next boot.") in out["said"]
    assert snapshot(H100) == before

    rc, out = run_role(lab, H100, "nvidia_driver_kernel_module=open", "nvidia_driver_reboot_ok=true")
    assert (rc, out["failed"]) == (0, [])
    assert kernel_packages(H100) == {"nvidia-kernel-open-dkms": "580.105.08-1"}
    held = exec_in(H100, ["dpkg", "--get-selections", "nvidia-kernel-open-dkms"]).split()
    assert held == ["nvidia-kernel-open-dkms", "hold"]
