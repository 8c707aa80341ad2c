"""IMEX on GB200 NVL72 compute trays (issue 17): the nvidia_imex role against simulated trays whose IMEX daemons
really connect to each other over TCP on their lab addresses.

Four podman hosts (``4xGB200``) from the prepared ``plain-570`` baseline (simulated driver 570, no NVSwitch on the
tray): ``imex-a`` and ``imex-b`` form NVLink domain ``nvl72_a``, ``imex-d`` alone domain ``nvl72_b``, and ``imex-c``
joins ``nvl72_a`` in the last test. The domains are inventory groups named by ``nvidia_imex_domain_groups``. The
judge is ``nvidia-imex-ctl -N -j`` on the trays, systemd's InvocationID of ``nvidia-imex`` (a restart changes it) and
the role's own failure message when a tray is stopped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lab_play import results as all_results
from _lab_play import run_playbook

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts, wait_running
from gpufleet_lab.podman import containers_conf, podman, project_root

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

ROOT = project_root()
TRAYS = {"imex-a": "127.0.224.1", "imex-b": "127.0.225.1", "imex-c": "127.0.226.1", "imex-d": "127.0.227.1"}
PLAYBOOK = """\
- name: IMEX on the NVL72 compute trays
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.nvidia_imex
"""
SIM_PROC_DEVICES = "/usr/share/nvidia-sim/proc-devices"  # the simulated driver's /proc/devices lines
CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"


def _lab_hosts() -> Any:
    spec = importlib.util.spec_from_file_location("lab_hosts", ROOT / "molecule" / "_shared" / "lab_hosts.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inventory(domains: dict[str, list[str]], overrides: dict[str, str]) -> dict[str, Any]:
    """The lab inventory: one group per NVLink domain, each tray with its lab address as its IMEX address."""
    return {"all": {
        "vars": {**ANSIBLE_HOST_VARS, "nvidia_imex_domain_groups": sorted(domains),
                 "nvidia_imex_proc_devices": SIM_PROC_DEVICES, "nvidia_imex_verify_timeout": 60},
        "children": {group: {"hosts": {host: {"nvidia_imex_address": overrides.get(host, TRAYS[host])}
                                       for host in hosts}}
                     for group, hosts in domains.items()}}}


class Lab:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.playbook = work / "imex.yml"
        self.playbook.write_text(PLAYBOOK, encoding="utf-8")

    def play(self, domains: dict[str, list[str]], *extra: str, check: bool = False, limit: str | None = None,
             addresses: dict[str, str] | None = None) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
        hosts = self.work / "hosts.yml"
        hosts.write_text(json.dumps(inventory(domains, addresses or {})), encoding="utf-8")
        tags = [item.split("=", 1)[1] for item in extra if item.startswith("--tags=")]
        extra = tuple(item for item in extra if not item.startswith("--tags="))
        os.environ.pop("ANSIBLE_RUN_TAGS", None)
        if tags:
            os.environ["ANSIBLE_RUN_TAGS"] = ",".join(tags)
        try:
            rc, doc = run_playbook(hosts, self.playbook, extra, work=self.work, check=check, limit=limit)
        finally:
            os.environ.pop("ANSIBLE_RUN_TAGS", None)
        return rc, all_results(doc), doc


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The repository server and the four trays, shared by the tests of this file; removed afterwards."""
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    work = tmp_path_factory.mktemp("imex")
    server_pid = reposerver.start()
    try:
        image = _lab_hosts().ensure_baselines({"plain-570"})["plain-570"]
        start = time.monotonic()
        start_hosts([HostSpec(name, "4xGB200", address) for name, address in TRAYS.items()], image=image)
        print(f"4 trays up in {time.monotonic() - start:.0f} s")
        yield Lab(work)
    finally:
        stop_hosts(list(TRAYS))
        reposerver.stop(server_pid)
        shutil.rmtree(work, ignore_errors=True)


def domain_view(host: str) -> tuple[str, list[tuple[str, str]]]:
    """``nvidia-imex-ctl -N -j`` on ``host``: the domain state and (address, status) per node."""
    doc = json.loads(exec_in(host, ["nvidia-imex-ctl", "-N", "-j"]))
    return doc["status"], [(node["host"], node["status"]) for node in doc["nodes"].values()]


def invocation(host: str) -> str:
    out = exec_in(host, ["systemctl", "show", "-p", "InvocationID", "--value", "nvidia-imex"]).strip()
    assert out, f"nvidia-imex has no InvocationID on {host}"
    return out


def changed(results: list[dict[str, Any]]) -> int:
    return sum(1 for r in results if r.get("changed"))


def failed(results: list[dict[str, Any]]) -> list[str]:
    """The failed tasks' messages (a loop's: each failed item's)."""
    return [str(item.get("msg", "")) for r in results if r.get("failed")
            for item in ([i for i in r["results"] if i.get("failed")] if r.get("results") else [r])]


TWO = {"nvl72_a": ["imex-a", "imex-b"], "nvl72_b": ["imex-d"]}
A, B, C, D = (TRAYS[h] for h in ("imex-a", "imex-b", "imex-c", "imex-d"))


def test_two_trays_form_one_domain_from_the_inventory_group(lab: Lab) -> None:
    rc, results, _ = lab.play(TWO)
    assert (rc, failed(results)) == (0, [])
    for host in ("imex-a", "imex-b"):
        assert domain_view(host) == ("UP", [(A, "READY"), (B, "READY")])
        assert exec_in(host, ["cat", "/etc/nvidia-imex/nodes_config.cfg"]) == f"{A}\n{B}\n"
        assert exec_in(host, ["stat", "-c", "%F", CHANNEL]).strip() == "character special file"
    assert domain_view("imex-d") == ("UP", [(D, "READY")])
    config = exec_in("imex-a", ["grep", "-E", "^(BIND_INTERFACE_IP|SERVER_PORT|IMEX_CMD_PORT)=",
                                "/etc/nvidia-imex/config.cfg"])
    assert config == f"BIND_INTERFACE_IP={A}\nSERVER_PORT=50000\nIMEX_CMD_PORT=50005\n"
    assert exec_in("imex-a", ["dpkg-query", "-W", "-f", "${Version}", "nvidia-imex-570"]) == "570.172.08-1"

    rc, results, _ = lab.play(TWO)
    assert (rc, changed(results)) == (0, 0)
    rc, results, _ = lab.play(TWO, check=True)
    assert (rc, changed(results)) == (0, 0)


def test_an_address_that_is_no_ip_is_refused_before_any_change(lab: Lab) -> None:
    before = exec_in("imex-d", ["cat", "/etc/nvidia-imex/nodes_config.cfg"])
    rc, results, _ = lab.play(TWO, limit="imex-d", addresses={"imex-d": "tray-d\nrm -rf /"})
    assert rc == 2
    assert failed(results) == [
        'nvidia_imex: every node of NVLink domain nvl72_b needs its own IP address (nodes_config.cfg lists one per '
        'line), but imex-d has "tray-d\nrm -rf /". Set nvidia_imex_address (or an IP address as ansible_host) for '
        'each member in the inventory. Nothing was changed.']
    assert exec_in("imex-d", ["cat", "/etc/nvidia-imex/nodes_config.cfg"]) == before


def test_a_stopped_tray_is_named_and_comes_back_after_its_reboot(lab: Lab) -> None:
    boot_unit = exec_in("imex-b", ["systemctl", "show", "-p", "InvocationID", "--value", "nvidia-imex-channels"])
    podman(["stop", "--time", "5", "imex-b"])
    rc, results, _ = lab.play(TWO, "nvidia_imex_verify_timeout=6", "--tags=nvidia_imex_verify", limit="imex-a")
    assert rc == 2
    assert failed(results) == [
        f"nvidia_imex: NVLink domain nvl72_a is not ready on imex-a after 6 s: imex-b ({B}) is UNAVAILABLE. Check "
        "that nvidia-imex runs there and that it reaches this node on port 50000."]

    podman(["start", "imex-b"])  # the tray boots again: /dev is new, the boot unit makes the channel device again
    wait_running("imex-b")
    assert exec_in("imex-b", ["stat", "-c", "%F", CHANNEL]).strip() == "character special file"
    assert exec_in("imex-b", ["systemctl", "show", "-p", "InvocationID", "--value",
                              "nvidia-imex-channels"]) != boot_unit
    rc, results, _ = lab.play(TWO, "--tags=nvidia_imex_verify", limit="imex-a,imex-b")
    assert (rc, failed(results)) == (0, [])
    assert domain_view("imex-a") == ("UP", [(A, "READY"), (B, "READY")])


def test_a_third_tray_restarts_its_domain_only(lab: Lab) -> None:
    before = {host: invocation(host) for host in ("imex-a", "imex-b", "imex-d")}
    three = {"nvl72_a": ["imex-a", "imex-b", "imex-c"], "nvl72_b": ["imex-d"]}
    rc, results, _ = lab.play(three)
    assert (rc, failed(results)) == (0, [])
    after = {host: invocation(host) for host in ("imex-a", "imex-b", "imex-d")}
    assert after["imex-d"] == before["imex-d"]  # the other domain's IMEX did not restart
    assert after["imex-a"] != before["imex-a"]
    assert after["imex-b"] != before["imex-b"]
    for host in ("imex-a", "imex-b", "imex-c"):
        assert domain_view(host) == ("UP", [(A, "READY"), (B, "READY"), (C, "READY")])
    assert domain_view("imex-d") == ("UP", [(D, "READY")])
