"""The simulated HCAs as the kernel shows them (gpufleet_sim.infiniband), their faults, and their PCIe places.

The expected strings are the kernel's formats (drivers/infiniband/core/sysfs.c: state_show "%d: %s",
phys_state_show "%u: %s", rate_show "%d%s Gb/sec (%dX%s)", lid "0x%x", cap_mask "0x%08x", GUIDs
"%04x:%04x:%04x:%04x") and what ibstat printed on a lab host (tests/integration/test_rdma_lab.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gpufleet_lab.pcitree import HIERARCHY, pci_paths, pci_tree, write_pci_tree
from gpufleet_sim import infiniband
from gpufleet_sim.presets import PRESETS, build_state


@pytest.mark.parametrize(("width", "speed", "text", "gbps"), [
    (4, "NDR", "400 Gb/sec (4X NDR)", 400),
    (1, "NDR", "100 Gb/sec (1X NDR)", 100),
    (4, "EDR", "100 Gb/sec (4X EDR)", 100),
    (4, "HDR", "200 Gb/sec (4X HDR)", 200),
    (4, "FDR", "56 Gb/sec (4X FDR)", 56),
    (4, "SDR", "10 Gb/sec (4X)", 10),
    (1, "SDR", "2.5 Gb/sec (1X)", 2.5),
    (2, "NDR", "200 Gb/sec (2X NDR)", 200),
])
def test_rate_file_is_the_kernels_rate_show(width: int, speed: str, text: str, gbps: float) -> None:
    port = {"width": width, "speed": speed}
    assert infiniband.rate_text(port) == text
    assert infiniband.rate_gbps(port) == gbps


@pytest.mark.parametrize("preset", ["8xH100-NVSwitch", "8xB200-NVSwitch"])
def test_hgx_presets_have_one_ndr_hca_per_gpu(preset: str) -> None:
    doc = build_state(preset, "rdma-h100")
    hcas = doc["rdma"]["hcas"]
    assert [h["name"] for h in hcas] == [f"mlx5_{i}" for i in range(8)]
    assert [h["gpu"] for h in hcas] == list(range(8))
    assert doc["rdma"]["peermem"] == {"loaded": True}
    assert {infiniband.rate_text(h["ports"][0]) for h in hcas} == {"400 Gb/sec (4X NDR)"}


def test_other_presets_have_no_hcas() -> None:
    assert [p for p in PRESETS if "rdma" in build_state(p, "x")] == ["8xH100-NVSwitch", "8xB200-NVSwitch"]


def test_files_of_a_healthy_port() -> None:
    hca = build_state("8xH100-NVSwitch", "rdma-h100")["rdma"]["hcas"][0]
    files = infiniband.hca_files(hca)
    assert files["node_type"] == "1: CA\n"
    assert re.fullmatch(r"946d:ae[0-9a-f]{2}:[0-9a-f]{4}:[0-9a-f]{4}\n", files["node_guid"])
    assert files["sys_image_guid"] == files["node_guid"]
    assert (files["hca_type"], files["fw_ver"], files["board_id"]) == ("MT4129\n", "28.41.1000\n", "MT_0000000838\n")
    port = {k.removeprefix("ports/1/"): v for k, v in files.items() if k.startswith("ports/1/")}
    assert port["state"] == "4: ACTIVE\n"
    assert port["phys_state"] == "5: LinkUp\n"
    assert port["rate"] == "400 Gb/sec (4X NDR)\n"
    assert port["link_layer"] == "InfiniBand\n"
    assert (port["lid"], port["sm_lid"], port["cap_mask"]) == ("0x1\n", "0x1\n", "0xa751e848\n")
    assert port["gids/0"] == "fe80:0000:0000:0000:" + files["node_guid"]
    for counter in ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
                    "excessive_buffer_overrun_errors"):
        assert port[f"counters/{counter}"] == "0\n"


def _read(root: Path, rel: str) -> str:
    return (root / rel).read_text(encoding="utf-8")


def test_render_then_faults_change_the_files_and_clear_puts_them_back(tmp_path: Path) -> None:
    doc = build_state("8xH100-NVSwitch", "rdma-h100")
    root = tmp_path / "kernel"
    assert infiniband.render(doc, root) == [f"mlx5_{i}" for i in range(8)]
    nic = doc["rdma"]["hcas"][3]["pci_bus_id"]
    nic = doc["rdma"]["hcas"][3]["pci_bus_id"]
    assert os.readlink(root / "infiniband/mlx5_3/device") == f"/sys/bus/pci/devices/{nic}"
    assert _read(root, "module/nvidia_peermem/initstate") == "live\n"
    assert _read(root, "module/ib_core/refcnt") == "3\n"  # ib_uverbs, mlx5_ib, nvidia_peermem
    healthy = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}

    cases = [
        ("ib-port-down", {"hca": "mlx5_2"}, "infiniband/mlx5_2/ports/1/state", "1: DOWN\n"),
        ("ib-rate-degraded", {"hca": "mlx5_5", "width": 1}, "infiniband/mlx5_5/ports/1/rate", "100 Gb/sec (1X NDR)\n"),
        ("ib-rate-degraded", {"hca": "mlx5_6", "width": 4, "speed": "EDR"}, "infiniband/mlx5_6/ports/1/rate",
         "100 Gb/sec (4X EDR)\n"),
        ("ib-counter", {"hca": "mlx5_1", "counter": "symbol_error", "add": 7},
         "infiniband/mlx5_1/ports/1/counters/symbol_error", "7\n"),
    ]
    for fault, args, rel, text in cases:
        infiniband.inject_in(doc, fault, args)
        infiniband.render(doc, root)
        assert _read(root, rel) == text
    assert _read(root, "infiniband/mlx5_2/ports/1/phys_state") == "2: Polling\n"
    assert _read(root, "infiniband/mlx5_2/ports/1/counters/link_downed") == "1\n"
    infiniband.inject_in(doc, "peermem-unloaded", {})
    infiniband.render(doc, root)
    assert not (root / "module/nvidia_peermem/initstate").exists()
    assert _read(root, "module/ib_core/refcnt") == "2\n"

    assert len(infiniband.clear_in(doc)) == 5
    infiniband.render(doc, root)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == healthy
    assert "faults" not in doc["rdma"]


def test_rising_counter_counts_with_time() -> None:
    doc = build_state("8xB200-NVSwitch", "b")
    infiniband.inject_in(doc, "ib-counter", {"hca": "mlx5_0", "counter": "port_rcv_errors", "per_second": 10})
    infiniband.tick_in(doc, 1.5)
    assert doc["rdma"]["hcas"][0]["ports"][0]["counters"]["port_rcv_errors"] == 16


@pytest.mark.parametrize(("fault", "args", "message"), [
    ("ib-port-down", {"hca": "mlx5_9"}, "no HCA 'mlx5_9' in the state (HCAs: mlx5_0, mlx5_1, mlx5_2, mlx5_3, "
                                        "mlx5_4, mlx5_5, mlx5_6, mlx5_7)"),
    ("ib-port-down", {"hca": "mlx5_0", "port": 2}, "mlx5_0 has no port 2"),
    ("ib-counter", {"hca": "mlx5_0", "counter": "nope"}, "mlx5_0 port 1 has no counter 'nope'"),
])
def test_fault_naming_nothing_says_what_exists(fault: str, args: dict[str, object], message: str) -> None:
    with pytest.raises(infiniband.InfinibandError) as err:
        infiniband.inject_in(build_state("8xH100-NVSwitch", "x"), fault, args)
    assert str(err.value) == message


def test_a_host_without_hcas_refuses_rdma_faults() -> None:
    with pytest.raises(infiniband.InfinibandError, match="the state has no HCAs"):
        infiniband.inject_in(build_state("8xA100", "x"), "peermem-unloaded", {})


def test_pci_tree_places_each_hca_on_its_gpus_switch(tmp_path: Path) -> None:
    doc = build_state("8xH100-NVSwitch", "rdma-h100")
    tree = pci_tree(doc)
    paths = pci_paths(doc)
    for hca in doc["rdma"]["hcas"]:
        nic = tree[hca["pci_bus_id"]]
        assert (nic["vendor"], nic["device"], nic["class"]) == (b"0x15b3\n", b"0x1021\n", b"0x020700\n")
        gpu_bus = "0000:" + doc["gpus"][hca["gpu"]]["pci"]["bus_id"].split(":", 1)[1].lower()
        nic_path, gpu_path = paths[hca["pci_bus_id"]].split("/"), paths[gpu_bus].split("/")
        # host bridge, root port, upstream port shared; one downstream port each
        assert nic_path[:3] == gpu_path[:3]
        assert nic_path[3] != gpu_path[3]
        assert tree[gpu_bus]["numa_node"] == nic["numa_node"] == f"{hca['numa_node']}\n".encode()
    assert [h["numa_node"] for h in doc["rdma"]["hcas"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    write_pci_tree(doc, tmp_path)
    hca = doc["rdma"]["hcas"][0]
    link = tmp_path / hca["pci_bus_id"]
    assert link.is_symlink()
    assert os.readlink(link) == f"{HIERARCHY}/{paths[hca['pci_bus_id']]}"
    assert (link / "vendor").read_text() == "0x15b3\n"
    # written again over itself (a host started twice) and over a preset without HCAs
    write_pci_tree(doc, tmp_path)
    write_pci_tree(build_state("8xA100", "x"), tmp_path)
    assert not any(p.is_symlink() for p in tmp_path.iterdir())
    assert not (tmp_path / HIERARCHY).exists()


def test_presets_without_hcas_keep_their_flat_tree() -> None:
    tree = pci_tree(build_state("8xA100", "x"))
    assert pci_paths(build_state("8xA100", "x")) == {}
    assert {files["numa_node"] for files in tree.values()} == {b"-1\n"}


def test_nic_wrong_socket_moves_the_hca_below_the_other_sockets_host_bridge(tmp_path: Path) -> None:
    """``nic-wrong-socket``: the HCA leaves its GPU's switch for a root port of its own on the other NUMA node; the
    tree written over the old one links it there (NUMA node included), and clearing puts it back."""
    doc = build_state("8xH100-NVSwitch", "rdma-h100")
    write_pci_tree(doc, tmp_path)
    hca = doc["rdma"]["hcas"][3]
    before = os.path.realpath(tmp_path / hca["pci_bus_id"])
    gpu_root = before.split("/")[len(str(tmp_path).split("/")) + 1]  # .devices/<host bridge>/...
    assert infiniband.inject_in(doc, "nic-wrong-socket", {"hca": "mlx5_3"}) == "mlx5_3 on NUMA node 1, away from GPU 3"
    write_pci_tree(doc, tmp_path)
    moved = os.path.realpath(tmp_path / hca["pci_bus_id"])
    parts = moved.split("/")[len(str(tmp_path).split("/")) + 1:]
    assert parts[0].startswith("pci0000:")
    assert parts[0] != gpu_root
    assert parts[-1] == hca["pci_bus_id"]
    assert len(parts) == 5  # host bridge, root port, switch up, down, NIC
    assert (tmp_path / hca["pci_bus_id"] / "numa_node").read_text() == "1\n"
    assert sum(hca["pci_bus_id"] in s["devices"] for s in doc["rdma"]["switches"]) == 1
    assert infiniband.clear_in(doc) == ["nic-wrong-socket:mlx5_3"]
    write_pci_tree(doc, tmp_path)
    assert os.path.realpath(tmp_path / hca["pci_bus_id"]) == before
    assert (tmp_path / hca["pci_bus_id"] / "numa_node").read_text() == "0\n"
    with pytest.raises(infiniband.InfinibandError, match="no HCA 'mlx5_9'"):
        infiniband.inject_in(doc, "nic-wrong-socket", {"hca": "mlx5_9"})


def _acs(config: bytes) -> tuple[int, int] | None:
    """(ACS capability, ACS control) of a configuration space, walked as the PCIe spec lays it out, or None."""
    offset = 0x100
    while offset and len(config) >= offset + 8:
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header & 0xFFFF == 0x0D:
            capability = int.from_bytes(config[offset + 4:offset + 6], "little")
            return capability, int.from_bytes(config[offset + 6:offset + 8], "little")
        offset = header >> 20
    return None


def test_bridges_have_a_pcie_config_space_with_acs_off_and_the_fault_turns_redirect_on() -> None:
    """The ports of each GPU/NIC switch: 4096-byte type-1 config spaces (bus numbers of the devices below, a PCIe
    capability naming the port type), ACS offered by root and downstream ports and off; ``acs-enabled`` sets what an
    IOMMU-enabled kernel writes (SV RR CR UF, 0x001d) on that switch's ports only, and clearing puts 0 back."""
    doc = build_state("8xH100-NVSwitch", "rdma-h100")
    switch = doc["rdma"]["switches"][3]
    root, up, down = (f"0000:{switch[k]:02x}:{'01' if k == 'root_bus' else '00'}.0"
                      for k in ("root_bus", "upstream_bus", "downstream_bus"))
    tree = pci_tree(doc)
    gpu_bus = int(switch["devices"][0].split(":")[1], 16)
    for bus_id, port_type, buses in ((root, 4, (switch["root_bus"], switch["upstream_bus"], switch["upstream_bus"])),
                                     (up, 5, (switch["upstream_bus"], switch["downstream_bus"],
                                              switch["downstream_bus"])),
                                     (down, 6, (switch["downstream_bus"], gpu_bus, gpu_bus))):
        config = tree[bus_id]["config"]
        assert len(config) == 4096
        assert config[0x0E] == 1
        assert tuple(config[0x18:0x1B]) == buses
        assert config[0x34] == 0x40
        assert config[0x40] == 0x10  # PCI Express capability
        assert (config[0x42] >> 4) & 0xF == port_type
    assert _acs(tree[root]["config"]) == (0x001F, 0)
    assert _acs(tree[down]["config"]) == (0x007F, 0)
    assert _acs(tree[up]["config"]) is None
    infiniband.inject_in(doc, "acs-enabled", {"hca": "mlx5_3"})
    tree = pci_tree(doc)
    assert _acs(tree[root]["config"]) == (0x001F, 0x001D)
    assert _acs(tree[down]["config"]) == (0x007F, 0x001D)
    other = doc["rdma"]["switches"][2]
    assert _acs(tree[f"0000:{other['downstream_bus']:02x}:00.0"]["config"]) == (0x007F, 0)
    assert infiniband.clear_in(doc, "acs-enabled") == ["acs-enabled:mlx5_3"]
    assert _acs(pci_tree(doc)[down]["config"]) == (0x007F, 0)
