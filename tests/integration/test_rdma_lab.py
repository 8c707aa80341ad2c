"""Issue 30 on a real systemd host: the gpu_rdma role, Debian's real ibstat, and `gpufleet verify`'s RDMA verdicts.

One 8xH100-NVSwitch lab host (``rdma-h100`` on 127.0.226.1, no other test uses it) from the prepared
``nvswitch-570`` baseline (driver 570 and the NVML bindings already installed; molecule/_shared/lab_hosts.py). The
preset gives it 8 ConnectX-7 NDR ports, one per GPU on the GPU's PCIe switch, which the host sees at
/sys/class/infiniband as the kernel writes them (gpufleet_sim.infiniband, mounted by gpufleet_lab.hosts). Faults
are the simulator's, injected in the host by the driver packages' own ``nvidia_sim.infiniband`` (the hardware),
which rewrites the files the host reads; each case clears its fault.

1. the role converges, a second run and a check-mode run change nothing;
2. real ``ibstat`` (infiniband-diags, from the image) prints the ports Active / LinkUp at rate 400;
3. ``gpufleet verify`` (the operator's command; the inventory declares ``rdma_expected`` as an RDMA node's would)
   passes the healthy node, every RDMA check present and ok, exit 0;
4. each fault fails it with a message naming the port or the module and the reading, and verify's exit code says
   the level: port down (CRITICAL, 2; ibstat says Down too; ``gpufleet report`` draws the port red on the host's
   network row beside its GPUs), rate degraded to 100 Gb/s (WARNING, 1), a counter rising while the checks read
   it (WARNING), nvidia_peermem not loaded (CRITICAL), a NIC in a slot of the other socket (WARNING on its GPU: the
   lab redraws the host's PCI tree from the state the fault changed);
5. ACS redirect on the switch of GPU 3 and mlx5_3 (as a kernel with the IOMMU on leaves it): real ``lspci`` shows
   ``ReqRedir+``, verify warns naming the bridges; the role with ``gpu_rdma_acs_redirect: disabled`` shows the change
   in check and diff mode without making it, then clears the bits with the real ``setpci`` (lspci: ``ReqRedir-``,
   Source Validation kept), installs the boot unit, changes nothing the second time, and verify passes; back to
   ``keep``, the unit goes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lab_play import ROOT, gpufleet_json, results, run_playbook

from gpufleet_lab import reposerver
from gpufleet_lab.hosts import ANSIBLE_HOST_VARS, HostSpec, exec_in, refresh_pci_tree, start_hosts, stop_hosts
from gpufleet_lab.loader import lab_hosts
from gpufleet_lab.podman import containers_conf
from gpufleet_sim.presets import build_state

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

HOST = "rdma-h100"
LOOPBACK = "127.0.226.1"
ROLE = "- hosts: all\n  gather_facts: false\n  roles: [gpufleet.nvidia.gpu_rdma]\n"
#: what `gpufleet verify` exits with per worst level (docs/health.md: PASS/INFO 0, WARNING 1, UNKNOWN/CRITICAL 2)
EXIT = {"PASS": 0, "WARNING": 1, "CRITICAL": 2}
RDMA_CHECKS = {"rdma_peermem", "rdma_port_state", "rdma_port_link_layer", "rdma_port_rate", "rdma_port_errors",
               "rdma_gpu_nic_distance", "rdma_acs"}
SIM = "import sys; sys.path.insert(0, '/usr/lib/nvidia-sim/python'); from nvidia_sim import infiniband; "


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The host from the prepared baseline image, the two playbooks and an inventory; the host removed afterwards."""
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    work = tmp_path_factory.mktemp("rdma-lab")
    inventory = work / "hosts.yml"
    # an InfiniBand RDMA node's inventory
    host = {**ANSIBLE_HOST_VARS, "gpu_health_thresholds": {"rdma_expected": True,
                                                           "rdma_expected_link_layer": "InfiniBand"}}
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {HOST: host}}}}}), encoding="utf-8")
    (work / "role.yml").write_text(ROLE, encoding="utf-8")
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


def verify(lab: dict[str, Path]) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """``gpufleet verify -i INVENTORY --json``: its exit code, the host's health report and the whole result."""
    rc, doc, _err = gpufleet_json(["verify", "-i", str(lab["inventory"]), "--json"],
                                  env={"XDG_CACHE_HOME": str(lab["work"] / "cache")})
    return rc, dict(doc["hosts"][HOST]["module_data"]["health"]["health"]), doc


def report_text(lab: dict[str, Path], doc: dict[str, Any]) -> tuple[list[str], str]:
    """``gpufleet report`` of a saved verify result: the terminal's lines and the HTML page."""
    saved, page = lab["work"] / "verify.json", lab["work"] / "fleet.html"
    saved.write_text(json.dumps(doc), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "gpufleet.cli", "report", str(saved), "--html", str(page)],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), capture_output=True,
                          text=True, check=False, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stdout
    return proc.stdout.splitlines(), page.read_text(encoding="utf-8")


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


def test_a_vendor_rdma_stack_is_left_alone(lab: dict[str, Path]) -> None:
    """MLNX_OFED or DOCA-OFED installed (its ofed_info): the role installs nothing and says so; peermem still done."""
    exec_in(HOST, ["sh", "-c", "printf '#!/bin/sh\\necho MLNX_OFED_LINUX-24.10-1.1.4.0:\\n' > /usr/bin/ofed_info; "
                               "chmod 0755 /usr/bin/ofed_info"])
    try:
        rc, doc = run_playbook(lab["inventory"], lab["work"] / "role.yml", work=lab["work"])
    finally:
        exec_in(HOST, ["rm", "-f", "/usr/bin/ofed_info"])
    assert (rc, _changed(doc)) == (0, [])
    by_task = {task["task"]["name"]: task["hosts"][HOST] for play in doc["plays"] for task in play["tasks"]}
    assert by_task["gpufleet.nvidia.gpu_rdma : Install the distribution's RDMA packages"].get("skipped") is True
    assert "so MLNX_OFED or DOCA-OFED owns the RDMA stack on rdma-h100; installing nothing" in \
        by_task["gpufleet.nvidia.gpu_rdma : Leave the vendor's RDMA stack alone"]["msg"]


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
    rc, report, _doc = verify(lab)
    names = {c["name"] for c in report["checks"]}
    assert names >= RDMA_CHECKS
    assert not_ok(report) == []
    distance = [c for c in report["checks"] if c["name"] == "rdma_gpu_nic_distance"]
    assert [(c["gpu"]["index"], c["value"]) for c in distance] == [(i, "PIX") for i in range(8)]
    assert (rc, report["status"]) == (EXIT["PASS"], "ok"), report["failed"]
    assert [(p["hca"], p["state"], p["rate"], p["level"]) for p in report["network"]["ports"]] == [
        (f"mlx5_{i}", "ACTIVE", "400 Gb/sec (4X NDR)", "PASS") for i in range(8)]


def test_port_down_fails_naming_the_port(lab: dict[str, Path]) -> None:
    hardware("inject('ib-port-down', {'hca': 'mlx5_2'})")
    try:
        assert "\t\tState: Down\n\t\tPhysical state: Polling\n" in exec_in(HOST, ["ibstat", "mlx5_2"])
        rc, report, doc = verify(lab)
    finally:
        hardware("clear()")
    message = ("mlx5_2 port 1 is DOWN (physical state Polling); expected ACTIVE / LinkUp: check the cable, the switch "
               "port and the subnet manager")
    assert not_ok(report) == [("rdma_port_state", "CRITICAL", message)]
    assert (rc, report["status"]) == (EXIT["CRITICAL"], "fail")
    # the fleet report: the port red on the host's network row, under the row of its (healthy) GPUs, and the
    # finding listed under the port's name
    lines, page = report_text(lab, doc)
    row = lines.index(f"{HOST}  CRITICAL  drain   " + " ".join(f"{i}■" for i in range(8)))
    assert lines[row + 1] == ("  network CRITICAL " + " ".join(f"mlx5_{i}■" for i in range(8))
                              + "  nvidia_peermem loaded")
    assert f"  mlx5_2 port 1 CRITICAL rdma_port_state [action: drain]: {message}" in lines
    assert page.count('class="port"') == 8
    assert 'data-hca="mlx5_2" data-port="1" data-level="CRITICAL" data-state="DOWN"' in page
    assert 'data-hca="mlx5_3" data-port="1" data-level="PASS" data-state="ACTIVE"' in page


@pytest.mark.parametrize(("fault", "ibstat", "finding"), [
    ("ib-rate-degraded', {'hca': 'mlx5_5', 'width': 1}", ("mlx5_5", "\t\tRate: 100\n"),
     ("rdma_port_rate", "WARNING", "mlx5_5 port 1 runs at 100 Gb/sec (1X NDR), below the expected 400 Gb/s (the "
      "fastest port of the host): a degraded link (lanes or speed); reseat or replace the cable or transceiver")),
    ("ib-link-layer', {'hca': 'mlx5_6'}", ("mlx5_6", "\t\tLink layer: Ethernet\n"),
     ("rdma_port_link_layer", "WARNING", "mlx5_6 port 1 runs Ethernet, expected InfiniBand (rdma_expected_link_layer): "
      "a VPI port set to the other protocol (mlxconfig LINK_TYPE_P<n>) cannot join this fabric")),
], ids=["rate-degraded", "link-layer"])
def test_a_degraded_port_warns_with_the_reading(lab: dict[str, Path], fault: str, ibstat: tuple[str, str],
                                                finding: tuple[str, str, str]) -> None:
    """A port that trained slower, or runs the other link layer: ibstat shows it, verify warns (exit 1)."""
    hardware(f"inject('{fault})")
    try:
        assert ibstat[1] in exec_in(HOST, ["ibstat", ibstat[0]])
        rc, report, _doc = verify(lab)
    finally:
        hardware("clear()")
    assert not_ok(report) == [finding]
    assert (rc, report["status"]) == (EXIT["WARNING"], "warn")


def test_counter_rising_warns_with_the_counts(lab: dict[str, Path]) -> None:
    hardware("inject('ib-counter', {'hca': 'mlx5_1', 'counter': 'symbol_error', 'per_second': 5})")
    # the hardware counts while the checks read: a loop in the host ticks the counter every half second
    ticker = subprocess.Popen(["podman", "exec", HOST, "/usr/bin/python3", "-c", SIM + "infiniband.rising_loop(60)"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        rc, report, _doc = verify(lab)
    finally:
        ticker.terminate()
        ticker.wait(timeout=30)
        hardware("clear()")
    [(name, level, message)] = not_ok(report)
    assert (name, level) == ("rdma_port_errors", "WARNING")
    assert message.startswith("mlx5_1 port 1 error counters rose in 2 s: symbol_error ")
    before, after = (int(n) for n in message.rsplit(" ", 3)[-3::2])
    assert after > before >= 1
    assert rc == EXIT["WARNING"]


def test_peermem_unloaded_fails(lab: dict[str, Path]) -> None:
    hardware("inject('peermem-unloaded', {})")
    try:
        assert exec_in(HOST, ["ls", "/sys/module/nvidia_peermem"]).strip() == ""
        rc, report, _doc = verify(lab)
    finally:
        hardware("clear()")
    assert not_ok(report) == [("rdma_peermem", "CRITICAL", "nvidia_peermem is not loaded "
                               "(/sys/module/nvidia_peermem/initstate not live) on a host with 8 HCA(s): GPUDirect "
                               "RDMA cannot work; modprobe nvidia_peermem (the gpu_rdma role loads and persists it)")]
    assert (rc, report["network"]["nvidia_peermem_loaded"]) == (EXIT["CRITICAL"], False)
    assert exec_in(HOST, ["cat", "/sys/module/nvidia_peermem/initstate"]) == "live\n"


def test_nic_on_the_other_socket_warns_naming_the_gpu(lab: dict[str, Path]) -> None:
    hardware("inject('nic-wrong-socket', {'hca': 'mlx5_3'})")
    try:
        refresh_pci_tree(HOST)
        rc, report, _doc = verify(lab)
    finally:
        hardware("clear()")
        refresh_pci_tree(HOST)
    bus = "0000:" + build_state("8xH100-NVSwitch", HOST)["gpus"][3]["pci"]["bus_id"].split(":", 1)[1].lower()
    assert not_ok(report) == [("rdma_gpu_nic_distance", "WARNING", f"GPU 3 ({bus}): nearest NIC mlx5_0 is at NODE, "
                               "farther than PXB: GPUDirect RDMA crosses the host bridge; check the slot or NCCL's NIC "
                               "map")]
    assert rc == EXIT["WARNING"]
    assert exec_in(HOST, ["cat", f"/sys/bus/pci/devices/{bus}/numa_node"]) == "0\n"


def _acsctl(bridge: str) -> str:
    """The ACSCtl line real ``lspci -vvv`` prints for ``bridge`` in the host (pciutils reading the simulated space)."""
    [line] = [ln.strip() for ln in exec_in(HOST, ["lspci", "-vvv", "-s", bridge]).splitlines() if "ACSCtl:" in ln]
    return line


def test_acs_redirect_warns_then_the_role_clears_it_now_and_at_boot(lab: dict[str, Path]) -> None:
    switch = build_state("8xH100-NVSwitch", HOST)["rdma"]["switches"][3]
    down = [f"0000:{switch['downstream_bus']:02x}:0{slot}.0" for slot in (0, 1)]
    on = "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
    off = "ACSCtl:\tSrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd+ EgressCtrl- DirectTrans-"
    role = [f"gpu_rdma_acs_redirect={mode}" for mode in ("disabled", "keep")]
    hardware("inject('acs-enabled', {'hca': 'mlx5_3'})")
    try:
        refresh_pci_tree(HOST)
        assert [_acsctl(b) for b in down] == [on, on]
        rc, report, _doc = verify(lab)
        [(name, level, message)] = not_ok(report)
        assert (rc, name, level) == (EXIT["WARNING"], "rdma_acs", "WARNING")
        assert message.startswith("GPU 3 (")
        assert f"to mlx5_3 through the root complex ({down[0]} ACSCtl SrcValid+ TransBlk- ReqRedir+" in message
        # check and diff: the plan, nothing written
        rc, planned = run_playbook(lab["inventory"], lab["work"] / "role.yml", [role[0]], work=lab["work"],
                                   check=True)
        assert rc == 0, [r.get("msg") for r in results(planned) if r.get("failed")]
        [acs] = [r for r in results(planned) if "cleared" in r]
        assert (acs["changed"], acs["cleared"]) == (True, {down[0]: "0x001d", down[1]: "0x001d"})
        assert [_acsctl(b) for b in down] == [on, on]
        # for real: setpci clears the redirect bits and nothing else; the boot unit names every ACS bridge
        rc, first = run_playbook(lab["inventory"], lab["work"] / "role.yml", [role[0]], work=lab["work"])
        assert rc == 0, [r.get("msg") for r in results(first) if r.get("failed")]
        assert _changed(first) == ["gpufleet.nvidia.gpu_rdma : Clear ACS redirect between each GPU and its nearest NIC",
                                   "gpufleet.nvidia.gpu_rdma : Clear ACS redirect again at every boot",
                                   "gpufleet.nvidia.gpu_rdma : Enable the ACS boot unit"]
        assert [_acsctl(b) for b in down] == [off, off]
        unit = exec_in(HOST, ["cat", "/etc/systemd/system/gpufleet-acs-redirect-off.service"])
        assert f"ExecStart=/usr/bin/setpci -s {down[1]} ECAP_ACS+6.w=0000:002c\n" in unit
        # the two downstream ports of each GPU's switch (the upstream port they share offers no ACS)
        assert unit.count("ExecStart=/usr/bin/setpci -s ") == 8 * 2
        rc, again = run_playbook(lab["inventory"], lab["work"] / "role.yml", [role[0]], work=lab["work"])
        assert (rc, _changed(again)) == (0, [])
        rc, report, _doc = verify(lab)
        assert (rc, not_ok(report)) == (EXIT["PASS"], [])
    finally:
        rc, kept = run_playbook(lab["inventory"], lab["work"] / "role.yml", [role[1]], work=lab["work"])
        hardware("clear()")
        refresh_pci_tree(HOST)
    assert _changed(kept) == ["gpufleet.nvidia.gpu_rdma : Disable the ACS boot unit",
                              "gpufleet.nvidia.gpu_rdma : Remove the ACS boot unit (the kernel sets ACS again at the "
                              "next boot)"]
    assert exec_in(HOST, ["ls", "/etc/systemd/system/"]).count("gpufleet-acs") == 0
