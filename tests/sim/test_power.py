"""A power cycle of the simulated GPUs (gpufleet_sim.power): once per new boot id, what it resets and what it keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet_sim import hardware, power, store
from gpufleet_sim.presets import build_state

DEAD = 2**22 + 12345


@pytest.fixture
def doc() -> dict[str, Any]:
    """An A30 host after a busy day: MIG pending on GPU 0 with instances, faults, processes, a client."""
    state = build_state("4xA30", "power-test")
    gpu0, gpu1, gpu2 = state["gpus"][:3]
    gpu0["mig"].update({"current": 1, "pending": 0, "gpu_instances": [{"id": 1, "compute_instances": []}]})
    gpu1["mig"]["pending"] = 1
    gpu1["persistence_mode"] = 1
    gpu1["compute_mode"] = 3
    gpu1["power"]["limit_mw"] = gpu1["power"]["enforced_mw"] = 120000
    for fault, args in (("xid", {"code": 13}), ("ecc-uncorrectable", {"count": 2}), ("remap-pending", {}),
                        ("pcie-downgrade", {}), ("process", {"pid": DEAD, "used_memory_mib": 100})):
        hardware.inject_in(state, gpu2, fault, args)
    hardware.inject_in(state, state["gpus"][3], "fallen-off-bus", {})
    hardware.inject_in(state, None, "nvml-error", {"function": "nvmlInit_v2", "code": 999})
    state["clients"] = [{"pid": DEAD, "name": "nvidia-persistenced"}]
    return state


def test_the_first_boot_only_records_its_id(doc: dict[str, Any]) -> None:
    before = store.dump(doc)
    assert power.power_on_in(doc, "boot-1") is False
    assert doc.pop("boot_id") == "boot-1"
    assert store.dump(doc) == before


def test_the_same_boot_changes_nothing(doc: dict[str, Any]) -> None:
    power.power_on_in(doc, "boot-1")
    before = store.dump(doc)
    assert power.power_on_in(doc, "boot-1") is False
    assert store.dump(doc) == before


def test_a_new_boot_power_cycles_every_gpu(doc: dict[str, Any]) -> None:
    power.power_on_in(doc, "boot-1")
    aggregate_before = doc["gpus"][2]["ecc"]["aggregate"]["uncorrected"]["dram"]
    assert power.power_on_in(doc, "boot-2") is True
    gpu0, gpu1, gpu2, gpu3 = doc["gpus"]
    assert doc["boot_id"] == "boot-2"
    assert (gpu0["mig"]["current"], gpu0["mig"]["gpu_instances"]) == (0, [])
    assert (gpu1["mig"]["current"], gpu1["mig"]["pending"]) == (1, 1)
    assert (gpu1["persistence_mode"], gpu1["compute_mode"]) == (0, 0)
    assert gpu1["power"]["limit_mw"] == gpu1["power"]["enforced_mw"] == gpu1["power"]["default_mw"] == 165000
    assert gpu2["events"] == []
    assert gpu2["processes"] == []
    assert gpu2["memory"]["used_mib"] == 0
    assert gpu2["ecc"]["volatile"]["uncorrected"]["dram"] == 0
    assert gpu2["ecc"]["aggregate"]["uncorrected"]["dram"] == aggregate_before == 2
    assert gpu2["remapped_rows"]["pending"] == 0
    # the downgraded PCIe link is the board's defect: it stays, with its record for `gpusim clear`
    assert sorted(gpu2["faults"]) == ["pcie-downgrade"]
    assert gpu2["pcie"]["gen"] == 2
    assert not gpu3.get("lost")
    assert "faults" not in gpu3
    assert doc["clients"] == []
    # a test's own NVML error injection is no hardware state: it stays
    assert doc["inject"] == {"nvmlInit_v2": 999}
    assert hardware.active_faults(doc) == {"system": ["nvml-error"], "2": ["pcie-downgrade"]}


def test_an_empty_boot_id_is_refused(doc: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="a boot id must not be empty"):
        power.power_on_in(doc, " ")


def test_power_on_writes_the_state_file_under_the_lock(doc: dict[str, Any], tmp_path: Path) -> None:
    path = store.create(tmp_path / "state.json", doc)
    assert power.power_on("boot-1", path=path) is False
    assert power.power_on("boot-2", path=path) is True
    written = store.load(path)
    assert written["boot_id"] == "boot-2"
    assert written["gpus"][1]["mig"]["current"] == 1
