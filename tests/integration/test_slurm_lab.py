"""Real Slurm on the simulated fleet: Debian's slurmctld and slurmd with the NVML plugin from ``contrib``.

Two podman hosts from the prepared Slurm image (the ``plain-550`` baseline: simulated driver 550 and NVML; plus
``slurmctld slurmd slurm-client munge`` and ``gpu_nvml.so``, see ``gpufleet_lab.slurm``), each with a tmpfs over
``/proc/driver`` where the simulated driver keeps its MIG device files. ``slurm-a`` (2x A100 40GB) runs slurmctld
and slurmd, ``slurm-b`` (4x A30) slurmd; the munge key is generated for this run.

The judge is slurmd's own NVML detection (``slurmd -G``, ``AutoDetect=nvml``), a client gpufleet did not write:
it must list the plain GPUs, and after a MIG layout exactly that layout's MIG devices with their profile types and
the capability device files that exist on the host; ``scontrol show node`` must agree once slurmd restarted.

One cluster serves every test of the file, in order: the ``slurm_gres`` role against ``slurm.conf``;
``mig_reconfigure.yml`` around a running job (the idle node proceeds, the busy one waits); slurmd's own
HealthCheckProgram after an injected ECC error; ``driver_upgrade.yml`` through the same drain hooks; a failed
apply (injected NVML error) under two fail percentages (last: it leaves a half-applied layout).
"""

from __future__ import annotations

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
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostError, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.loader import lab_hosts
from gpufleet_lab.podman import MOLECULE_OWNER, containers_conf, project_root
from gpufleet_sim.repo import key_fingerprint

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

ROOT = project_root()
NODES = {"slurm-a": "127.0.222.1", "slurm-b": "127.0.223.1"}  # used by no other test (tests/suite_lanes.py)
PRESETS = {"slurm-a": "2xA100-40GB", "slurm-b": "4xA30"}
REPO = "http://127.0.0.1:8765/"



@pytest.fixture(scope="module")
def cluster() -> Iterator[slurm.Cluster]:
    """The two hosts with Slurm started on them."""
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    start = time.monotonic()
    server_pid = reposerver.start()  # a missing baseline image is built from the simulated repository
    try:
        base = lab_hosts().ensure_baselines({"plain-550"})["plain-550"]
        image = slurm.ensure_slurm_image(base)
        # owned like Molecule's hosts: another engineer's `gpufleet-lab cleanup` (lab hosts only) leaves them
        start_hosts([HostSpec(name, PRESETS[name], address, tmpfs=slurm.DRIVER_TMPFS, owner=MOLECULE_OWNER)
                     for name, address in NODES.items()], image=image)
        # typed as slurmd names the simulated models (NVML name, lower case, blanks as "_")
        lab = slurm.Cluster(NODES, gres={"slurm-a": "gpu:nvidia_a100-sxm4-40gb:2", "slurm-b": "gpu:nvidia_a30:4"})
        lab.start()
        lab.wait_idle()
        print(f"slurm lab up in {time.monotonic() - start:.0f} s")
        yield lab
    finally:
        stop_hosts(list(NODES), owners=(MOLECULE_OWNER,))
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


def test_slurm_gres_role_writes_the_node_gres_into_slurm_conf_and_converges(cluster: slurm.Cluster,
                                                                           tmp_path: Path) -> None:
    inventory = {"all": {"hosts": {"slurm-b": HOST, "slurm-a": HOST}}}
    play = ROLE_PLAY.replace("hosts: all", "hosts: slurm-b")
    role_vars = {"slurm_gres_scontrol_host": "slurm-a", "slurm_gres_verify_delay": 1,
                 "slurm_gres_slurm_conf_hosts": list(NODES)}
    # a node named nowhere in slurm.conf: refused before anything changes
    exec_in("slurm-b", ["sh", "-c", "echo '# before' > /etc/slurm/gres.conf"])
    bad = _playbook(tmp_path, "role", play, inventory, {**role_vars, "slurm_gres_node_name": "slurm-z"})
    assert bad.returncode == 2
    assert ("slurm_gres: slurm.conf (/etc/slurm/slurm.conf) on slurm-a, slurm-b has no line of its own for "
            "NodeName=slurm-z (a node defined only in a range, or a missing or unreadable file), so its Gres= cannot "
            "be set; give the node its own NodeName line, or set slurm_gres_slurm_conf_hosts to [] and write Gres= "
            "from slurm_gres_node_gres yourself. Nothing was changed.") in " ".join(bad.stdout.split())
    assert exec_in("slurm-b", ["cat", "/etc/slurm/gres.conf"]) == "# before\n"

    # slurm-b's line loses its Gres= in both copies of slurm.conf: the role puts it back and reconfigures
    for host in NODES:
        exec_in(host, ["sed", "-i", "s/^\\(NodeName=slurm-b .*\\) Gres=[^ ]*/\\1/", "/etc/slurm/slurm.conf"])
        assert "Gres=" not in _conf_line(host, "slurm-b")
    run = _playbook(tmp_path, "role", play, inventory, role_vars)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "GRES=gpu:nvidia_a30:4" in run.stdout
    assert exec_in("slurm-b", ["grep", "-v", "^#", "/etc/slurm/gres.conf"]) == "AutoDetect=nvml\n"
    for host in NODES:
        assert " Gres=gpu:nvidia_a30:4" in _conf_line(host, "slurm-b")
    again = _playbook(tmp_path, "role", play, inventory, role_vars)
    assert again.returncode == 0, again.stdout[-3000:]
    assert re.search(r"slurm-b\s*: ok=\d+\s+changed=0\s", again.stdout), again.stdout[-1500:]
    cluster.wait_idle()


def _conf_line(host: str, node: str) -> str:
    """``node``'s NodeName line in ``host``'s slurm.conf."""
    return exec_in(host, ["awk", "-v", f"want=NodeName={node}", "$1 == want", "/etc/slurm/slurm.conf"]).strip()


def _state(host: str) -> str:
    return _node(host)["State"]


def _reason(host: str) -> str:
    """The node's Reason= as the controller reports it, without the ``[user@time]`` scontrol adds."""
    out = exec_in("slurm-a", ["scontrol", "show", "node", "--oneliner", host])
    match = re.search(r" Reason=(.*?) \[[^\]]*\]", out)
    return match.group(1) if match else ""


def _judged_gres(host: str) -> list[str]:
    """What slurmd's own NVML detection (``slurmd -G``) makes of the host's GPUs, as sorted Gres= items."""
    return sorted(slurm.gres_value(slurm.detected_gres(host)).split(","))


def _sim(host: str, call: str) -> str:
    """Call the simulated driver's hardware module on ``host`` (as molecule/_shared/tasks/sim_hardware.yml does)."""
    return exec_in(host, ["/usr/bin/python3", "-c", "import sys; sys.path.insert(0, '/usr/lib/nvidia-sim/python'); "
                          f"from nvidia_sim import hardware; print(hardware.{call})"])


def _holds(predicate: Any) -> bool:
    try:
        return bool(predicate())
    except HostError:  # scontrol while slurmctld reconfigures or restarts
        return False


def _wait_for(what: str, predicate: Any, timeout: float, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not _holds(predicate):
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the playbook ended (rc {proc.returncode}) before {what}:\n{proc.stdout.read()[-4000:]}"
                        if proc.stdout else f"the playbook ended before {what}")
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(1)


def _start_job(node: str, marker: str) -> None:
    """A batch job on ``node`` that runs until /tmp/<marker>.release exists there, then records when it ended."""
    exec_in(node, ["rm", "-f", f"/tmp/{marker}.release", f"/tmp/{marker}.end", f"/tmp/{marker}.out"])
    exec_in("slurm-a", ["sbatch", "-w", node, "-o", f"/tmp/{marker}.out", "--wrap",
                        f"while [ ! -e /tmp/{marker}.release ]; do sleep 1; done; date +%s > /tmp/{marker}.end; "
                        "echo finished"])
    _wait_for(f"the job starting on {node}",
              lambda: node in exec_in("slurm-a", ["squeue", "-h", "-t", "R", "-o", "%N"]), 30)


def _ansible(work: Path, playbook: Path, hosts: dict[str, dict[str, Any]],
             extravars: dict[str, Any]) -> subprocess.Popen[str]:
    """Start ``ansible-playbook`` on ``hosts`` (in this order) in the background; output on its stdout."""
    (work / "hosts.yml").write_text(json.dumps({"all": {"hosts": {n: {**HOST, **v} for n, v in hosts.items()}}}),
                                    encoding="utf-8")
    (work / "vars.json").write_text(json.dumps(extravars), encoding="utf-8")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "ANSIBLE_PIPELINING": "True"}
    return subprocess.Popen([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(work / "hosts.yml"),
                             str(playbook), "-e", f"@{work / 'vars.json'}"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen[str], timeout: float = 600) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


# Every MIG run: one node per batch, Slurm drain on the controller slurm-a, the new Gres= written into both copies
# of slurm.conf (each lab host keeps its own), scontrol reconfigure, slurmd restarted.
MIG_SLURM = {"gpufleet_mig_hosts": "all", "gpufleet_mig_serial": 1, "gpufleet_mig_drain_slurm": True,
             "gpufleet_mig_slurm_host": "slurm-a", "gpufleet_mig_slurm_gres": True,
             "gpufleet_mig_slurm_conf_hosts": list(NODES), "gpufleet_mig_drain_delay": 1,
             "gpufleet_mig_drain_retries": 240, "slurm_gres_verify_delay": 1}
LAYOUTS = {"a100": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.20gb": 2}}],
           "a30": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"2g.12gb": 2}}],
           "a100-small": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"2g.10gb": 3}}],
           "a30-small": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"1g.6gb": 4}}]}
MIG_PLAYBOOK = ROOT / "playbooks" / "mig_reconfigure.yml"


def test_reconfigure_waits_for_the_busy_node_while_the_idle_one_proceeds(cluster: slurm.Cluster,
                                                                          tmp_path: Path) -> None:
    cluster.wait_idle()
    listing_b = exec_in("slurm-b", ["nvidia-smi", "-L"])
    _start_job("slurm-b", "busy")
    start = time.monotonic()
    proc = _ansible(tmp_path, MIG_PLAYBOOK, {"slurm-a": {"nvidia_mig_layout": "a100"},
                                             "slurm-b": {"nvidia_mig_layout": "a30"}},
                    {**MIG_SLURM, "nvidia_mig_layouts": LAYOUTS})
    # slurm-a (idle, first batch) is changed and back in service while slurm-b's job still runs
    a100 = ["gpu:nvidia_a100_3g.20gb:4"]  # 2 GPUs x two 3g.20gb
    _wait_for("slurm-a back in service with its new GRES",
              lambda: _gres("slurm-a") == a100 and "DRAIN" not in _state("slurm-a"), 300, proc)
    idle_done = time.monotonic() - start
    # then slurm-b's batch: drained (no new job lands) around the job that goes on running
    _wait_for("slurm-b draining around its job", lambda: "DRAIN" in _state("slurm-b"), 120, proc)
    time.sleep(3)
    assert proc.poll() is None
    assert "DRAIN" in _state("slurm-b")
    assert "slurm-b" in exec_in("slurm-a", ["squeue", "-h", "-t", "R", "-o", "%N"])
    assert exec_in("slurm-b", ["nvidia-smi", "-L"]) == listing_b
    exec_in("slurm-b", ["touch", "/tmp/busy.release"])
    rc, out = _finish(proc)
    took = time.monotonic() - start
    assert rc == 0, out[-5000:]
    print(f"mig_reconfigure over two Slurm nodes: the idle one back in service after {idle_done:.0f} s, "
          f"all done in {took:.0f} s")
    assert exec_in("slurm-b", ["cat", "/tmp/busy.out"]).strip() == "finished"
    job_end = int(exec_in("slurm-b", ["cat", "/tmp/busy.end"]))
    assert int(exec_in("slurm-b", ["stat", "-c", "%Y", "/etc/gpufleet/mig-state.json"])) >= job_end
    a30 = ["gpu:nvidia_a30_2g.12gb:8"]  # 4 GPUs x two 2g.12gb
    assert (_gres("slurm-a"), _gres("slurm-b")) == (a100, a30)
    assert (_judged_gres("slurm-a"), _judged_gres("slurm-b")) == (a100, a30)  # slurmd's own detection agrees
    for host in NODES:  # both copies of slurm.conf carry both nodes' new Gres=
        assert f"Gres={a100[0]}" in _conf_line(host, "slurm-a").split()
        assert f"Gres={a30[0]}" in _conf_line(host, "slurm-b").split()
    assert "DRAIN" not in _state("slurm-a")
    assert "DRAIN" not in _state("slurm-b")
    # and Slurm schedules the new slices: a job asking for one 2g.12gb runs on slurm-b and sees one MIG device
    seen = exec_in("slurm-a", ["srun", "-w", "slurm-b", "--gres=gpu:nvidia_a30_2g.12gb:1", "printenv",
                               "CUDA_VISIBLE_DEVICES"]).strip()
    assert re.fullmatch(r"MIG-[0-9a-f-]+", seen), seen
    assert seen in exec_in("slurm-b", ["nvidia-smi", "-L"])


HEALTH_PLAY = """\
- name: gpu_health
  hosts: all
  gather_facts: false
  become: true
  roles:
    - role: gpufleet.nvidia.gpu_health
"""
WRAPPER = "/usr/local/sbin/gpufleet-slurm-healthcheck"


def test_slurmd_health_check_drains_the_node_with_the_failing_check_after_an_injected_fault(
        cluster: slurm.Cluster, tmp_path: Path) -> None:
    inventory = {"all": {"hosts": {"slurm-a": HOST, "slurm-b": HOST}}}
    # the kernel log of a container is the host's: judge XIDs by NVML events only
    health_vars = {"gpu_health_thresholds": {"xid_kernel_log": False}}
    # the first test stopped slurm-a's nvidia-persistenced to enable MIG; a healthy node runs it
    exec_in("slurm-a", ["systemctl", "start", "nvidia-persistenced"])
    healthy = _playbook(tmp_path, "health", HEALTH_PLAY, inventory, health_vars)
    assert healthy.returncode == 0, healthy.stdout[-4000:]
    # slurmd runs the wrapper slurm_gres installed (on both nodes, by mig_reconfigure) as its HealthCheckProgram
    for host in NODES:
        assert exec_in(host, ["sh", "-c", f"test -x {WRAPPER} && test -s /var/lib/gpufleet/health.json && echo ok"],
                       check=False) == "ok\n", host
    cluster.read_gres()
    cluster.health_check = WRAPPER
    try:
        cluster.restart()
        cluster.wait_idle()
        time.sleep(2 * cluster.health_check_interval)  # a few rounds of the health check on healthy GPUs
        assert ("DRAIN" not in _state("slurm-a"), "DRAIN" not in _state("slurm-b")) == (True, True)

        _sim("slurm-b", "inject('ecc-uncorrectable', '2', {'count': 1})")
        sick = _playbook(tmp_path, "health", HEALTH_PLAY, inventory, health_vars)
        assert sick.returncode == 2  # gpu_health fails slurm-b, after writing its report
        report = json.loads(exec_in("slurm-b", ["cat", "/var/lib/gpufleet/health.json"]))
        assert report["status"] == "fail"
        failed = report["failed"]
        assert any(name.endswith("[gpu 2]") and name.startswith("ecc") for name in failed), failed
        start = time.monotonic()
        _wait_for("slurmd's health check draining slurm-b", lambda: "DRAIN" in _state("slurm-b"),
                  10 * cluster.health_check_interval)
        print(f"slurmd's HealthCheckProgram drained slurm-b {time.monotonic() - start:.0f} s after the report")
        assert _reason("slurm-b") == "gpu_health: " + ", ".join(failed)
        assert "DRAIN" not in _state("slurm-a")  # the healthy node is left alone
    finally:
        _sim("slurm-b", "clear(None, '2')")
        exec_in("slurm-b", ["rm", "-f", "/var/lib/gpufleet/health.json"])
        cluster.health_check = None
        cluster.restart()
        exec_in("slurm-a", ["scontrol", "update", "nodename=slurm-b", "state=resume"], check=False)
        cluster.wait_idle()


def test_driver_upgrade_drains_waits_and_resumes_through_the_same_slurm_hooks(cluster: slurm.Cluster,
                                                                              tmp_path: Path) -> None:
    cluster.wait_idle()
    gnupg = tmp_path / "gnupg"
    gnupg.mkdir(mode=0o700)
    repo = {"nvidia_driver_repo_url": REPO, "nvidia_driver_repo_suite": "./",
            "nvidia_driver_repo_key_url": REPO + "gpusim-archive-keyring.gpg",
            "nvidia_driver_repo_key_fingerprint": key_fingerprint(
                reposerver.repo_dir() / "gpusim-archive-keyring.gpg", gnupg)}
    exec_in("slurm-a", ["scontrol", "update", "nodename=slurm-a", "state=drain", "reason=disk swap"])
    gres = {host: _gres(host) for host in NODES}
    _start_job("slurm-b", "drv")
    # the branch the hosts run (550): the driver stays, the hooks around it are what is under test
    proc = _ansible(tmp_path, ROOT / "playbooks" / "driver_upgrade.yml", {"slurm-a": repo, "slurm-b": repo}, {
        "gpufleet_hosts": "all", "nvidia_driver_branch": "550", "gpufleet_driver_upgrade_drain_slurm": True,
        "gpufleet_driver_upgrade_slurm_host": "slurm-a", "gpufleet_driver_upgrade_slurm_gres": True,
        "gpufleet_driver_upgrade_slurm_conf_hosts": list(NODES), "gpufleet_driver_upgrade_drain_delay": 1,
        "gpufleet_driver_upgrade_drain_retries": 240, "slurm_gres_verify_delay": 1})
    _wait_for("slurm-b draining around its job", lambda: "DRAIN" in _state("slurm-b"), 300, proc)
    time.sleep(3)
    assert proc.poll() is None
    assert "DRAIN" in _state("slurm-b")
    exec_in("slurm-b", ["touch", "/tmp/drv.release"])
    rc, out = _finish(proc)
    assert rc == 0, out[-5000:]
    job_end = int(exec_in("slurm-b", ["cat", "/tmp/drv.end"]))
    restarted = exec_in("slurm-b", ["systemctl", "show", "-P", "ActiveEnterTimestamp", "slurmd"]).strip()
    assert int(exec_in("slurm-b", ["date", "-d", restarted, "+%s"])) >= job_end  # slurmd restarted after the job
    assert "DRAIN" not in _state("slurm-b")
    assert (_reason("slurm-a"), "DRAIN" in _state("slurm-a")) == ("disk swap", True)  # the operator's drain stays
    assert {host: _gres(host) for host in NODES} == gres
    exec_in("slurm-a", ["scontrol", "update", "nodename=slurm-a", "state=resume"])


def test_a_failed_apply_keeps_its_node_drained_and_the_fail_percentage_decides_the_rest(
        cluster: slurm.Cluster, tmp_path: Path) -> None:
    cluster.wait_idle()
    exec_in("slurm-a", ["scontrol", "update", "nodename=slurm-a", "state=drain", "reason=disk swap"])
    gres_a = _gres("slurm-a")
    _sim("slurm-b", "inject('nvml-error', '1', {'function': 'nvmlDeviceCreateGpuInstanceWithPlacement', "
                    "'code': 999})")
    hosts = {"slurm-b": {"nvidia_mig_layout": "a30-small"}, "slurm-a": {"nvidia_mig_layout": "a100-small"}}
    try:
        # max_fail_percentage 0: slurm-b (first batch) fails half-way, and slurm-a's batch never starts
        rc, out = _finish(_ansible(tmp_path, MIG_PLAYBOOK, hosts, {**MIG_SLURM, "nvidia_mig_layouts": LAYOUTS}))
        assert rc == 2, out[-5000:]
        reason = _reason("slurm-b")
        assert "DRAIN" in _state("slurm-b")
        assert reason.startswith("gpufleet MIG reconfiguration failed - "), reason
        assert "nvmlDeviceCreateGpuInstanceWithPlacement failed on GPU 1" in reason, reason
        assert (_gres("slurm-a"), _reason("slurm-a")) == (gres_a, "disk swap")
        assert "DRAIN" in _state("slurm-a")

        # max_fail_percentage 100: slurm-b fails again (its reason stays: it was drained before this run), and
        # slurm-a is changed, gets its new GRES, and stays drained for the operator who drained it
        rc, out = _finish(_ansible(tmp_path, MIG_PLAYBOOK, hosts, {
            **MIG_SLURM, "nvidia_mig_layouts": LAYOUTS, "gpufleet_mig_max_fail_percentage": 100}))
        assert rc == 2, out[-5000:]
        assert _reason("slurm-b") == reason
        assert _gres("slurm-a") == ["gpu:nvidia_a100_2g.10gb:6"]  # 2 GPUs x three 2g.10gb
        assert _judged_gres("slurm-a") == ["gpu:nvidia_a100_2g.10gb:6"]
        assert (_reason("slurm-a"), "DRAIN" in _state("slurm-a")) == ("disk swap", True)
    finally:
        _sim("slurm-b", "clear('nvml-error')")
        for host in NODES:
            exec_in("slurm-a", ["scontrol", "update", f"nodename={host}", "state=resume"], check=False)
