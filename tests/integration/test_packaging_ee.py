"""The execution environment: execution-environment.yml builds (here on the project's Debian test-host image, see
ee/build.py), and site.yml run through it with ansible-navigator, as AWX runs a job, converges a simulated host.

One host, a 4xA30 in group gpu_nodes only. It was two (with a 2xL40S) until issue 33: each task reaches a host
through ``podman exec`` from inside the EE, about a second a task, and the second host proved nothing more about the
EE; site.yml on an L40S is proven by the Molecule ``site`` scenario (site-l40s).

How the EE reaches the lab's hosts: they are podman containers on this machine (host network, each on its own
127.0.N.1) that the sim inventory reaches with the ``containers.podman.podman`` connection, i.e. ``podman exec``
on the controller. Inside the EE the controller is a container itself, so the test serves this machine's podman
API on a socket of its own (``podman system service``), mounts it into the EE, and the EE's podman client talks to
it (``--remote --url``). The EE shares the host network, so the repository server on 127.0.0.1:8765 that the inventory's
key lookup and the hosts use is the same one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpufleet_lab import reposerver
from gpufleet_lab.fleet import write_inventory
from gpufleet_lab.hosts import HostSpec, exec_in, start_hosts, stop_hosts

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SOCKET_IN_EE = "/run/gpufleet-podman.sock"
# on a loopback address no other test of the suite uses (it may run beside any of them: tests/suite_lanes.py)
HOSTS = {"4xA30": "127.0.225.1"}


def _ee_build() -> dict[str, object]:
    proc = subprocess.run([sys.executable, str(REPO / "ee" / "build.py")], capture_output=True, text=True,
                          check=False, timeout=1800, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


@pytest.fixture(scope="module")
def ee_image() -> str:
    return str(_ee_build()["image"])


@pytest.fixture(scope="module")
def message_queues() -> None:
    """ansible-runner starts the EE with ``--ipc=host``, which podman can only do where ``/dev/mqueue`` exists, and
    ansible-navigator refuses to start without it. A machine that is itself a container may lack it: mount it."""
    path = Path("/dev/mqueue")
    if not path.is_dir():
        path.mkdir()
        subprocess.run(["mount", "-t", "mqueue", "mqueue", str(path)], check=True, timeout=30)


@pytest.fixture(scope="module")
def podman_socket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This machine's podman API on a socket of this test's own, stopped afterwards."""
    socket = tmp_path_factory.mktemp("podman") / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not socket.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert socket.exists(), "podman system service did not create its socket within 30 s"
        yield socket
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=30)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[HostSpec]]]:
    """The simulated host and an inventory for it with the sim inventory's group_vars (copied, not linked:
    the EE sees only what is mounted into it)."""
    tag = uuid.uuid4().hex[:6]
    specs = [HostSpec(name=f"ee-{tag}-{i}", preset=preset, loopback=loopback, fleet=f"ee-{tag}")
             for i, (preset, loopback) in enumerate(HOSTS.items(), start=1)]
    work = tmp_path_factory.mktemp("ee-fleet")
    inventory = write_inventory(specs, work / "inventory")
    (inventory / "group_vars").unlink()
    shutil.copytree(REPO / "inventories" / "sim" / "group_vars", inventory / "group_vars")
    repo_pid = reposerver.start()
    try:
        start_hosts(specs)
        yield inventory, specs
    finally:
        stop_hosts([s.name for s in specs])
        reposerver.stop(repo_pid)


def test_site_converges_a_host_through_the_execution_environment(message_queues, ee_image, podman_socket, fleet,
                                                                   tmp_path):
    inventory, specs = fleet
    playbook = tmp_path / "site.yml"
    playbook.write_text(yaml.safe_dump([
        {"name": "The controller is the execution environment",
         "hosts": "localhost", "connection": "local", "gather_facts": False,
         "tasks": [{"name": "Read podman's marker file, which exists only inside a container",
                    "ansible.builtin.stat": {"path": "/run/.containerenv"}, "register": "marker"},
                   {"name": "Stop unless this play runs in a container",
                    "ansible.builtin.assert": {"that": ["marker.stat.exists"]}}]},
        {"name": "gpufleet.nvidia.site from the EE's collection",
         "ansible.builtin.import_playbook": "gpufleet.nvidia.site"},
    ], sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["HOME"] = str(tmp_path)
    argv = [
        str(BIN / "ansible-navigator"), "run", str(playbook), "-i", str(inventory),
        "--eei", ee_image, "--pull-policy", "never", "-m", "stdout", "--ce", "podman",
        "--pae", "false", "--lf", str(tmp_path / "navigator.log"),
        "--co=--user=0", "--co=--network=host",
        "--eev", f"{podman_socket}:{SOCKET_IN_EE}:Z",
        "--senv", "ANSIBLE_PIPELINING=True", "--senv", "ANSIBLE_NOCOLOR=1",
        # not CONTAINER_HOST: ansible-runner hands the EE's variables to podman through podman's own environment
        "-e", f"ansible_podman_extra_args='--remote --url unix://{SOCKET_IN_EE}'",
    ]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1500, cwd=tmp_path, env=env)
    took = time.monotonic() - start
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-8000:]
    recap = output[output.rindex("PLAY RECAP"):]
    for spec in specs:
        line = next(row for row in recap.splitlines() if row.startswith(spec.name))
        assert "unreachable=0" in line, line
        assert "failed=0" in line, line
    # the hosts are converged: the driver answers with the GPUs of the preset (NVIDIA's names for the models)
    assert exec_in(specs[0].name, ["nvidia-smi", "-L"]).count("NVIDIA A30") == 4
    print(f"site.yml through the EE, 1 host: {took:.0f} s")
