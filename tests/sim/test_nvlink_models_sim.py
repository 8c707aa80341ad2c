"""The simulator's GPU models (the "hardware") against gpufleet's NVLink table (plugins/module_utils/nvlink_models.py),
and gpu_health's reading of NVLinks (plugins/module_utils/nvml_health.py) through the unmodified pynvml.

Two packages, two sources: the simulator answers from its model files, production judges from its table. For every
model file the test builds a one-GPU host and asks NVML what a real tool would: the PCI device id and name, each
link's state (``nvmlDeviceGetNvLinkState``), the link count (field ``NVML_FI_DEV_NVLINK_LINK_COUNT``, 91), each
link's speed (``NVML_FI_DEV_NVLINK_GET_SPEED``, 164) and version; the table must say the same. The nvlink-slow and
nvlink-down faults then go through production's own reader and verdict.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpufleet_sim import hardware

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvlink_models  # noqa: E402

MODEL_FILES = sorted(p.stem for p in (REPO / "simulator/src/gpufleet_sim/models").glob("*.json"))
NOT_SUPPORTED = 3

READ_LINKS = """
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    R["pci"] = N.nvmlDeviceGetPciInfo(h).pciDeviceId
    R["name"] = N.nvmlDeviceGetName(h)
    R["name"] = R["name"].decode() if isinstance(R["name"], bytes) else R["name"]
    states = []
    for link in range(N.NVML_NVLINK_MAX_LINKS):
        rc = code(N.nvmlDeviceGetNvLinkState, h, link)
        if rc:
            R["after_last"] = rc
            break
        states.append(int(N.nvmlDeviceGetNvLinkState(h, link)))
    R["states"] = states
    count = N.nvmlDeviceGetFieldValues(h, [N.NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
    R["link_count"] = [count.nvmlReturn, count.value.uiVal]
    speeds = N.nvmlDeviceGetFieldValues(h, [(N.NVML_FI_DEV_NVLINK_GET_SPEED, k) for k in range(max(len(states), 1))])
    R["speeds"] = [[v.nvmlReturn, v.value.uiVal] for v in speeds]
    R["version"] = N.nvmlDeviceGetNvLinkVersion(h, 0) if states else None
"""

# production's reader and verdict, in the scenario's interpreter (the library is the simulator's)
READ_HEALTH = f"""
    sys.path.insert(0, {str(COLLECTIONS)!r})
    from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_nvlink, nvml, nvml_health
    with nvml.nvml_session() as session:
        doc = nvml_health.GpuReader(session, int(os.environ.get("GPU", "0"))).read_all(False)
    R["doc"] = {{"pci_device_id": doc["pci_device_id"], "nvlink": doc["values"].get("nvlink"),
                "nvlink_speed": doc["values"].get("nvlink_speed"), "errors": doc["errors"],
                "unsupported": doc["unsupported"]}}
    R["check"] = health_nvlink.check_nvlink(doc, {{}})
"""


def one_gpu_state(model: str) -> dict[str, Any]:
    from gpufleet_sim.presets import build_gpu, build_state

    doc = build_state("1xT4", "nvlink-table")
    doc["gpus"] = [build_gpu(model, 0, "nvlink-table", 0x18)]
    return doc


@pytest.mark.parametrize("model", MODEL_FILES)
def test_simulated_model_agrees_with_the_nvlink_table(nvml_sim: Callable[..., Any], model: str) -> None:
    r = nvml_sim(doc=one_gpu_state(model)).run(READ_LINKS)
    row = nvlink_models.find(r["pci"], r["name"])
    assert row is not None, f"{model}: PCI id 0x{r['pci']:08X} / {r['name']!r} not in nvlink_models.MODELS"
    assert row.model == model
    assert nvlink_models.find(r["pci"]) is row  # found by its PCI id, not only by name
    if row.links == 0:
        assert (r["states"], r["after_last"], r["link_count"][0]) == ([], NOT_SUPPORTED, NOT_SUPPORTED)
        return
    assert r["states"] == [1] * row.links
    assert r["link_count"] == [0, row.links]
    assert r["speeds"] == [[0, row.speed_mbps]] * row.links
    assert r["version"] == row.generation


def test_production_reads_a_healthy_hgx_gpu_as_ok(nvml_sim: Callable[..., Any]) -> None:
    r = nvml_sim("8xH100-NVSwitch").run(READ_HEALTH)
    assert {k: r["doc"][k] for k in ("pci_device_id", "nvlink", "nvlink_speed", "errors")} == {
        "pci_device_id": "0x233010DE", "nvlink": [1] * 18, "nvlink_speed": [26562] * 18, "errors": {}}
    assert not {"nvlink", "nvlink_speed"} & set(r["doc"]["unsupported"])
    assert (r["check"]["status"], r["check"]["level"], r["check"]["message"]) == (
        "ok", "PASS", "18 of 18 NVLinks up at 26562 MB/s (NVLink 4)")


def test_a_slow_link_is_read_and_warned_about(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("8xB200-NVSwitch")
    with sim.edit() as doc:
        assert hardware.inject_in(doc, doc["gpus"][2], "nvlink-slow", {"link": 5, "mbps": 26562}) == \
            "NVLink 5 of GPU 2 at 26562 MB/s"
    r = sim.run(READ_HEALTH, extra_env={"GPU": "2"})
    assert r["doc"]["nvlink_speed"] == [53125] * 5 + [26562] + [53125] * 12
    assert (r["check"]["status"], r["check"]["level"], r["check"]["message"]) == (
        "warn", "WARNING", "NVLink 5 at 26562 MB/s, expected 53125 MB/s (B200-180GB, NVLink 5): trained down, or a "
        "reduced NVLink bandwidth mode")
    with sim.edit() as doc:
        assert hardware.clear_in(doc, [doc["gpus"][2]], "nvlink-slow") == ["GPU 2: nvlink-slow"]
        assert "nvlink_slow" not in doc["gpus"][2]
    assert sim.run(READ_HEALTH, extra_env={"GPU": "2"})["check"]["status"] == "ok"


def test_a_down_link_is_named_and_its_speed_not_asked(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("8xH100-NVSwitch")
    with sim.edit() as doc:
        hardware.inject_in(doc, doc["gpus"][0], "nvlink-down", {"link": 11})
    r = sim.run(READ_HEALTH)
    assert r["doc"]["nvlink"] == [1] * 11 + [0] + [1] * 6
    assert r["doc"]["nvlink_speed"] == [26562] * 11 + [None] + [26562] * 6
    assert (r["check"]["status"], r["check"]["level"], r["check"]["value"]) == (
        "fail", "CRITICAL", {"links": 18, "up": 17, "down": [11]})


def test_an_nvml_error_on_the_speed_field_is_unknown_not_ok(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("8xH100-NVSwitch")
    with sim.edit() as doc:
        hardware.inject_in(doc, doc["gpus"][0], "nvml-error", {"function": "nvmlDeviceGetFieldValues", "code": 999})
    r = sim.run(READ_HEALTH)
    assert "nvlink_speed" in r["doc"]["errors"]
    assert (r["check"]["status"], r["check"]["level"]) == ("fail", "UNKNOWN")
    assert r["check"]["message"].startswith("could not read the NVLink speeds: ")


def test_a_pcie_pair_without_bridges_is_not_applicable(nvml_sim: Callable[..., Any]) -> None:
    sim = nvml_sim("2xH100-PCIe")
    with sim.edit() as doc:
        doc["gpus"][0]["nvlink"]["links"] = [0] * len(doc["gpus"][0]["nvlink"]["links"])
    r = sim.run(READ_HEALTH)
    assert (r["check"]["status"], r["check"]["level"], r["check"]["message"]) == (
        "ok", "PASS", "no NVLink bridge connected: all 12 NVLinks of the H100-PCIE-80GB inactive; not applicable "
        "(if one is fitted, reseat it)")
    assert json.dumps(r["check"]["value"]) == json.dumps({"links": 12, "up": 0, "down": list(range(12))})
