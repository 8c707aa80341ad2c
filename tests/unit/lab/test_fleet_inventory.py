"""Reading fleet inventories and making synthetic fleets (no hosts started)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet_lab.fleet import FleetError, sim_inventory_dir, specs_from_inventory, synthetic_specs, write_inventory
from gpufleet_lab.hosts import HostSpec, create_args, loopback_address


@pytest.mark.parametrize(("number", "address"), [(1, "127.0.1.1"), (16, "127.0.16.1"), (254, "127.0.254.1")])
def test_loopback_address(number: int, address: str) -> None:
    assert loopback_address(number) == address


@pytest.mark.parametrize("number", [0, 255, -1])
def test_loopback_address_out_of_range(number: int) -> None:
    with pytest.raises(ValueError, match=f"^host number {number} is out of range: use 1 to 254$"):
        loopback_address(number)


def test_sim_inventory_has_distinct_presets_and_addresses() -> None:
    specs = specs_from_inventory(sim_inventory_dir() / "hosts.yml")
    assert len(specs) >= 3
    assert len({s.preset for s in specs}) == len(specs)
    assert len({s.loopback for s in specs}) == len(specs)
    assert all(s.loopback.startswith("127.0.") and s.loopback.endswith(".1") for s in specs)


@pytest.mark.parametrize(("doc", "message"), [
    ({"all": {"hosts": {"a": {}}}}, "host a has no gpufleet_sim_preset"),
    ({"all": {"hosts": {"a": {"gpufleet_sim_preset": "4xA30", "gpufleet_sim_loopback": "127.0.1.1"}},
              "children": {"g": {"hosts": {"b": {"gpufleet_sim_preset": "2xL40S",
                                                 "gpufleet_sim_loopback": "127.0.1.1"}}}}}},
     "two hosts share a loopback address (['127.0.1.1', '127.0.1.1'])"),
    ({"all": {}}, "no hosts"),
])
def test_bad_inventories(tmp_path: Path, doc: dict, message: str) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(FleetError) as err:
        specs_from_inventory(path)
    assert str(err.value) == f"{path}: {message}"


def test_loopback_defaults_to_position(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"a": {"gpufleet_sim_preset": "4xA30"},
                                                      "b": {"gpufleet_sim_preset": "2xL40S"}}}}))
    assert [s.loopback for s in specs_from_inventory(path)] == ["127.0.1.1", "127.0.2.1"]


@pytest.mark.parametrize(("count", "presets", "expected"), [
    (1, ["8xA100"], [("bench-01", "8xA100", "127.0.1.1")]),
    (3, ["8xA100", "4xA30"], [("bench-01", "8xA100", "127.0.1.1"), ("bench-02", "4xA30", "127.0.2.1"),
                              ("bench-03", "8xA100", "127.0.3.1")]),
])
def test_synthetic_specs(count: int, presets: list[str], expected: list[tuple[str, str, str]]) -> None:
    specs = synthetic_specs(count, "bench", presets)
    assert [(s.name, s.preset, s.loopback) for s in specs] == expected
    assert all(s.fleet == "bench" for s in specs)


def test_write_inventory_round_trips(tmp_path: Path) -> None:
    specs = synthetic_specs(2, "bench", ["4xA30", "2xL40S"])
    inventory = write_inventory(specs, tmp_path / "inv")
    assert (inventory / "group_vars").resolve() == (sim_inventory_dir() / "group_vars").resolve()
    again = specs_from_inventory(inventory / "hosts.yml", fleet="bench")
    assert [(s.name, s.preset, s.loopback) for s in again] == [(s.name, s.preset, s.loopback) for s in specs]


def test_create_args_host_network_no_privileges(tmp_path: Path) -> None:
    spec = HostSpec(name="h1", preset="4xA30", loopback="127.0.3.1", owner="molecule", fleet="f")
    args = create_args(spec, tmp_path)
    assert args[:2] == ["create", "--name"]
    assert "--network=host" in args
    assert "--systemd=always" in args
    assert not any("privileged" in a or a.startswith("--cap-add") for a in args)
    labels = [args[i + 1] for i, a in enumerate(args) if a == "--label"]
    assert labels == ["owner=molecule", "gpufleet.preset=4xA30", "gpufleet.loopback=127.0.3.1", "gpufleet.fleet=f"]
    assert f"type=bind,src={tmp_path},dst=/sys/bus/pci/devices,ro=true" in args
    assert args[-2:] == ["localhost/gpufleet-testhost:bookworm", "/sbin/init"]
    # an RDMA host's PCI tree takes setpci's writes (ACS on its bridges, tests/integration/test_rdma_lab.py)
    rdma = create_args(HostSpec(name="h2", preset="8xH100-NVSwitch", loopback="127.0.4.1", rdma=True), tmp_path)
    assert f"type=bind,src={tmp_path},dst=/sys/bus/pci/devices,ro=false" in rdma
