"""GPUDirect RDMA health checks (plugins/module_utils/rdma_health.py) over the simulated HGX node's sysfs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.gpufleet.nvidia.plugins.module_utils import rdma, rdma_health

from gpufleet_lab.pcitree import write_pci_tree
from gpufleet_sim import infiniband
from gpufleet_sim.presets import build_state

TH = {"rdma_expected": True, "rdma_expected_rate_gbps": None, "rdma_counter_interval_s": 2,
      "rdma_nic_max_level": "PXB", "rdma_pairing_expected": None}


class Node:
    """A simulated node's sysfs in a folder; ``change`` runs between the two reads (the interval)."""

    def __init__(self, tmp: Path, preset: str = "8xH100-NVSwitch") -> None:
        self.tmp, self.doc = tmp, build_state(preset, "rdma-h100")
        write_pci_tree(self.doc, tmp / "pci")
        self.render()
        self.gpus = [{"index": g["index"], "uuid": g["uuid"], "pci_bus_id": g["pci"]["bus_id"]}
                     for g in self.doc["gpus"]]

    def render(self) -> None:
        if self.doc.get("rdma"):
            infiniband.render(self.doc, self.tmp / "kernel", pci_root=str(self.tmp / "pci"))

    def read(self) -> dict[str, Any]:
        return rdma.rdma_facts(str(self.tmp / "kernel/infiniband"), str(self.tmp / "pci"),
                               str(self.tmp / "kernel/module"))

    def checks(self, th: dict[str, Any] | None = None, change: Any = None) -> list[dict[str, Any]]:
        def sleep(_s: float) -> None:
            if change:
                change(self.doc)
                self.render()
        th = {**TH, **(th or {})}
        return rdma_health.evaluate(rdma_health.measure(th, self.read, sleep), th, self.gpus)


def _bad(checks: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(c["name"], c["level"], c["message"]) for c in checks if c["status"] != "ok"]


def test_healthy_node_passes_every_rdma_check(tmp_path: Path) -> None:
    checks = Node(tmp_path).checks({"rdma_expected_link_layer": "InfiniBand"})
    assert _bad(checks) == []
    assert {c["name"] for c in checks} == set(rdma_health.NAMES)
    assert len([c for c in checks if c["name"] == "rdma_gpu_nic_distance"]) == 8
    assert [c["gpu"]["index"] for c in checks if c["gpu"]] == list(range(8)) * 2  # distance, then ACS


def test_host_without_hca_and_rdma_not_expected_gets_no_check(tmp_path: Path) -> None:
    assert Node(tmp_path, "8xA100").checks({"rdma_expected": None}) == []


def test_hcas_without_rdma_declared_never_make_a_healthy_node_critical(tmp_path: Path) -> None:
    """A ConnectX used for Ethernet only, or a spare port left unplugged, is a healthy node: without
    rdma_expected, what would be CRITICAL is a WARNING that says how to make it count."""
    node = Node(tmp_path)
    infiniband.inject_in(node.doc, "ib-port-down", {"hca": "mlx5_2"})
    infiniband.inject_in(node.doc, "peermem-unloaded", {})
    node.render()
    bad = _bad(node.checks({"rdma_expected": None}))
    assert [(name, level) for name, level, _ in bad] == [("rdma_peermem", "WARNING"), ("rdma_port_state", "WARNING")]
    assert all(msg.endswith("(a WARNING: RDMA is not declared for this host; set gpu_health_thresholds' "
                            "rdma_expected true to make it CRITICAL)") for _, _, msg in bad)
    assert [(n, lv) for n, lv, _ in _bad(node.checks())] == [("rdma_peermem", "CRITICAL"),
                                                             ("rdma_port_state", "CRITICAL")]


def test_host_without_hca_where_rdma_is_expected_fails(tmp_path: Path) -> None:
    bad = _bad(Node(tmp_path, "8xA100").checks({"rdma_expected": True}))
    assert bad[0] == ("rdma_peermem", "UNKNOWN", "cannot tell whether nvidia_peermem is loaded (no /sys/module); "
                      "cannot check GPUDirect RDMA")
    assert bad[1][:2] == ("rdma_port_state", "CRITICAL")


@pytest.mark.parametrize(("fault", "args", "expected"), [
    ("ib-port-down", {"hca": "mlx5_2"},
     [("rdma_port_state", "CRITICAL", "mlx5_2 port 1 is DOWN (physical state Polling); expected ACTIVE / LinkUp: "
       "check the cable, the switch port and the subnet manager")]),
    ("ib-rate-degraded", {"hca": "mlx5_5", "width": 1},
     [("rdma_port_rate", "WARNING", "mlx5_5 port 1 runs at 100 Gb/sec (1X NDR), below the expected 400 Gb/s (the "
       "fastest port of the host): a degraded link (lanes or speed); reseat or replace the cable or transceiver")]),
    ("peermem-unloaded", {},
     [("rdma_peermem", "CRITICAL", "nvidia_peermem is not loaded (/sys/module/nvidia_peermem/initstate not live) "
       "on a host with 8 HCA(s): GPUDirect RDMA cannot work; modprobe nvidia_peermem (the gpu_rdma role loads and "
       "persists it)")]),
])
def test_a_fault_fails_naming_the_port_and_reading(tmp_path: Path, fault: str, args: dict[str, Any],
                                                   expected: list[tuple[str, str, str]]) -> None:
    node = Node(tmp_path)
    infiniband.inject_in(node.doc, fault, args)
    node.render()
    assert _bad(node.checks()) == expected


def test_counter_rising_between_the_reads_warns(tmp_path: Path) -> None:
    node = Node(tmp_path)
    # errors that were there before the first read and do not rise are history, not a finding
    infiniband.inject_in(node.doc, "ib-counter", {"hca": "mlx5_0", "counter": "link_downed", "add": 3})
    node.render()

    def rise(doc: dict[str, Any]) -> None:
        infiniband.inject_in(doc, "ib-counter", {"hca": "mlx5_1", "counter": "symbol_error", "add": 12})

    assert _bad(node.checks(change=rise)) == [
        ("rdma_port_errors", "WARNING", "mlx5_1 port 1 error counters rose in 2 s: symbol_error 0 -> 12")]


def test_expected_rate_set_explicitly(tmp_path: Path) -> None:
    bad = _bad(Node(tmp_path).checks({"rdma_expected_rate_gbps": 800}))
    assert len(bad) == 8
    assert bad[0][:2] == ("rdma_port_rate", "WARNING")
    assert "below the expected 800 Gb/s (rdma_expected_rate_gbps)" in bad[0][2]


def test_nic_farther_than_the_threshold(tmp_path: Path) -> None:
    bad = _bad(Node(tmp_path).checks({"rdma_nic_max_level": "PIX"}))
    assert bad == []
    node = Node(tmp_path)
    # GPU 3's NIC in a slot of the other socket (the simulator's nic-wrong-socket): its nearest is another NIC of
    # the GPU's socket, and its own is SYS from it
    infiniband.inject_in(node.doc, "nic-wrong-socket", {"hca": "mlx5_3"})
    write_pci_tree(node.doc, tmp_path / "pci")
    node.render()
    assert [n for n in node.read()["gpus"][3]["nics"] if n["hca"] == "mlx5_3"] == [{"hca": "mlx5_3", "level": "SYS"}]
    bad = _bad(node.checks())
    bus = node.gpus[3]["pci_bus_id"][4:].lower()
    assert bad == [("rdma_gpu_nic_distance", "WARNING", f"GPU 3 ({bus}): nearest NIC mlx5_0 is at NODE, farther "
                    "than PXB: GPUDirect RDMA crosses the host bridge; check the slot or NCCL's NIC map")]


def test_unreadable_counter_is_unknown_not_ok(tmp_path: Path) -> None:
    node = Node(tmp_path)
    counter = tmp_path / "kernel/infiniband/mlx5_4/ports/1/counters/port_rcv_errors"
    counter.chmod(0o644)
    counter.write_text("n/a\n")
    assert _bad(node.checks()) == [("rdma_port_errors", "UNKNOWN",
                                    "mlx5_4 port 1: cannot read port_rcv_errors; cannot tell whether errors rise")]


def test_the_report_carries_each_port_with_the_level_of_its_checks_and_holds_to_the_schema(tmp_path: Path) -> None:
    """gpu_health's report gains ``network``: every port as read, with the worst level of the checks that name it
    (a down port CRITICAL, a slow one WARNING, the rest PASS); the report, RDMA evidence included, validates against
    the published schema (src/gpufleet/schemas/health_report.schema.json)."""
    import json
    import sys
    from importlib import resources

    import jsonschema
    from ansible_collections.gpufleet.nvidia.plugins.modules import gpu_health

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_health_checks import HEALTHY_GPU, th

    node = Node(tmp_path)
    infiniband.inject_in(node.doc, "ib-port-down", {"hca": "mlx5_2"})
    infiniband.inject_in(node.doc, "ib-rate-degraded", {"hca": "mlx5_5", "width": 1})
    node.render()
    thresholds = th(rdma_expected=True)
    meas = rdma_health.measure(thresholds, node.read, lambda _s: None)
    host = {"driver_version": "570.172.08", "cuda_version": "12.8", "gpu_count": 1, "gpus": [HEALTHY_GPU],
            "xid_sources": [], "rdma": meas,
            "extra_checks": rdma_health.evaluate(meas, thresholds, node.gpus)}
    report = gpu_health.build_report(host, thresholds, [])
    ports = {(p["hca"], p["port"]): (p["state"], p["rate"], p["level"], p["failed"])
             for p in report["network"]["ports"]}
    assert ports[("mlx5_2", 1)] == ("DOWN", "400 Gb/sec (4X NDR)", "CRITICAL", ["rdma_port_state"])
    assert ports[("mlx5_5", 1)] == ("ACTIVE", "100 Gb/sec (1X NDR)", "WARNING", ["rdma_port_rate"])
    assert {k for k, v in ports.items() if v[2] == "PASS"} == {(f"mlx5_{i}", 1) for i in (0, 1, 3, 4, 6, 7)}
    assert report["network"]["nvidia_peermem_loaded"] is True
    assert (report["network"]["level"], report["network"]["failed"]) == ("CRITICAL", ["rdma_port_rate",
                                                                                     "rdma_port_state"])
    assert [(g["nearest"]["hca"], g["nearest"]["level"]) for g in report["network"]["gpus"]] == [
        (f"mlx5_{i}", "PIX") for i in range(8)]
    schema = json.loads(resources.files("gpufleet").joinpath("schemas/health_report.schema.json").read_text("utf-8"))
    jsonschema.Draft202012Validator(schema).validate(report)
    # a skipped check leaves its port PASS: the level is what the report judged, nothing more
    skipped = gpu_health.build_report(host, thresholds, ["rdma_port_state"])
    assert {p["hca"]: p["level"] for p in skipped["network"]["ports"]}["mlx5_2"] == "PASS"
    # no RDMA check ran: no network object
    assert gpu_health.build_report(dict(host, rdma=None, extra_checks=[]), thresholds, [])["network"] is None


def test_acs_redirect_between_a_gpu_and_its_nic_warns_naming_the_bridges(tmp_path: Path) -> None:
    """ACS as an IOMMU-enabled kernel leaves it (the simulator's acs-enabled) on the switch of GPU 3 and mlx5_3: a
    WARNING on GPU 3 naming the two downstream ports and the upstream port between them with lspci's ACSCtl words;
    every other GPU is ok. A configuration space read without root (64 bytes) is UNKNOWN, never ok."""
    node = Node(tmp_path)
    infiniband.inject_in(node.doc, "acs-enabled", {"hca": "mlx5_3"})
    write_pci_tree(node.doc, tmp_path / "pci")
    switch = node.doc["rdma"]["switches"][3]
    down = f"0000:{switch['downstream_bus']:02x}"
    bus = node.gpus[3]["pci_bus_id"][4:].lower()
    bad = _bad(node.checks())
    flags = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
    assert bad == [("rdma_acs", "WARNING", f"GPU 3 ({bus}): ACS redirects peer-to-peer to mlx5_3 through the root "
                    f"complex ({down}:00.0 ACSCtl {flags}; {down}:01.0 ACSCtl {flags}); GPUDirect RDMA loses "
                    "bandwidth or hangs. Clear the redirect bits (gpu_rdma_acs_redirect: disabled; setpci -s BDF "
                    f"ECAP_ACS+6.w=0000:002c for {down}:00.0 {down}:01.0) or turn ACS off in the BIOS")]
    # the upstream port between them offers no ACS: it is read and has nothing to say
    [acs] = [c for c in node.checks() if c["name"] == "rdma_acs" and c["gpu"]["index"] == 0]
    assert acs["message"].endswith("no ACS redirect on the 3 bridge(s) to mlx5_0")
    short = tmp_path / "pci" / f"{down}:00.0" / "config"
    short.chmod(0o644)
    short.write_bytes(short.read_bytes()[:64])
    [unknown] = [c for c in node.checks() if c["name"] == "rdma_acs" and c["status"] != "ok"]
    assert (unknown["level"], unknown["gpu"]["index"]) == ("UNKNOWN", 3)
    assert "cannot read the ACS control of" in unknown["message"]
    assert "64 bytes of configuration space" in unknown["message"]


def test_a_port_on_the_other_link_layer_warns_only_where_the_fabric_is_declared(tmp_path: Path) -> None:
    """rdma_expected_link_layer (InfiniBand, or Ethernet for RoCE): a VPI port set to the other protocol is a WARNING
    naming the port and what it runs; undeclared, the link layer is not judged (an Ethernet port of a RoCE host is
    healthy); the rate reference stays per link layer."""
    node = Node(tmp_path)
    infiniband.inject_in(node.doc, "ib-link-layer", {"hca": "mlx5_6"})
    node.render()
    assert _bad(node.checks()) == []
    assert _bad(node.checks({"rdma_expected_link_layer": "InfiniBand"})) == [
        ("rdma_port_link_layer", "WARNING", "mlx5_6 port 1 runs Ethernet, expected InfiniBand "
         "(rdma_expected_link_layer): a VPI port set to the other protocol (mlxconfig LINK_TYPE_P<n>) cannot join "
         "this fabric")]
    assert len(_bad(node.checks({"rdma_expected_link_layer": "Ethernet"}))) == 7


def test_in_a_virtual_machine_the_pcie_tree_is_not_judged(tmp_path: Path) -> None:
    """The GPUs report Pass-Through (the real H200 VM of tests/data/ground-truth does): the guest's PCIe tree is the
    hypervisor's drawing, so a NIC that looks far, or a virtual bridge with ACS on, is no finding - not applicable,
    said per GPU. The ports are still judged."""
    node = Node(tmp_path)
    infiniband.inject_in(node.doc, "nic-wrong-socket", {"hca": "mlx5_3"})
    infiniband.inject_in(node.doc, "acs-enabled", {"hca": "mlx5_5"})
    infiniband.inject_in(node.doc, "ib-port-down", {"hca": "mlx5_1"})
    write_pci_tree(node.doc, tmp_path / "pci")
    node.render()
    node.gpus = [dict(g, values={"virtualization_mode": 1}) for g in node.gpus]
    checks = node.checks()
    assert [c["name"] for c in checks if c["status"] != "ok"] == ["rdma_port_state"]
    pcie = [c for c in checks if c["name"] in ("rdma_gpu_nic_distance", "rdma_acs")]
    assert len(pcie) == 16
    assert pcie[3]["message"] == ("GPU 3: the PCIe distance to its nearest NIC not judged: the GPUs are in a virtual "
                                  "machine (Pass-Through), whose PCIe tree is the hypervisor's, not the machine's; "
                                  "not applicable")
    node.gpus = [dict(g, values={"virtualization_mode": 0}) for g in node.gpus]  # bare metal: judged
    assert sorted(c["name"] for c in node.checks() if c["status"] != "ok") == ["rdma_acs", "rdma_gpu_nic_distance",
                                                                              "rdma_port_state"]
