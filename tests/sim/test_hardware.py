"""Hardware operations on state documents: reset rules, clients, processes, events, faults and their clearing."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import make_state, write_state

from gpufleet_sim import hardware, store

DEAD = 2**22 + 12345  # above the default pid_max: never alive


def _alive(pid: int) -> bool:
    return pid != DEAD


@pytest.fixture
def doc() -> dict[str, Any]:
    return make_state(2)


@pytest.mark.parametrize(
    ("ident", "index"),
    [("0", 0), (1, 1), ("00000000:17:00.0", 1), ("0000:17:00.0", 1), ("17:00.0", 1), ("1420922000001", 1)],
)
def test_find_gpu(doc: dict[str, Any], ident: str | int, index: int) -> None:
    assert hardware.find_gpu(doc, ident)["index"] == index


def test_find_gpu_by_uuid_and_unknown(doc: dict[str, Any]) -> None:
    assert hardware.find_gpu(doc, doc["gpus"][1]["uuid"].upper())["index"] == 1
    with pytest.raises(hardware.HardwareError, match="no GPU matches '7'"):
        hardware.find_gpu(doc, "7")


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda d: d["gpus"][0].update(lost=True), "GPU is lost"),
        (lambda d: hardware.add_process_in(d["gpus"][0], 4242), "In use by another client"),
        (lambda d: d["clients"].append({"pid": os.getpid(), "name": "nvidia-persistenced"}),
         "In use by another client"),
        (lambda d: d["clients"].append({"pid": DEAD, "name": "gone"}), None),
        (lambda d: hardware.add_process_in(d["gpus"][1], 4242), None),
    ],
)
def test_reset_blocker(doc: dict[str, Any], setup: Any, reason: str | None) -> None:
    setup(doc)
    assert hardware.reset_blocker(doc, doc["gpus"][0], _alive) == reason


def test_reset_applies_pending_state(doc: dict[str, Any]) -> None:
    gpu = doc["gpus"][0]
    gpu["mig"]["pending"] = 1
    gpu["ecc"]["volatile"]["uncorrected"]["dram"] = 3
    gpu["ecc"]["aggregate"]["uncorrected"]["dram"] = 3
    hardware.inject_in(doc, gpu, "remap-pending", {})
    hardware.reset_in(doc, gpu, _alive)
    assert gpu["mig"]["current"] == 1
    assert gpu["ecc"]["volatile"]["uncorrected"]["dram"] == 0
    assert gpu["ecc"]["aggregate"]["uncorrected"]["dram"] == 3
    assert gpu["remapped_rows"]["pending"] == 0
    assert gpu["remapped_rows"]["uncorrected"] == 1
    assert "faults" not in gpu or "remap-pending" not in gpu["faults"]


def test_reset_refused_message(doc: dict[str, Any]) -> None:
    hardware.add_process_in(doc["gpus"][0], 99)
    with pytest.raises(hardware.ResetRefused) as info:
        hardware.reset_in(doc, doc["gpus"][0], _alive)
    assert str(info.value) == "GPU 00000000:07:00.0: In use by another client"


def test_reset_wrapper_is_all_or_nothing(tmp_path: Path) -> None:
    doc = make_state(2)
    doc["gpus"][0]["mig"]["pending"] = 1
    doc["gpus"][1]["lost"] = True
    path = write_state(tmp_path / "state.json", doc)
    with pytest.raises(hardware.ResetRefusedAll) as info:
        hardware.reset(None, path)
    assert [(r.bus_id, r.reason) for r in info.value.refusals] == [("00000000:17:00.0", "GPU is lost")]
    assert store.load(path)["gpus"][0]["mig"]["current"] == 0
    assert hardware.reset("0", path) == ["00000000:07:00.0"]
    assert store.load(path)["gpus"][0]["mig"]["current"] == 1


def test_clients_register_and_prune(doc: dict[str, Any]) -> None:
    doc["clients"] = [{"pid": DEAD, "name": "stale"}, {"pid": 10, "name": "old name"}]
    hardware.register_client_in(doc, 10, "nv-hostengine", _alive)
    assert doc["clients"] == [{"pid": 10, "name": "nv-hostengine"}]
    hardware.unregister_client_in(doc, 10)
    assert doc["clients"] == []


def test_processes_account_memory(doc: dict[str, Any]) -> None:
    gpu = doc["gpus"][0]
    hardware.add_process_in(gpu, 7, "train.py", 1024)
    assert gpu["memory"]["used_mib"] == 1024
    with pytest.raises(hardware.HardwareError, match="process 7 already runs on GPU 0"):
        hardware.add_process_in(gpu, 7)
    with pytest.raises(hardware.HardwareError, match="GPU 0 has no GPU instance 1"):
        hardware.add_process_in(gpu, 8, gi_id=1, ci_id=0)
    hardware.remove_process_in(gpu, 7)
    assert gpu["memory"]["used_mib"] == 0
    with pytest.raises(hardware.HardwareError, match="no process 7 on GPU 0"):
        hardware.remove_process_in(gpu, 7)


def test_events_have_monotonic_seq(doc: dict[str, Any]) -> None:
    assert hardware.append_event_in(doc, doc["gpus"][0], 79) == 1
    assert hardware.append_event_in(doc, doc["gpus"][1], 48) == 2
    assert doc["event_seq"] == 2
    assert hardware.xid_codes(doc["gpus"][1]) == [48]
    assert doc["gpus"][0]["events"][0]["gi_id"] == 0xFFFFFFFF


@pytest.mark.parametrize(
    ("fault", "args", "check"),
    [
        ("xid", {"code": 79}, lambda g: hardware.xid_codes(g) == [79]),
        ("ecc-uncorrectable", {"count": 2},
         lambda g: g["ecc"]["volatile"]["uncorrected"]["dram"] == 2 and hardware.xid_codes(g) == [48]),
        ("remap-pending", {}, lambda g: g["remapped_rows"]["pending"] == 1),
        ("remap-failure", {}, lambda g: g["remapped_rows"]["failure"] == 1),
        ("pcie-downgrade", {}, lambda g: (g["pcie"]["gen"], g["pcie"]["width"]) == (2, 8)),
        ("pcie-downgrade", {"gen": 3}, lambda g: (g["pcie"]["gen"], g["pcie"]["width"]) == (3, 16)),
        ("nvlink-down", {"link": 2}, lambda g: g["nvlink"]["links"][2] == 0 and sum(g["nvlink"]["links"]) == 11),
        ("thermal-slowdown", {},
         lambda g: g["clock_event_reasons"] == 0x40 and g["temperature"]["gpu"] == g["temperature"]["slowdown"]),
        ("fallen-off-bus", {}, lambda g: g["lost"] is True and hardware.xid_codes(g) == [79]),
        ("nvml-error", {"function": "nvmlDeviceGetMemoryInfo", "code": 15},
         lambda g: g["inject"] == {"nvmlDeviceGetMemoryInfo": 15}),
        ("process", {"pid": 31337}, lambda g: [p["pid"] for p in g["processes"]] == [31337]),
    ],
)
def test_fault_inject_then_clear_restores(doc: dict[str, Any], fault: str, args: dict[str, Any],
                                          check: Any) -> None:
    healthy = copy.deepcopy(doc["gpus"][0])
    hardware.inject_in(doc, doc["gpus"][0], fault, args)
    assert check(doc["gpus"][0])
    assert hardware.active_faults(doc) == {"0": [fault]}
    assert hardware.clear_in(doc, doc["gpus"], fault) == [f"GPU 0: {fault}"]
    assert doc["gpus"][0] == healthy


def test_system_nvml_error_and_clear_all(doc: dict[str, Any]) -> None:
    hardware.inject_in(doc, None, "nvml-error", {"function": "nvmlInit", "code": 9})
    hardware.inject_in(doc, doc["gpus"][1], "xid", {"code": 13})
    assert doc["inject"] == {"nvmlInit": 9}
    assert hardware.active_faults(doc) == {"system": ["nvml-error"], "1": ["xid"]}
    cleared = hardware.clear_in(doc, doc["gpus"])
    assert cleared == ["GPU 1: xid", "system: nvml-error"]
    assert doc["inject"] == {}
    assert hardware.active_faults(doc) == {}


@pytest.mark.parametrize(
    ("fault", "args", "message"),
    [
        ("nvlink-down", {"link": 12}, "GPU 0 has no NVLink 12"),
        ("nvml-error", {"function": "cudaMalloc", "code": 2}, "'cudaMalloc' is not an NVML function name"),
        ("melt", {}, "unknown fault 'melt'"),
    ],
)
def test_fault_errors(doc: dict[str, Any], fault: str, args: dict[str, Any], message: str) -> None:
    with pytest.raises(hardware.HardwareError, match=message):
        hardware.inject_in(doc, doc["gpus"][0], fault, args)


def test_wrappers_through_the_file(tmp_path: Path) -> None:
    path = write_state(tmp_path / "state.json", make_state(1))
    hardware.register_client(os.getpid(), "pytest", path)
    assert store.load(path)["clients"] == [{"pid": os.getpid(), "name": "pytest"}]
    hardware.unregister_client(os.getpid(), path)
    assert hardware.inject("thermal-slowdown", "0", {}, path) == ["HW thermal slowdown on GPU 0"]
    assert hardware.append_event(0, 31, path) == 1
    hardware.add_process(0, 555, path=path)
    hardware.remove_process(0, 555, path=path)
    assert hardware.clear(None, None, path) == ["GPU 0: thermal-slowdown"]
    assert store.load(path)["gpus"][0]["clock_event_reasons"] == 1
