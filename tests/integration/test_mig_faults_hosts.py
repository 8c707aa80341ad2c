"""Issue 13's MIG guarantees on a real systemd host: the nvidia_mig role run by ansible-playbook over the podman
connection, faults from the simulated C library's own injection (``nvidia_sim.hardware`` on the host).

One 8xA100 (80GB) podman host started from the prepared ``plain-550`` baseline image (NVML bindings + driver 550,
see molecule/_shared/lab_hosts.py). Every case first converges the host to 7x 1g.10gb per GPU with the role, then
applies 2x 3g.40gb per GPU under a fault:

1. an NVML error on create for GPU 5: only GPU 5 is short, the run fails naming it;
2. GPU 2 lost mid-apply (NVML_ERROR_GPU_IS_LOST on its create): the healthy GPUs converge, the run names GPU 2;
3. two ansible-playbook processes at once: their transactions overlap in time, the host lock lets one apply and
   the other find nothing left, no GPU half-applied;
   With two different layouts at once, the run that takes the lock second applies its own request (read under
   the lock) and the record names the layout the GPUs end with;
4. the controller SIGKILLed (its whole process group) while the host-side transaction runs: the GPU clients it
   stopped are active again in a new invocation, and the state file says ``success``, without any controller.

A test unit, ``mig-faults-slow-client``, stands for a GPU client that is slow to stop (DCGM draining, a kubelet):
listed before nvidia-persistenced in ``nvidia_mig_gpu_clients``, it is stopped after it (last one first), so the
transaction spends STOP_SECONDS with nvidia-persistenced down before the NVML work begins. That window is where
cases 3 and 4 need the transaction to be. The layouts are NVIDIA's A100 80GB placements (MIG User Guide):
1g.10gb starts 0-6, 3g.40gb starts 0 and 4.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lab_play import ansible_env, parse

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.loader import lab_hosts
from gpufleet_lab.podman import containers_conf, project_root

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mig_sim import mig_layout

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

ROOT = project_root()
HOST = "mig-faults-a100"
SLOW = "mig-faults-slow-client"
STOP_SECONDS = 6
#: how long after the controller is killed the stopped clients must be active again: the slow client's stop,
#: the NVML work and the two starts, with room for a loaded CI machine
RESTART_LIMIT_S = 30
STATE_FILE = "/etc/gpufleet/mig-state.json"
OLD = [("1g.10gb", s, [1]) for s in range(7)]
NEW = [("3g.40gb", 0, [3]), ("3g.40gb", 4, [3])]
ONE_7G = [("7g.80gb", 0, [7])]
PLAYBOOK = f"""\
- name: nvidia_mig
  hosts: all
  gather_facts: true
  vars:
    nvidia_mig_layouts:
      seven-1g:
        - devices: all
          mig_enabled: true
          gpu_instances: {{"1g.10gb": 7}}
      two-3g:
        - devices: all
          mig_enabled: true
          gpu_instances: {{"3g.40gb": 2}}
      one-7g:
        - devices: all
          mig_enabled: true
          gpu_instances: {{"7g.80gb": 1}}
    nvidia_mig_gpu_clients: [{SLOW}, nvidia-persistenced]
  roles:
    - role: gpufleet.nvidia.nvidia_mig
"""
SLOW_UNIT = f"""\
[Unit]
Description=gpufleet test: a GPU client that takes {STOP_SECONDS} s to stop

[Service]
ExecStart=/bin/sleep infinity
ExecStop=/bin/sleep {STOP_SECONDS}
"""



@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The host from the prepared baseline image, the playbook and an inventory; the host removed afterwards."""
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    work = tmp_path_factory.mktemp("mig-faults-hosts")
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {HOST: {
        **ANSIBLE_HOST_VARS}}}}),
        encoding="utf-8")
    (work / "mig.yml").write_text(PLAYBOOK, encoding="utf-8")
    server_pid = reposerver.start()  # a missing baseline image is built from the simulated repository
    try:
        baselines = lab_hosts()
        image = baselines.ensure_baselines({"plain-550"})["plain-550"]
        start_hosts([HostSpec(HOST, "8xA100", "127.0.218.1")], image=image)
        subprocess.run(["podman", "exec", "-i", HOST, "sh", "-c",
                        f"cat > /etc/systemd/system/{SLOW}.service && systemctl daemon-reload"],
                       input=SLOW_UNIT, text=True, check=True, capture_output=True)
        yield {"work": work, "inventory": inventory, "playbook": work / "mig.yml"}
    finally:
        stop_hosts([HOST])
        reposerver.stop(server_pid)


def _argv(lab: dict[str, Path], layout: str) -> list[str]:
    return [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(lab["inventory"]),
            str(lab["playbook"]), "-e", f"nvidia_mig_layout={layout}"]


def _env(lab: dict[str, Path]) -> dict[str, str]:
    return dict(ansible_env(lab["work"]), ANSIBLE_PIPELINING="True")


def _parse(rc: int, out: str, err: str) -> dict[str, Any]:
    doc = parse(rc, out, err)
    tasks = [task for play in doc["plays"] for task in play["tasks"]]
    failures = [result.get("msg", "") for task in tasks for result in task["hosts"].values()
                if result.get("failed") or result.get("unreachable")]
    return {"rc": rc, "failures": failures, "tasks": tasks}


def run(lab: dict[str, Path], layout: str) -> dict[str, Any]:
    """Apply ``layout`` with the role; return rc, the failed tasks' messages and the tasks."""
    proc = subprocess.run(_argv(lab, layout), cwd=ROOT, env=_env(lab), capture_output=True, text=True,
                          check=False, timeout=600)
    return _parse(proc.returncode, proc.stdout, proc.stderr)


def layouts() -> list[list[tuple[str, int, list[int]]]]:
    """What the simulated GPUs of the host hold, read from the host's simulator state."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"{HOST}-state-{os.getpid()}.json"
    path.write_text(exec_in(HOST, ["cat", "/var/lib/nvidia-sim/state.json"]), encoding="utf-8")
    try:
        return mig_layout(path)
    finally:
        path.unlink()


def record() -> dict[str, Any]:
    return dict(json.loads(exec_in(HOST, ["cat", STATE_FILE])))


def hardware(call: str) -> None:
    """Call the simulated driver's hardware module on the host (as molecule/_shared/tasks/sim_hardware.yml)."""
    exec_in(HOST, ["/usr/bin/python3", "-c", "import sys; sys.path.insert(0, '/usr/lib/nvidia-sim/python'); "
                   f"from nvidia_sim import hardware; print(hardware.{call})"])


def unit(name: str) -> dict[str, str]:
    out = exec_in(HOST, ["systemctl", "show", "--property=ActiveState", "--property=InvocationID", name])
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def seven_1g(lab: dict[str, Path]) -> None:
    """The known layout every case starts from."""
    result = run(lab, "seven-1g")
    assert (result["rc"], result["failures"]) == (0, [])
    assert layouts() == [OLD] * 8


def test_create_failing_on_one_gpu_leaves_only_that_gpu_short(lab: dict[str, Path]) -> None:
    seven_1g(lab)
    hardware("inject('nvml-error', '5', {'function': 'nvmlDeviceCreateGpuInstanceWithPlacement', 'code': 999})")
    try:
        result = run(lab, "two-3g")
    finally:
        hardware("clear('nvml-error', '5')")
    assert result["rc"] == 2
    [msg] = result["failures"]
    assert msg.startswith("nvidia_mig: applying layout 'two-3g' failed: nvmlDeviceCreateGpuInstanceWithPlacement "
                          "failed on GPU 5: Unknown Error"), msg
    assert "(GPUs done: 0, 1, 2, 3, 4, 6, 7; failed: 5; untouched: none;" in msg
    after = layouts()
    assert after[:5] + after[6:] == [NEW] * 7
    assert after[5] == []  # only the failing GPU is short of both layouts
    assert (record()["state"], record()["layout_name"]) == ("failed", "two-3g")


def test_gpu_lost_mid_apply_the_others_converge_and_the_run_names_it(lab: dict[str, Path]) -> None:
    seven_1g(lab)
    # NVML_ERROR_GPU_IS_LOST (15, nvml.h) on GPU 2's first create: the GPU falls away in the middle of its change
    hardware("inject('nvml-error', '2', {'function': 'nvmlDeviceCreateGpuInstanceWithPlacement', 'code': 15})")
    try:
        result = run(lab, "two-3g")
    finally:
        hardware("clear('nvml-error', '2')")
    assert result["rc"] == 2
    [msg] = result["failures"]
    assert msg.startswith("nvidia_mig: applying layout 'two-3g' failed: nvmlDeviceCreateGpuInstanceWithPlacement "
                          "failed on GPU 2: GPU is lost (NVML error 15)"), msg
    assert "failed: 2, lost: 2;" in msg
    after = layouts()
    assert after[:2] + after[3:] == [NEW] * 7
    assert record()["state"] == "failed"


def _task_name(task: dict[str, Any]) -> str:
    """A task's name without the role prefix (``gpufleet.nvidia.nvidia_mig : ``)."""
    return str(task["task"]["name"]).rsplit(" : ", 1)[-1]


def _transaction(result: dict[str, Any]) -> dict[str, Any]:
    [task] = [t for t in result["tasks"] if _task_name(t).startswith("Apply on the host in one transaction")]
    return dict(task["hosts"][HOST])


def _published(result: dict[str, Any]) -> dict[str, Any]:
    [task] = [t for t in result["tasks"] if _task_name(t).startswith("Publish the result of the run")]
    return dict(task["hosts"][HOST]["ansible_facts"]["nvidia_mig_result"])


def test_two_concurrent_applies_never_interleave(lab: dict[str, Path]) -> None:
    seven_1g(lab)
    exec_in(HOST, ["systemctl", "start", SLOW])  # keeps each transaction long enough for the two to overlap
    try:
        procs = [subprocess.Popen(_argv(lab, "two-3g"), cwd=ROOT, env=_env(lab), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        exec_in(HOST, ["systemctl", "stop", SLOW])
    results = [_parse(p.returncode, out, err) for p, (out, err) in zip(procs, outs, strict=True)]
    assert [(r["rc"], r["failures"]) for r in results] == [(0, []), (0, [])]
    # the command module's start and end of each transaction, on the host: the two ran at the same time
    first, second = ((_transaction(r)["start"], _transaction(r)["end"]) for r in results)
    assert first[0] < second[1], (first, second)
    assert second[0] < first[1], (first, second)
    changed = sorted(_published(r)["changed_gpus"] for r in results)
    assert changed == [[], [0, 1, 2, 3, 4, 5, 6, 7]]  # one applied; the other waited and found nothing to do
    assert layouts() == [NEW] * 8
    assert record()["state"] == "success"


def test_two_concurrent_runs_with_different_layouts_each_apply_their_own_request(lab: dict[str, Path]) -> None:
    """Two operators at once, two layouts: each transaction reads its own request under the host lock.

    The run that takes the lock second must change every GPU again (it applies its own request, not the first
    one's), and the record must name the layout the GPUs end with. The first run's verification may see the GPUs
    already holding the second layout; then it must fail there, naming its layout (never a false "applied").
    """
    seven_1g(lab)
    exec_in(HOST, ["systemctl", "start", SLOW])
    try:
        procs = {name: subprocess.Popen(_argv(lab, name), cwd=ROOT, env=_env(lab), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True) for name in ("two-3g", "one-7g")}
        outs = {name: proc.communicate(timeout=600) for name, proc in procs.items()}
    finally:
        exec_in(HOST, ["systemctl", "stop", SLOW])
    results = {name: _parse(procs[name].returncode, *outs[name]) for name in procs}
    spans = {name: (_transaction(r)["start"], _transaction(r)["end"]) for name, r in results.items()}
    (first, first_span), (last, last_span) = sorted(spans.items(), key=lambda item: item[1][1])
    assert last_span[0] < first_span[1], spans  # the two transactions overlapped in time
    assert (results[last]["rc"], results[last]["failures"]) == (0, [])
    assert _published(results[last])["changed_gpus"] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert layouts() == [{"two-3g": NEW, "one-7g": ONE_7G}[last]] * 8
    assert (record()["state"], record()["layout_name"]) == ("success", last)
    if results[first]["rc"] != 0:
        assert [m.split(":", 2)[:2] for m in results[first]["failures"]] == [
            ["nvidia_mig", " the GPUs do not show layout '" + first + "'"]], results[first]["failures"]
    leftovers = exec_in(HOST, ["sh", "-c", "ls -A /run/gpufleet"]).split()
    assert [f for f in leftovers if f.startswith(("mig-request", "mig-apply-result"))] == []


def test_controller_killed_mid_apply_clients_come_back_without_it(lab: dict[str, Path]) -> None:
    seven_1g(lab)
    exec_in(HOST, ["systemctl", "start", SLOW])
    before = {name: unit(name) for name in ("nvidia-persistenced", SLOW)}
    assert [u["ActiveState"] for u in before.values()] == ["active", "active"]
    proc = subprocess.Popen(_argv(lab, "two-3g"), cwd=ROOT, env=_env(lab), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    probe = (f"echo state=$(python3 -c 'import json; print(json.load(open(\"{STATE_FILE}\"))[\"state\"])'); "
             f"echo slow=$(systemctl is-active {SLOW})")
    while True:
        assert proc.poll() is None, "ansible-playbook ended before the transaction was seen running"
        assert time.monotonic() < deadline, f"the transaction never began stopping {SLOW}"
        seen = dict(line.split("=", 1) for line in exec_in(HOST, ["sh", "-c", probe]).splitlines())
        if (seen["state"], seen["slow"]) == ("pending", "deactivating"):  # persistenced down, NVML work ahead
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # ansible-playbook, its workers and their podman exec clients
    killed = time.monotonic()
    proc.wait(timeout=30)
    # the kill landed inside the transaction, with the clients down
    assert (unit("nvidia-persistenced")["ActiveState"], unit(SLOW)["ActiveState"]) == ("inactive", "deactivating")
    while True:
        now = {name: unit(name) for name in before}
        back = all(now[n]["ActiveState"] == "active" and now[n]["InvocationID"] != before[n]["InvocationID"]
                   for n in before)
        if back and record()["state"] != "pending":
            break
        assert time.monotonic() - killed < RESTART_LIMIT_S, (now, record()["state"])
        time.sleep(0.2)
    seconds = time.monotonic() - killed
    sys.stderr.write(f"\nGPU clients active again {seconds:.1f} s after the controller was killed\n")
    exec_in(HOST, ["systemctl", "stop", SLOW])
    assert (record()["state"], record()["layout_name"]) == ("success", "two-3g")
    assert layouts() == [NEW] * 8
