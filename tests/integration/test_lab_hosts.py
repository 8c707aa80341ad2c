"""Real throw-away hosts: boot, simulated hardware inside, labels, cleanup (needs podman and the image)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet_lab import fleet as fleet_mod
from gpufleet_lab import reposerver
from gpufleet_lab.hosts import (
    ANSIBLE_HOST_VARS,
    HostError,
    HostSpec,
    cleanup,
    exec_in,
    host_files_dir,
    list_hosts,
    start_hosts,
    stop_hosts,
)
from gpufleet_lab.image import IMAGE, ensure_image
from gpufleet_lab.loader import load_file
from gpufleet_lab.podman import LAB_OWNER, podman, project_root

pytestmark = pytest.mark.hosts


def _state(gpus: int, nvswitches: int = 0, device_id: int = 0x20B710DE) -> dict[str, Any]:
    state: dict[str, Any] = {"schema": 1, "gpus": [
        {"index": i, "name": "NVIDIA A30", "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000", "architecture": 7,
         "pci": {"bus_id": f"00000000:{0x21 + i:02X}:00.0", "pci_device_id": device_id,
                 "pci_subsystem_id": 0x153210DE}} for i in range(gpus)]}
    if nvswitches:
        state["nvswitch"] = {"count": nvswitches, "fabric_manager_required": True}
    return state


@pytest.fixture(scope="module")
def two_hosts() -> Iterator[list[HostSpec]]:
    ensure_image()
    specs = [HostSpec("lab-it-1", "test-4", "127.0.201.1", fleet="lab-it", state=_state(4)),
             HostSpec("lab-it-2", "test-2+sw", "127.0.202.1", fleet="lab-it", state=_state(2, nvswitches=3))]
    start_hosts(specs)
    try:
        yield specs
    finally:
        stop_hosts([s.name for s in specs])


def test_systemd_is_pid_1_and_booted(two_hosts: list[HostSpec]) -> None:
    for spec in two_hosts:
        assert exec_in(spec.name, ["cat", "/proc/1/comm"]).strip() == "systemd"
        assert exec_in(spec.name, ["systemctl", "is-system-running"], check=False).strip() in ("running", "degraded")
        assert exec_in(spec.name, ["hostname"]).strip() == spec.name


def test_state_file_is_the_preset_root_owned(two_hosts: list[HostSpec]) -> None:
    for spec in two_hosts:
        state = json.loads(exec_in(spec.name, ["cat", "/var/lib/nvidia-sim/state.json"]))
        # the preset, plus the boot id the lab's boot hook gave this start (gpufleet_sim.power records it)
        assert state.pop("boot_id") == exec_in(spec.name, ["cat", "/proc/sys/kernel/random/boot_id"]).strip()
        assert state == spec.state
        modes = exec_in(spec.name, ["stat", "-c", "%a %U:%G", "/var/lib/nvidia-sim",
                                    "/var/lib/nvidia-sim/state.json"]).split("\n")
        assert modes[:2] == ["755 root:root", "644 root:root"]


@pytest.mark.parametrize("package", [
    "systemd", "systemd-sysv", "dbus",      # systemd as PID 1
    "python3", "python3-apt",              # Ansible's apt module on the target
    "python3-debian",                      # deb822_repository
    "python3-venv",                        # nvml_python's venv
    "pciutils", "libcjson1",               # lspci; the simulated libnvidia-ml's one Debian dependency
])
def test_the_image_has_what_the_roles_need(two_hosts: list[HostSpec], package: str) -> None:
    status = exec_in(two_hosts[0].name, ["dpkg-query", "-W", "-f", "${db:Status-Status}", package], check=False)
    assert status == "installed"


def test_the_image_has_no_ssh_server(two_hosts: list[HostSpec]) -> None:
    # host network: an sshd would bind the machine's port 22
    out = exec_in(two_hosts[0].name, ["sh", "-c", "ls /usr/sbin/sshd 2>&1; echo rc=$?"], check=False)
    assert out.endswith("rc=2\n")


@pytest.mark.parametrize(("index", "gpus", "bridges"), [(0, 4, 0), (1, 2, 3)])
def test_lspci_sees_the_simulated_devices(two_hosts: list[HostSpec], index: int, gpus: int, bridges: int) -> None:
    lines = exec_in(two_hosts[index].name, ["lspci", "-nn"]).splitlines()
    assert sum("3D controller [0302]" in line and "[10de:20b7]" in line for line in lines) == gpus
    assert sum("Bridge [0680]" in line and "[10de:1af1]" in line for line in lines) == bridges
    assert len(lines) == gpus + bridges


def test_pci_tree_is_read_only(two_hosts: list[HostSpec]) -> None:
    out = exec_in(two_hosts[0].name, ["sh", "-c", "touch /sys/bus/pci/devices/new 2>&1; echo rc=$?"], check=False)
    assert out == "touch: cannot touch '/sys/bus/pci/devices/new': Read-only file system\nrc=1\n"


def test_labels_record_preset_loopback_and_fleet(two_hosts: list[HostSpec]) -> None:
    rows = {r["name"]: r for r in list_hosts(LAB_OWNER, fleet="lab-it")}
    assert {name: (r["preset"], r["loopback"], r["state"]) for name, r in rows.items()} == {
        "lab-it-1": ("test-4", "127.0.201.1", "running"), "lab-it-2": ("test-2+sw", "127.0.202.1", "running")}


def _ansible(host: str, connection: str, *args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(project_root() / "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(project_root() / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp))
    return subprocess.run([str(Path(sys.executable).with_name("ansible")), "all", "-i", f"{host},", "-c", connection,
                           "-e", "ansible_python_interpreter=/usr/bin/python3", "-o", *args],
                          capture_output=True, text=True, check=False, env=env, timeout=120)


def test_the_nsenter_connection_runs_commands_as_podman_exec_does(two_hosts: list[HostSpec], tmp_path: Path) -> None:
    """gpufleet.lab.nsenter (what the tests' inventories use) gives a command what `podman exec` gives it."""
    host = two_hosts[0].name
    probe = "env | sort; hostname; pwd; id -u; cat /proc/self/cgroup; readlink /proc/1/exe; ls /sys/bus/pci/devices"
    seen = {}
    for connection in (ANSIBLE_HOST_VARS["ansible_connection"], "containers.podman.podman"):
        proc = _ansible(host, connection, "-m", "ansible.builtin.shell", "-a", probe, tmp=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        seen[connection] = proc.stdout.split(" rc=0 | (stdout) ", 1)[1]
    assert seen[ANSIBLE_HOST_VARS["ansible_connection"]] == seen["containers.podman.podman"]
    assert "container=podman" in seen["containers.podman.podman"]


def test_the_nsenter_connection_copies_files_into_the_host(two_hosts: list[HostSpec], tmp_path: Path) -> None:
    host = two_hosts[1].name
    src = tmp_path / "payload"
    src.write_bytes(bytes(range(256)) * 64)
    proc = _ansible(host, ANSIBLE_HOST_VARS["ansible_connection"], "-m", "ansible.builtin.copy",
                    "-a", f"src={src} dest=/root/payload mode=0600", tmp=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert exec_in(host, ["sha256sum", "/root/payload"]).split()[0] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert exec_in(host, ["stat", "-c", "%a %U", "/root/payload"]).strip() == "600 root"


def test_the_nsenter_connection_says_which_host_is_not_running(tmp_path: Path) -> None:
    proc = _ansible("lab-it-absent", ANSIBLE_HOST_VARS["ansible_connection"], "-m", "ansible.builtin.ping",
                    tmp=tmp_path)
    assert proc.returncode != 0
    assert "podman inspect lab-it-absent failed" in proc.stdout + proc.stderr


def _init_pid(host: str) -> int:
    return int(podman(["inspect", "--type", "container", "--format", "{{.State.Pid}}", host]).stdout.strip())


def test_the_nsenter_connection_keeps_the_hosts_pid_and_asks_again_after_a_restart(tmp_path: Path) -> None:
    """One ``podman inspect`` per host, not per task: the answer is kept, and a restarted host is asked again."""
    plugin = load_file("nsenter_plugin", project_root() / "collections" / "ansible_collections" / "gpufleet" / "lab"
                       / "plugins" / "connection" / "nsenter.py")
    host = "lab-it-5"
    start_hosts([HostSpec(host, "x", "127.0.205.1", state=_state(1))])
    try:
        kept = plugin.cache_file(host)
        assert kept is not None
        kept.unlink(missing_ok=True)
        first = _ansible(host, ANSIBLE_HOST_VARS["ansible_connection"], "-m", "ansible.builtin.command",
                         "-a", "cat /proc/sys/kernel/hostname", tmp=tmp_path)
        assert first.returncode == 0, first.stdout + first.stderr
        assert host in first.stdout
        assert json.loads(kept.read_text(encoding="utf-8"))["pid"] == _init_pid(host)
        assert oct(kept.stat().st_mode & 0o777) == "0o600"
        assert oct(kept.parent.stat().st_mode & 0o777) == "0o700"
        before = _init_pid(host)
        podman(["restart", "--time", "1", host])
        assert _init_pid(host) != before
        again = _ansible(host, ANSIBLE_HOST_VARS["ansible_connection"], "-m", "ansible.builtin.command",
                         "-a", "cat /proc/sys/kernel/hostname", tmp=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        assert host in again.stdout
        assert json.loads(kept.read_text(encoding="utf-8"))["pid"] == _init_pid(host)
    finally:
        stop_hosts([host])


ZIPPED_PROBE = r'''
import os, subprocess, sys, zipfile
cache = "/var/cache/gpufleet-lab/pycache"
def build(archive, body):
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("probe.py", body)
def run(archive):
    code = "import sys; sys.path.insert(0, %r); import probe; print(probe.answer()); probe.fail()" % archive
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
def count():
    return len(os.listdir(cache)) if os.path.isdir(cache) else 0
body = "def answer():\n    return 41 + 1\ndef fail():\n    raise ValueError('from the zip')\n"
build("/root/a.zip", body); build("/root/b.zip", body)
build("/root/c.zip", body.replace("41 + 1", "41 + 2"))
first = run("/root/a.zip"); after_first = count()
second = run("/root/b.zip"); after_second = count()
third = run("/root/c.zip"); after_third = count()
print(first.stdout.strip(), second.stdout.strip(), third.stdout.strip(), after_second - after_first,
      after_third - after_second, '"/root/b.zip/probe.py", line 4' in second.stderr, "from the zip" in second.stderr)
'''


def test_a_hosts_python_keeps_code_compiled_from_zips_by_content(two_hosts: list[HostSpec]) -> None:
    """host_python/gpufleet_lab_zipcache.py: the same bytes from another archive are a hit (no new file) whose
    traceback names the archive they came from this time; other bytes at the same path compile anew."""
    host = two_hosts[0].name
    out = exec_in(host, ["python3", "-c", ZIPPED_PROBE]).split()
    assert out == ["42", "42", "43", "0", "1", "True", "True"]


def test_a_foreign_container_of_the_same_name_is_not_replaced() -> None:
    podman(["create", "--name", "lab-it-foreign", "--label", "owner=gpufleet-test", IMAGE, "/sbin/init"])
    try:
        with pytest.raises(HostError) as err:
            start_hosts([HostSpec("lab-it-foreign", "x", "127.0.203.1", state=_state(1))])
        assert str(err.value) == ("a container named lab-it-foreign exists and is not ours "
                                  "(owner='gpufleet-test'); remove it by hand")
        assert stop_hosts(["lab-it-foreign"]) == []
        assert cleanup() == [] or "lab-it-foreign" not in cleanup()
    finally:
        podman(["rm", "--force", "--time", "1", "lab-it-foreign"])


def test_cleanup_removes_only_lab_containers_and_their_files() -> None:
    start_hosts([HostSpec("lab-it-3", "x", "127.0.204.1", state=_state(1))])
    assert host_files_dir("lab-it-3").exists()
    removed = cleanup()
    assert "lab-it-3" in removed
    assert not host_files_dir("lab-it-3").exists()
    assert [r for r in list_hosts(LAB_OWNER) if r["name"] == "lab-it-3"] == []


def test_fleet_up_and_down_with_synthetic_hosts() -> None:
    try:
        reposerver.check_repo(reposerver.repo_dir())
    except reposerver.RepoServerError as exc:
        pytest.fail(str(exc))
    was_serving = reposerver.is_serving()
    fleet = fleet_mod.up("lab-it-fleet", count=2)
    try:
        assert fleet.host_names == ["lab-it-fleet-01", "lab-it-fleet-02"]
        assert all(h["gpus"] > 0 and h["pci_devices"] >= h["gpus"] for h in fleet.hosts)
        assert reposerver.is_serving()
        assert (was_serving and fleet.repo_pid is None) or (not was_serving and fleet.repo_pid is not None)
        key = exec_in(fleet.host_names[0], ["curl", "-fsS", "-o", "/dev/null", "-w", "%{http_code}",
                                            "http://127.0.0.1:8765/gpusim-archive-keyring.gpg"])
        assert key == "200"
    finally:
        removed = fleet_mod.down("lab-it-fleet")
    assert sorted(removed) == ["lab-it-fleet-01", "lab-it-fleet-02"]
    assert fleet_mod.load_record("lab-it-fleet") is None
    if not was_serving:
        assert not reposerver.is_serving()
