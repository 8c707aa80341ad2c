"""The nvidia_mps stop-under-load refusal (roles/nvidia_mps/tasks/clients.yml) fails closed (issue 11, issue 13).

Before: ``failed_when: false`` and a shell loop over an empty server list turned a running daemon that does not
answer into "no clients", so the role stopped or restarted it under load. Here the role's real task file runs in a
real ``ansible-playbook`` on localhost against the simulator's ``nvidia-cuda-mps-control`` (daemon and front end,
``gpufleet_sim.tools``) in a temporary pipe directory; ``systemctl is-active`` is a stand-in that answers what the
test says the unit's state is (this machine's PID 1 is not systemd).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet_sim import store

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
UUID = "GPU-00000000-0000-4000-8000-00000000abcd"
UNIT = f"nvidia-mps@{UUID}.service"
PLAYBOOK = """
- name: Check the MPS clients as nvidia_mps does before a stop or restart
  hosts: localhost
  gather_facts: false
  environment:
    PATH: "{{ fake_bin }}:{{ lookup('ansible.builtin.env', 'PATH') }}"
    NVML_SIM_STATE: "{{ sim_state }}"
    PYTHONPATH: "{{ sim_src }}"
  tasks:
    - name: Include the role's client check
      ansible.builtin.include_role:
        name: gpufleet.nvidia.nvidia_mps
        tasks_from: clients.yml
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A pipe directory, the simulated control program, a stand-in systemctl and the playbook."""
    from gpufleet_sim import presets  # in-repo: a failed import is a failure, never a skip
    doc = presets.build_state("8xH100-NVSwitch", 3)
    doc["require_root"] = False
    state = store.create(tmp_path / "state.json", doc)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    control = fake_bin / "nvidia-cuda-mps-control"
    control.write_text(f'#!/bin/sh\nexec {sys.executable} -m gpufleet_sim.tools.nvidia_cuda_mps_control "$@"\n',
                       encoding="utf-8")
    control.chmod(0o755)
    (tmp_path / "playbook.yml").write_text(PLAYBOOK, encoding="utf-8")
    pipes = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp"))  # a unix socket path has at most 107 bytes
    yield {"tmp": tmp_path, "state": state, "bin": fake_bin, "control": control, "pipes": pipes}
    shutil.rmtree(pipes, ignore_errors=True)


def unit_state(lab: dict[str, Any], active: bool) -> None:
    """``systemctl is-active --quiet UNIT`` answers ``active`` (0) or ``inactive`` (3) for every unit."""
    script = lab["bin"] / "systemctl"
    script.write_text(f'#!/bin/sh\n[ "$1" = is-active ] || exit 1\nexit {0 if active else 3}\n', encoding="utf-8")
    script.chmod(0o755)


@pytest.fixture
def daemon(lab: dict[str, Any]) -> Iterator[subprocess.Popen[bytes]]:
    """The simulated MPS control daemon of the unit's GPU, in the foreground (``-f``)."""
    pipe = lab["pipes"] / UUID
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(pipe), CUDA_MPS_LOG_DIRECTORY=str(lab["tmp"] / "log"),
               NVML_SIM_STATE=str(lab["state"]), PYTHONPATH=str(ROOT / "simulator" / "src"))
    proc = subprocess.Popen([str(lab["control"]), "-f"], env=env)
    deadline = time.monotonic() + 20
    while not (pipe / "control").exists():
        assert proc.poll() is None, "the simulated MPS daemon exited"
        assert time.monotonic() < deadline, "the simulated MPS daemon did not open its pipe"
        time.sleep(0.1)
    yield proc
    proc.terminate()
    proc.wait(timeout=20)


def send(lab: dict[str, Any], line: str) -> str:
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(lab["pipes"] / UUID), NVML_SIM_STATE=str(lab["state"]),
               PYTHONPATH=str(ROOT / "simulator" / "src"))
    return subprocess.run([str(lab["control"])], input=line + "\n", env=env, capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()


def check_clients(lab: dict[str, Any], force: bool = False) -> tuple[int, dict[str, Any]]:
    """Run clients.yml for the unit; return (rc, {task name: host result}) of the run."""
    extra = {"__nvidia_mps_check_units": [UNIT], "__nvidia_mps_control": str(lab["control"]),
             "nvidia_mps_pipe_dir": str(lab["pipes"]), "nvidia_mps_force_stop": force,
             "fake_bin": str(lab["bin"]), "sim_state": str(lab["state"]),
             "sim_src": str(ROOT / "simulator" / "src"), "ansible_python_interpreter": sys.executable}
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_LOCAL_TEMP=str(lab["tmp"] / "ansible-tmp"))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", str(lab["tmp"] / "playbook.yml"),
                           "-e", json.dumps(extra)], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False, timeout=180)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON from ansible-playbook (rc {proc.returncode}): {proc.stdout[-2000:]} "
                    f"{proc.stderr[-2000:]}")
    tasks = {t["task"]["name"].split(" : ", 1)[-1]: t["hosts"]["localhost"] for t in doc["plays"][0]["tasks"]}
    return proc.returncode, tasks


def test_running_daemon_that_does_not_answer_is_refused(lab: dict[str, Any]) -> None:
    """systemd says the daemon runs, its control pipe does not answer: refused, never "no clients"."""
    unit_state(lab, active=True)
    rc, tasks = check_clients(lab)
    assert rc == 2
    refusal = tasks["Refuse while a running daemon does not answer"]
    assert refusal["failed"] is True
    assert refusal["msg"] == (
        f"nvidia_mps: {UNIT} is running but its MPS control daemon does not answer (rc 1: Cannot find MPS control "
        "daemon process), so nothing can tell whether it serves clients, and stopping or restarting it could kill "
        "their work. Check systemctl status and the MPS control log, or set nvidia_mps_force_stop=true to stop it "
        "anyway.")
    assert "Refuse while clients are connected" not in tasks


def test_force_stop_goes_on_past_a_daemon_that_does_not_answer(lab: dict[str, Any]) -> None:
    unit_state(lab, active=True)
    rc, tasks = check_clients(lab, force=True)
    assert rc == 0
    assert tasks["Refuse while a running daemon does not answer"].get("failed", False) is False


def test_connected_client_is_refused(lab: dict[str, Any], daemon: subprocess.Popen[bytes]) -> None:
    unit_state(lab, active=True)
    send(lab, "sim_client_connect 31337 1000")
    rc, tasks = check_clients(lab)
    assert rc == 2
    refusal = tasks["Refuse while clients are connected"]
    assert refusal["msg"] == (
        f"nvidia_mps: {UNIT} serve connected MPS clients (PIDs 31337); stopping or restarting them kills that work. "
        "Drain the node first, or set nvidia_mps_force_stop=true.")
    assert daemon.poll() is None, "the check must leave the daemon running"
    assert send(lab, "get_server_list") != ""


def test_answering_daemon_without_clients_passes(lab: dict[str, Any], daemon: subprocess.Popen[bytes]) -> None:
    unit_state(lab, active=True)
    rc, tasks = check_clients(lab)
    assert rc == 0, tasks
    assert tasks["List the clients of each daemon"]["results"][0]["rc"] == 0
    assert daemon.poll() is None


def test_unit_not_running_has_no_clients(lab: dict[str, Any]) -> None:
    unit_state(lab, active=False)
    rc, tasks = check_clients(lab)
    assert rc == 0, tasks
    assert tasks["List the clients of each daemon"]["results"][0]["stdout"] == ""


def test_daemon_that_fails_on_stderr_only_is_refused(lab: dict[str, Any]) -> None:
    """The false green of before: an error on stderr, nothing on stdout, read as "no clients"."""
    unit_state(lab, active=True)
    lab["control"].write_text("#!/bin/sh\necho 'connect: Connection refused' >&2\nexit 1\n", encoding="utf-8")
    rc, tasks = check_clients(lab)
    assert rc == 2
    assert tasks["Refuse while a running daemon does not answer"]["msg"].startswith(
        f"nvidia_mps: {UNIT} is running but its MPS control daemon does not answer (rc 1: connect: Connection "
        "refused), so nothing can tell whether it serves clients")
