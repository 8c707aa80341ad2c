"""RDMA facts from sysfs (plugins/module_utils/rdma.py): the kernel's formats parsed, and nvidia-smi topo levels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.gpufleet.nvidia.plugins.module_utils import rdma
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet_lab.pcitree import write_pci_tree
from gpufleet_sim import infiniband
from gpufleet_sim.presets import build_state


@pytest.mark.parametrize(("text", "expected"), [
    ("400 Gb/sec (4X NDR)", {"gbps": 400.0, "width": 4, "speed": "NDR"}),
    ("100 Gb/sec (1X NDR)", {"gbps": 100.0, "width": 1, "speed": "NDR"}),
    ("2.5 Gb/sec (1X)", {"gbps": 2.5, "width": 1, "speed": "SDR"}),
    ("56 Gb/sec (4X FDR)", {"gbps": 56.0, "width": 4, "speed": "FDR"}),
    ("", {"gbps": None, "width": None, "speed": None}),
    (None, {"gbps": None, "width": None, "speed": None}),
    ("fast", {"gbps": None, "width": None, "speed": None}),
])
def test_parse_rate(text: str | None, expected: dict[str, Any]) -> None:
    assert rdma.parse_rate(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("4: ACTIVE", (4, "ACTIVE")), ("1: DOWN", (1, "DOWN")), ("5: LinkUp", (5, "LinkUp")),
    ("2: Polling", (2, "Polling")), ("ACTIVE", (None, None)), (None, (None, None)), ("x: y", (None, None)),
])
def test_parse_numbered(text: str | None, expected: tuple[int | None, str | None]) -> None:
    assert rdma.parse_numbered(text) == expected


@pytest.mark.parametrize(("path", "chain"), [
    ("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:18:00.0",
     ["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:18:00.0"]),
    ("/sys/bus/pci/devices/.devices/pci0000:fe/0000:fe:01.0/0000:fd:00.0/0000:fc:00.0/0000:18:00.0",
     ["pci0000:fe", "0000:fe:01.0", "0000:fd:00.0", "0000:fc:00.0", "0000:18:00.0"]),
    ("/sys/bus/pci/devices/0000:18:00.0", []),       # a flat tree: no PCIe path to read
    ("/sys/devices/pci0000:00", []),
])
def test_pcie_chain(path: str, chain: list[str]) -> None:
    assert rdma.pcie_chain(path) == chain


HB, RP, UP = "pci0000:10", "0000:10:01.0", "0000:11:00.0"


@pytest.mark.parametrize(("a", "b", "numa", "level"), [
    # one switch: GPU and NIC below two downstream ports of it
    ([HB, RP, UP, "0000:12:00.0", "0000:13:00.0"], [HB, RP, UP, "0000:12:01.0", "0000:14:00.0"], (0, 0), "PIX"),
    # both below one bridge
    ([HB, RP, "0000:13:00.0"], [HB, RP, "0000:14:00.0"], (0, 0), "PIX"),
    # two switches below one root port
    ([HB, RP, UP, "0000:12:00.0", "0000:20:00.0", "0000:21:00.0", "0000:22:00.0"],
     [HB, RP, UP, "0000:12:01.0", "0000:14:00.0"], (0, 0), "PXB"),
    # different root ports of one host bridge
    ([HB, RP, "0000:13:00.0"], [HB, "0000:10:02.0", "0000:14:00.0"], (0, 0), "PHB"),
    # different host bridges, one NUMA node / two
    ([HB, RP, "0000:13:00.0"], ["pci0000:30", "0000:30:01.0", "0000:31:00.0"], (0, 0), "NODE"),
    ([HB, RP, "0000:13:00.0"], ["pci0000:30", "0000:30:01.0", "0000:31:00.0"], (0, 1), "SYS"),
    # NUMA unknown across host bridges, or no PCIe path: no level rather than a guess
    ([HB, RP, "0000:13:00.0"], ["pci0000:30", "0000:30:01.0", "0000:31:00.0"], (-1, -1), None),
    ([], [HB, RP, "0000:13:00.0"], (0, 0), None),
])
def test_topo_level(a: list[str], b: list[str], numa: tuple[int, int], level: str | None) -> None:
    assert rdma.topo_level(a, numa[0], b, numa[1]) == level
    assert rdma.topo_level(b, numa[1], a, numa[0]) == level


def _simulated(tmp_path: Path, preset: str = "8xH100-NVSwitch") -> tuple[dict[str, Any], dict[str, str]]:
    doc = build_state(preset, "rdma-h100")
    write_pci_tree(doc, tmp_path / "pci")
    if doc.get("rdma"):
        infiniband.render(doc, tmp_path / "kernel", pci_root=str(tmp_path / "pci"))
    roots = {"class_root": str(tmp_path / "kernel/infiniband"), "pci_root": str(tmp_path / "pci"),
             "sys_module": str(tmp_path / "kernel/module")}
    return doc, roots


def test_facts_of_a_simulated_hgx_node(tmp_path: Path) -> None:
    doc, roots = _simulated(tmp_path)
    facts = rdma.rdma_facts(**roots)
    assert (facts["hca_count"], facts["port_count"], facts["nvidia_peermem_loaded"]) == (8, 8, True)
    port = facts["hcas"][0]["ports"][0]
    assert (port["state"], port["phys_state"], port["rate_gbps"], port["width"], port["speed"]) == \
        ("ACTIVE", "LinkUp", 400.0, 4, "NDR")
    assert port["link_layer"] == "InfiniBand"
    assert set(port["counters"].values()) == {0}
    assert port["unreadable"] == []
    assert facts["hcas"][3]["pci_bus_id"] == doc["rdma"]["hcas"][3]["pci_bus_id"]
    # GPU i has NIC i on its switch; the three other NICs of its socket at NODE, the other socket's at SYS
    for gpu in facts["gpus"]:
        i = gpu["index"]
        assert (gpu["nearest"]["hca"], gpu["nearest"]["level"]) == (f"mlx5_{i}", "PIX")
        # the bridges between them as p2pdma walks them: the two downstream ports (ACS offered, off) and the
        # switch's upstream port they share (no ACS capability)
        switch = doc["rdma"]["switches"][i]
        down, up = f"0000:{switch['downstream_bus']:02x}", f"0000:{switch['upstream_bus']:02x}:00.0"
        assert gpu["nearest"]["acs"] == [
            {"bridge": f"{down}:00.0", "control": 0, "redirect": False, "error": None},
            {"bridge": f"{down}:01.0", "control": 0, "redirect": False, "error": None},
            {"bridge": up, "control": None, "redirect": False, "error": None}]
        levels = [n["level"] for n in gpu["nics"]]
        assert levels == ["PIX", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]


def test_faults_show_in_the_facts(tmp_path: Path) -> None:
    doc, roots = _simulated(tmp_path)
    infiniband.inject_in(doc, "ib-port-down", {"hca": "mlx5_2"})
    infiniband.inject_in(doc, "ib-rate-degraded", {"hca": "mlx5_5", "width": 1})
    infiniband.inject_in(doc, "ib-counter", {"hca": "mlx5_1", "counter": "symbol_error", "add": 3})
    infiniband.inject_in(doc, "peermem-unloaded", {})
    infiniband.render(doc, tmp_path / "kernel", pci_root=roots["pci_root"])
    facts = rdma.rdma_facts(**roots)
    ports = {h["name"]: h["ports"][0] for h in facts["hcas"]}
    assert (ports["mlx5_2"]["state"], ports["mlx5_2"]["phys_state"]) == ("DOWN", "Polling")
    assert (ports["mlx5_5"]["rate_gbps"], ports["mlx5_5"]["width"]) == (100.0, 1)
    assert ports["mlx5_1"]["counters"]["symbol_error"] == 3
    assert facts["nvidia_peermem_loaded"] is False


def test_a_host_without_hcas(tmp_path: Path) -> None:
    _, roots = _simulated(tmp_path, "8xA100")
    facts = rdma.rdma_facts(**roots)
    assert (facts["hcas"], facts["gpus"], facts["nvidia_peermem_loaded"]) == ([], [], None)


def test_an_unreadable_counter_is_named(tmp_path: Path) -> None:
    _, roots = _simulated(tmp_path)
    counter = Path(roots["class_root"]) / "mlx5_0/ports/1/counters/port_rcv_errors"
    counter.chmod(0o644)
    counter.write_text("garbage\n")
    port = rdma.rdma_facts(**roots)["hcas"][0]["ports"][0]
    assert port["counters"]["port_rcv_errors"] is None
    assert port["unreadable"] == ["counters/port_rcv_errors"]


def test_acs_control_of_hand_laid_spaces() -> None:
    """The ACS capability found behind another extended capability; none at all; a space read without root."""
    space = bytearray(4096)
    space[0x100:0x104] = (0x0001 | (1 << 16) | (0x150 << 20)).to_bytes(4, "little")  # AER, next at 0x150
    space[0x150:0x158] = (0x000D | (1 << 16)).to_bytes(4, "little") + (0x007F).to_bytes(2, "little") + \
        (0x001D).to_bytes(2, "little")
    assert rdma.acs_control(bytes(space)) == (0x007F, 0x001D)
    assert rdma.acs_flags(0x001D) == "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
    assert rdma.acs_control(bytes(4096)) is None
    with pytest.raises(ValueError, match="64 bytes of configuration space"):
        rdma.acs_control(bytes(64))
    looped = bytearray(4096)
    looped[0x100:0x104] = (0x0001 | (0x100 << 20)).to_bytes(4, "little")  # points at itself
    assert rdma.acs_control(bytes(looped)) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=4096), st.integers(min_value=0, max_value=4095))
def test_acs_control_never_fails_on_any_bytes(data: bytes, at: int) -> None:
    """A configuration space is the hardware's (or a broken device's) bytes: any of them gives a pair, None or the
    ValueError of a short space, and the walk ends (a capability list may loop)."""
    space = bytearray(data.ljust(4096, b"\0")) if len(data) > 0x200 else bytearray(data)
    if len(space) >= 0x104 and at >= 0x100:
        space[0x100:0x104] = ((at & ~3) << 20 | 0x0D if at % 2 else (at & ~3) << 20 | 0x01).to_bytes(4, "little")
    try:
        found = rdma.acs_control(bytes(space))
    except ValueError:
        assert len(space) < 0x104
        return
    assert found is None or (0 <= found[0] <= 0xFFFF and 0 <= found[1] <= 0xFFFF)
