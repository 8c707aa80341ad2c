"""Issue 30 on a real systemd host: the gpu_rdma role, Debian's real ibstat, and gpu_health's RDMA verdicts.

One 8xH100-NVSwitch lab host (``rdma-h100`` on 127.0.226.1, no other test uses it) from the prepared
``nvswitch-570`` baseline (driver 570 and the NVML bindings already installed; molecule/_shared/lab_hosts.py). The
preset gives it 8 ConnectX-7 NDR ports, one per GPU on the GPU's PCIe switch, which the host sees at
/sys/class/infiniband as the kernel writes them (gpufleet_sim.infiniband, mounted by gpufleet_lab.hosts). Faults
are the simulator's, injected in the host by the driver packages' own ``nvidia_sim.infiniband`` (the hardware),
which rewrites the files the host reads; each case clears its fault.

1. the role converges, a second run and a check-mode run change nothing;
2. real ``ibstat`` (infiniband-diags, from the image) prints the ports Active / LinkUp at rate 400;
3. gpu_health passes the healthy node (every RDMA check present and ok);
4. each fault fails it with a message naming the port or the module and the reading: port down (CRITICAL; ibstat
   says Down too), rate degraded to 100 Gb/s (WARNING), a counter rising while the checks read it (WARNING),
   nvidia_peermem not loaded (CRITICAL).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lab_play import results, run_playbook

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, start_hosts, stop_hosts
from gpufleet_lab.loader import lab_hosts
from gpufleet_lab.podman import containers_conf

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

HOST = "rdma-h100"
LOOPBACK = "127.0.226.1"
ROLE = "- hosts: all\n  gather_facts: false\n  roles: [gpufleet.nvidia.gpu_rdma]\n"
HEALTH = ("- hosts: all\n  gather_facts: false\n  vars:\n    gpu_health_fail_on: never\n"
          "    gpu_health_thresholds: {rdma_expected: true}\n"
          "  roles: [gpufleet.nvidia.gpu_health]\n")
RDMA_CHECKS = {"rdma_peermem", "rdma_port_state", "rdma_port_rate", "rdma_port_errors", "rdma_gpu_nic_distance"}
SIM = "import sys; sys.path.insert(0, '/usr/lib/nvidia-sim/python'); from nvidia_sim import infiniband; "


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The host from the prepared baseline image, the two playbooks and an inventory; the host removed afterwards."""
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    work = tmp_path_factory.mktemp("rdma-lab")
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {HOST: {**ANSIBLE_HOST_VARS}}}}), encoding="utf-8")
    (work / "role.yml").write_text(ROLE, encoding="utf-8")
    (work / "health.yml").write_text(HEALTH, encoding="utf-8")
    server_pid = reposerver.start()  # a missing baseline image is built from the simulated repository
    try:
        image = lab_hosts().ensure_baselines({"nvswitch-570"})["nvswitch-570"]
        start_hosts([HostSpec(HOST, "8xH100-NVSwitch", LOOPBACK, rdma=True)], image=image)
        yield {"work": work, "inventory": inventory}
    finally:
        stop_hosts([HOST])
        reposerver.stop(server_pid)


def _changed(doc: dict[str, Any]) -> list[str]:
    return [task["task"]["name"] for play in doc["plays"] for task in play["tasks"]
            if any(r.get("changed") for r in task["hosts"].values())]


def hardware(call: str) -> str:
    """Run ``infiniband.<call>`` of the simulator installed in the host (the driver packages' copy)."""
    return exec_in(HOST, ["/usr/bin/python3", "-c", SIM + f"print(infiniband.{call})"])


def health(lab: dict[str, Path]) -> dict[str, Any]:
    """gpu_health's report of the host (the role run with fail_on never: the report is what is judged)."""
    rc, doc = run_playbook(lab["inventory"], lab["work"] / "health.yml", work=lab["work"])
    assert rc == 0, [r.get("msg") for r in results(doc) if r.get("failed")]
    [report] = [r["health"] for r in results(doc) if "health" in r]
    return dict(report)


def not_ok(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["name"], c["level"], c["message"]) for c in report["checks"]
            if c["name"] in RDMA_CHECKS and c["status"] != "ok"]


def test_role_converges_then_changes_nothing(lab: dict[str, Path]) -> None:
    rc, first = run_playbook(lab["inventory"], lab["work"] / "role.yml", work=lab["work"])
    assert rc == 0, [r.get("msg") for r in results(first) if r.get("failed")]
    assert _changed(first) == ["gpufleet.nvidia.gpu_rdma : Load nvidia_peermem at every boot"]
    assert exec_in(HOST, ["cat", "/etc/modules-load.d/nvidia-peermem.conf"]).splitlines()[-1] == "nvidia_peermem"
    for check in (False, True):
        rc, again = run_playbook(lab["inventory"], lab["work"] / "role.yml", work=lab["work"], check=check)
        assert (rc, _changed(again)) == (0, [])
    skipped = [r.get("msg", "") for r in results(first) if "is a container; not loading nvidia_peermem" in
               str(r.get("msg", ""))]
    assert len(skipped) == 1


def test_real_ibstat_reads_the_simulated_ports(lab: dict[str, Path]) -> None:
    listed = exec_in(HOST, ["ibstat", "-l"]).split()
    assert listed == [f"mlx5_{i}" for i in range(8)]
    for hca in listed:
        out = exec_in(HOST, ["ibstat", hca])
        assert "\t\tState: Active\n" in out
        assert "\t\tPhysical state: LinkUp\n" in out
        assert "\t\tRate: 400\n" in out
        assert "\t\tLink layer: InfiniBand\n" in out
    assert "rate:\t\t 400 Gb/sec (4X NDR)" in exec_in(HOST, ["ibstatus", "mlx5_7"])


def test_healthy_node_passes(lab: dict[str, Path]) -> None:
    report = health(lab)
    names = {c["name"] for c in report["checks"]}
    assert names >= RDMA_CHECKS
    assert not_ok(report) == []
    distance = [c for c in report["checks"] if c["name"] == "rdma_gpu_nic_distance"]
    assert [(c["gpu"]["index"], c["value"]) for c in distance] == [(i, "PIX") for i in range(8)]
    assert report["status"] == "ok", report["failed"]


def test_port_down_fails_naming_the_port(lab: dict[str, Path]) -> None:
    hardware("inject('ib-port-down', {'hca': 'mlx5_2'})")
    try:
        assert "\t\tState: Down\n\t\tPhysical state: Polling\n" in exec_in(HOST, ["ibstat", "mlx5_2"])
        report = health(lab)
    finally:
        hardware("clear()")
    assert not_ok(report) == [("rdma_port_state", "CRITICAL", "mlx5_2 port 1 is DOWN (physical state Polling); "
                               "expected ACTIVE / LinkUp: check the cable, the switch port and the subnet manager")]
    assert report["status"] == "fail"


def test_rate_degraded_warns_with_the_rate(lab: dict[str, Path]) -> None:
    hardware("inject('ib-rate-degraded', {'hca': 'mlx5_5', 'width': 1})")
    try:
        assert "\t\tRate: 100\n" in exec_in(HOST, ["ibstat", "mlx5_5"])
        report = health(lab)
    finally:
        hardware("clear()")
    assert not_ok(report) == [("rdma_port_rate", "WARNING", "mlx5_5 port 1 runs at 100 Gb/sec (1X NDR), below the "
                               "expected 400 Gb/s (the fastest port of the host): a degraded link (lanes or speed); "
                               "reseat or replace the cable or transceiver")]
    assert report["status"] == "warn"


def test_counter_rising_warns_with_the_counts(lab: dict[str, Path]) -> None:
    hardware("inject('ib-counter', {'hca': 'mlx5_1', 'counter': 'symbol_error', 'per_second': 5})")
    # the hardware counts while the checks read: a loop in the host ticks the counter every half second
    ticker = subprocess.Popen(["podman", "exec", HOST, "/usr/bin/python3", "-c", SIM + "infiniband.rising_loop(60)"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        report = health(lab)
    finally:
        ticker.terminate()
        ticker.wait(timeout=30)
        hardware("clear()")
    [(name, level, message)] = not_ok(report)
    assert (name, level) == ("rdma_port_errors", "WARNING")
    assert message.startswith("mlx5_1 port 1 error counters rose in 2 s: symbol_error ")
    before, after = (int(n) for n in message.rsplit(" ", 3)[-3::2])
    assert after > before >= 1


def test_peermem_unloaded_fails(lab: dict[str, Path]) -> None:
    hardware("inject('peermem-unloaded', {})")
    try:
        assert exec_in(HOST, ["ls", "/sys/module/nvidia_peermem"]).strip() == ""
        report = health(lab)
    finally:
        hardware("clear()")
    assert not_ok(report) == [("rdma_peermem", "CRITICAL", "nvidia_peermem is not loaded "
                               "(/sys/module/nvidia_peermem/initstate not live) on a host with 8 HCA(s): GPUDirect "
                               "RDMA cannot work; modprobe nvidia_peermem (the gpu_rdma role loads and persists it)")]
    assert exec_in(HOST, ["cat", "/sys/module/nvidia_peermem/initstate"]) == "live\n"
