"""Real Slurm on the simulated fleet: Debian's slurmctld and slurmd with the NVML plugin from ``contrib``.

Two podman hosts from the prepared Slurm image (the ``plain-550`` baseline: simulated driver 550 and NVML; plus
``slurmctld slurmd slurm-client munge`` and ``gpu_nvml.so``, see ``gpufleet_lab.slurm``), each with a tmpfs over
``/proc/driver`` where the simulated driver keeps its MIG device files. ``slurm-a`` (2x A100 40GB) runs slurmctld
and slurmd, ``slurm-b`` (4x A30) slurmd; the munge key is generated for this run.

The judge is slurmd's own NVML detection (``slurmd -G``, ``AutoDetect=nvml``), a client gpufleet did not write:
it must list the plain GPUs, and after a MIG layout exactly that layout's MIG devices with their profile types and
the capability device files that exist on the host; ``scontrol show node`` must agree once slurmd restarted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet_lab import reposerver, slurm
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.podman import containers_conf, podman, project_root

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

ROOT = project_root()
NODES = {"slurm-a": "127.0.216.1", "slurm-b": "127.0.217.1"}
PRESETS = {"slurm-a": "2xA100-40GB", "slurm-b": "4xA30"}


def _lab_hosts() -> Any:
    spec = importlib.util.spec_from_file_location("lab_hosts", ROOT / "molecule" / "_shared" / "lab_hosts.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cluster() -> Iterator[slurm.Cluster]:
    """The two hosts with Slurm started on them."""
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    start = time.monotonic()
    server_pid = reposerver.start()  # a missing baseline image is built from the simulated repository
    try:
        base = _lab_hosts().ensure_baselines({"plain-550"})["plain-550"]
        image = slurm.ensure_slurm_image(base)
        start_hosts([HostSpec(name, PRESETS[name], address, tmpfs=slurm.DRIVER_TMPFS)
                     for name, address in NODES.items()], image=image)
        # typed as slurmd names the simulated models (NVML name, lower case, blanks as "_")
        lab = slurm.Cluster(NODES, gres={"slurm-a": "gpu:nvidia_a100-sxm4-40gb:2", "slurm-b": "gpu:nvidia_a30:4"})
        lab.start()
        lab.wait_idle()
        print(f"slurm lab up in {time.monotonic() - start:.0f} s")
        yield lab
    finally:
        stop_hosts(list(NODES))
        reposerver.stop(server_pid)


def _node(host: str) -> dict[str, str]:
    out = exec_in("slurm-a", ["scontrol", "show", "node", host])
    return dict(re.findall(r"(\w+)=(\S+)", out))


def _gres(host: str) -> list[str]:
    """The node's Gres= as the controller reports it, sorted, without the socket affinity (``gpu:x:4(S:0-1)``)."""
    return sorted(re.sub(r"\(S:[^)]*\)", "", _node(host)["Gres"]).split(","))


def test_slurmd_detects_the_gpus_then_exactly_the_mig_devices(cluster: slurm.Cluster) -> None:
    a30 = slurm.detected_gres("slurm-b")
    assert [(r["name"], r["type"], r["count"], r["index"], r["file"]) for r in a30] == [
        ("gpu", "nvidia_a30", "1", str(i), f"/dev/nvidia{i}") for i in range(4)]
    assert _gres("slurm-b") == ["gpu:nvidia_a30:4"]
    assert _gres("slurm-a") == ["gpu:nvidia_a100-sxm4-40gb:2"]

    # GPU 0 of slurm-a: MIG on, one 3g.20gb and two 1g.5gb (profile ids 9 and 19 of the A100 40GB)
    exec_in("slurm-a", ["sh", "-c", "systemctl stop nvidia-persistenced 2>/dev/null; nvidia-smi -i 0 -mig 1 && "
                        "nvidia-smi -r -i 0 && nvidia-smi mig -i 0 -cgi 9,19,19 -C"])
    # slurm.conf names the new layout; slurmd keeps a type only where its own detection has a device of it
    cluster.gres["slurm-a"] = "gpu:nvidia_a100-sxm4-40gb:1,gpu:nvidia_a100_1g.5gb:2,gpu:nvidia_a100_3g.20gb:1"
    cluster.write_config()
    rows = slurm.detected_gres("slurm-a")
    assert sorted((r["type"], r["count"]) for r in rows) == [
        ("nvidia_a100-sxm4-40gb", "1"), ("nvidia_a100_1g.5gb", "1"), ("nvidia_a100_1g.5gb", "1"),
        ("nvidia_a100_3g.20gb", "1")]
    assert [r["file"] for r in rows if r["type"] == "nvidia_a100-sxm4-40gb"] == ["/dev/nvidia1"]
    caps = [path for row in rows for path in row["file"].split(",") if "nvidia-caps" in path]
    assert len(caps) == len(set(caps)) == 6  # one GI and one CI capability per MIG device
    for row in rows:
        for path in row["file"].split(","):
            assert exec_in("slurm-a", ["sh", "-c", f"test -e {path} && echo ok"], check=False) == "ok\n", path

    cluster.restart(["slurm-a"])
    cluster.wait_idle()
    assert _gres("slurm-a") == ["gpu:nvidia_a100-sxm4-40gb:1", "gpu:nvidia_a100_1g.5gb:2", "gpu:nvidia_a100_3g.20gb:1"]

    # a job asking for one 1g.5gb gets exactly one MIG device, by its UUID, one of the 1g.5gb that nvidia-smi lists
    seen = exec_in("slurm-a", ["srun", "-w", "slurm-a", "--gres=gpu:nvidia_a100_1g.5gb:1", "printenv",
                               "CUDA_VISIBLE_DEVICES"]).strip()
    listing = exec_in("slurm-a", ["nvidia-smi", "-L"])
    small = re.findall(r"MIG 1g\.5gb\s+Device\s+\d+: \(UUID: (MIG-[0-9a-f-]+)\)", listing)
    assert len(small) == 2
    assert seen in small


def _playbook(work: Path, name: str, text: str, inventory: dict[str, Any],
              extravars: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    (work / f"{name}.yml").write_text(text, encoding="utf-8")
    (work / f"{name}-hosts.yml").write_text(json.dumps(inventory), encoding="utf-8")
    (work / f"{name}-vars.json").write_text(json.dumps(extravars), encoding="utf-8")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "ANSIBLE_PIPELINING": "True"}
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                           str(work / f"{name}-hosts.yml"), str(work / f"{name}.yml"),
                           "-e", f"@{work / f'{name}-vars.json'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=600)


HOST = ANSIBLE_HOST_VARS
ROLE_PLAY = """\
- name: slurm_gres
  hosts: all
  gather_facts: false
  become: true
  roles:
    - role: gpufleet.nvidia.slurm_gres
  tasks:
    - name: Show the Gres= value
      ansible.builtin.debug:
        msg: "GRES={{ slurm_gres_node_gres }}"
"""


def test_slurm_gres_role_and_its_health_check_against_the_controller(cluster: slurm.Cluster,
                                                                     tmp_path: Path) -> None:
    inventory = {"all": {"hosts": {"slurm-b": HOST, "slurm-a": HOST}}}
    run = _playbook(tmp_path, "role", ROLE_PLAY.replace("hosts: all", "hosts: slurm-b"), inventory,
                    {"slurm_gres_scontrol_host": "slurm-a", "slurm_gres_verify_delay": 1})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "GRES=gpu:nvidia_a30:4" in run.stdout
    assert exec_in("slurm-b", ["grep", "-v", "^#", "/etc/slurm/gres.conf"]) == "AutoDetect=nvml\n"
    again = _playbook(tmp_path, "role", ROLE_PLAY.replace("hosts: all", "hosts: slurm-b"), inventory,
                      {"slurm_gres_scontrol_host": "slurm-a", "slurm_gres_verify_delay": 1})
    assert again.returncode == 0, again.stdout[-3000:]
    assert re.search(r"slurm-b\s*: ok=\d+\s+changed=0\s", again.stdout), again.stdout[-1500:]
    cluster.wait_idle()

    # the HealthCheckProgram wrapper: a failing gpu_health report drains the node naming the failing checks
    report = {"status": "fail", "failed": ["xid[gpu 2]", "ecc_dbe[gpu 2]"]}
    podman(["exec", "-i", "slurm-b", "sh", "-c", "mkdir -p /var/lib/gpufleet && cat > /var/lib/gpufleet/health.json"],
           input_data=json.dumps(report).encode())
    exec_in("slurm-b", ["/usr/local/sbin/gpufleet-slurm-healthcheck"])
    assert "Reason=gpu_health: xid[gpu 2], ecc_dbe[gpu 2] " in exec_in(
        "slurm-a", ["scontrol", "show", "node", "slurm-b"])
    exec_in("slurm-a", ["scontrol", "update", "nodename=slurm-b", "state=resume"])
    exec_in("slurm-b", ["sh", "-c", "echo '{\"status\": \"ok\", \"failed\": []}' > /var/lib/gpufleet/health.json"])
    exec_in("slurm-b", ["/usr/local/sbin/gpufleet-slurm-healthcheck"])
    assert "DRAIN" not in _node("slurm-b")["State"]



LAYOUTS = {"a100": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.20gb": 2}}],
           "a30": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"2g.12gb": 2}}]}


def _reconfigure(work: Path) -> subprocess.CompletedProcess[str]:
    inventory = work / "hosts.yml"
    host = ANSIBLE_HOST_VARS
    inventory.write_text(json.dumps({"all": {"hosts": {
        "slurm-a": {**host, "nvidia_mig_layout": "a100"}, "slurm-b": {**host, "nvidia_mig_layout": "a30"}}}}),
        encoding="utf-8")
    extravars = {"gpufleet_mig_hosts": "all", "gpufleet_mig_serial": 2, "gpufleet_mig_drain_slurm": True,
                 "gpufleet_mig_slurm_host": "slurm-a", "gpufleet_mig_drain_delay": 2, "gpufleet_mig_drain_retries": 60,
                 "nvidia_mig_layouts": LAYOUTS}
    (work / "vars.json").write_text(json.dumps(extravars), encoding="utf-8")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "ANSIBLE_PIPELINING": "True"}
    return subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
                           str(ROOT / "playbooks" / "mig_reconfigure.yml"), "-e", f"@{work / 'vars.json'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=600)


def test_reconfigure_drains_around_a_running_job_and_keeps_a_node_drained_by_someone_else(
        cluster: slurm.Cluster, tmp_path: Path) -> None:
    cluster.wait_idle()
    # a job that holds slurm-b for 20 s and records when it ends; slurm-a was drained by an operator before
    exec_in("slurm-a", ["sbatch", "-w", "slurm-b", "-o", "/tmp/busy.out", "--wrap",
                        "sleep 20; date +%s > /tmp/busy.end; echo finished"])
    exec_in("slurm-a", ["scontrol", "update", "nodename=slurm-a", "state=drain", "reason=disk swap"])
    deadline = time.monotonic() + 30
    while "slurm-b" not in exec_in("slurm-a", ["squeue", "-h", "-t", "R", "-o", "%N"]):
        assert time.monotonic() < deadline, "the job never started on slurm-b"
        time.sleep(1)
    start = time.monotonic()
    proc = _reconfigure(tmp_path)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    print(f"mig_reconfigure over the two Slurm nodes took {took:.0f} s")
    # the job ran to its end on slurm-b before slurm-b's GPUs changed
    assert exec_in("slurm-b", ["cat", "/tmp/busy.out"]).strip() == "finished"
    job_end = int(exec_in("slurm-b", ["cat", "/tmp/busy.end"]))
    applied = int(exec_in("slurm-b", ["stat", "-c", "%Y", "/etc/gpufleet/mig-state.json"]))
    assert applied >= job_end
    smi = exec_in("slurm-b", ["nvidia-smi", "mig", "-lgi"])
    assert smi.count("2g.12gb") == 8
    assert exec_in("slurm-a", ["nvidia-smi", "mig", "-lgi"]).count("3g.20gb") == 4
    assert "DRAIN" in _node("slurm-a")["State"]
    assert "Reason=disk swap " in exec_in("slurm-a", ["scontrol", "show", "node", "slurm-a"])  # the operator's
    assert "DRAIN" not in _node("slurm-b")["State"]
