"""Threshold logic of plugins/module_utils/health_checks.py, as tables of (measurement, thresholds, expected).

The thresholds are what production uses: the module's ARGUMENT_SPEC validated by Ansible's own argument-spec
validator (defaults filled in exactly as AnsibleModule does), then the module's ``thresholds()``.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

_COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_checks as hc  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_commands as hcmd  # noqa: E402
from ansible_collections.gpufleet.nvidia.plugins.modules import gpu_health  # noqa: E402

HEALTHY_GPU: dict[str, Any] = {
    "index": 3,
    "uuid": "GPU-00000000-0000-4000-8000-000000000003",
    "pci_bus_id": "00000000:5D:00.0",
    "lost": False,
    "values": {
        "name": "NVIDIA H100 80GB HBM3",
        "brand": 14,  # NVML_BRAND_NVIDIA (nvml.h): what an H100 reports
        "vbios_version": "96.00.99.00.01",
        "persistence_mode": 1,
        "ecc_mode": {"current": True, "pending": True},
        "ecc": {"corrected_volatile": 0, "uncorrected_volatile": 0, "corrected_aggregate": 0,
                "uncorrected_aggregate": 0},
        "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": 0, "failure": 0},
        "pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16},
        "nvlink": [1] * 18,
        "nvlink_speed": [26562] * 18,  # NVLink 4's line rate, MB/s per link (nvlink_models.py cites it)
        # an HGX H100 GPU registered with the fabric (nvmlDeviceGetGpuFabricInfoV: Completed, Success)
        "fabric": {"state": "Completed", "status": 0, "clique_id": 7, "health_mask": 0x1AA,
                   "cluster_uuid": "9c6f5af3-53bf-49b5-a436-b66766c413c3"},
        "temperature": {"gpu": 33, "slowdown": 89, "shutdown": 92, "unreadable": {}},
        "clock_event_reasons": 0x1,
        "utilization_gpu": 0,
        "idle": True,
        "processes": [],
        "xid": [],
        "mig": {"enabled": False, "gpu_instances": []},
        "recovery_action": 0,  # NVML_GPU_RECOVERY_ACTION_NONE
    },
    "unsupported": ["retired_pages"],
    "errors": {},
}


def gpu_with(**changes: Any) -> dict[str, Any]:
    """A copy of HEALTHY_GPU with ``values`` keys replaced (``unsupported``/``errors`` given as such)."""
    gpu = copy.deepcopy(HEALTHY_GPU)
    for key, value in changes.items():
        if key in ("unsupported", "errors", "lost"):
            gpu[key] = value
        else:
            gpu["values"][key] = value
    return gpu


def th(**overrides: Any) -> dict[str, Any]:
    """The thresholds a module call with these parameters evaluates with (production's own path)."""
    result = ArgumentSpecValidator(gpu_health.ARGUMENT_SPEC).validate(overrides)
    assert result.error_messages == []
    return gpu_health.thresholds(result.validated_parameters)


def by_name(checks: list[dict], name: str) -> dict:
    found = [c for c in checks if c["name"] == name]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


# --------------------------------------------------------------------------------------------------- per-GPU table

GPU_CASES = [
    # (id, gpu changes, threshold overrides, check name, status, value)
    ("healthy-persistence", {}, {}, "persistence_mode", "ok", "enabled"),
    ("persistence-off", {"persistence_mode": 0}, {}, "persistence_mode", "fail", "disabled"),
    ("persistence-off-not-expected", {"persistence_mode": 0}, {"persistence_mode_expected": False},
     "persistence_mode", "ok", "disabled"),
    ("ecc-unc-0", {}, {}, "ecc_uncorrected_volatile", "ok", 0),
    ("ecc-unc-1", {"ecc": {"uncorrected_volatile": 1, "corrected_volatile": 0}}, {},
     "ecc_uncorrected_volatile", "fail", 1),
    ("ecc-unc-at-raised-limit", {"ecc": {"uncorrected_volatile": 2, "corrected_volatile": 0}},
     {"ecc_uncorrected_volatile_fail": 2}, "ecc_uncorrected_volatile", "ok", 2),
    ("ecc-cor-at-warn", {"ecc": {"uncorrected_volatile": 0, "corrected_volatile": 10000}}, {},
     "ecc_corrected_volatile", "ok", 10000),
    ("ecc-cor-over-warn", {"ecc": {"uncorrected_volatile": 0, "corrected_volatile": 10001}}, {},
     "ecc_corrected_volatile", "warn", 10001),
    ("ecc-cor-over-fail", {"ecc": {"uncorrected_volatile": 0, "corrected_volatile": 50000001}}, {},
     "ecc_corrected_volatile", "fail", 50000001),
    ("ecc-unsupported-no-ecc-board", {"unsupported": ["ecc", "ecc_mode"], "brand": 5}, {},
     "ecc_corrected_volatile", "ok", None),
    ("ecc-unsupported-data-centre", {"unsupported": ["ecc"]}, {}, "ecc_corrected_volatile", "fail", None),
    ("retired-na-ampere", {}, {}, "retired_pages", "ok", None),
    ("retired-pending", {"unsupported": [], "retired_pages": {"sbe": 0, "dbe": 1, "pending": True}}, {},
     "retired_pages", "fail", {"sbe": 0, "dbe": 1, "pending": True}),
    ("retired-10", {"unsupported": [], "retired_pages": {"sbe": 6, "dbe": 4, "pending": False}}, {},
     "retired_pages", "ok", {"sbe": 6, "dbe": 4, "pending": False}),
    ("retired-11", {"unsupported": [], "retired_pages": {"sbe": 7, "dbe": 4, "pending": False}}, {},
     "retired_pages", "warn", {"sbe": 7, "dbe": 4, "pending": False}),
    ("retired-62-full", {"unsupported": [], "retired_pages": {"sbe": 60, "dbe": 2, "pending": False}}, {},
     "retired_pages", "fail", {"sbe": 60, "dbe": 2, "pending": False}),
    ("remap-ok", {}, {}, "remapped_rows", "ok", {"corrected": 0, "uncorrected": 0, "pending": 0, "failure": 0}),
    ("remap-pending", {"remapped_rows": {"corrected": 0, "uncorrected": 1, "pending": 1, "failure": 0}}, {},
     "remapped_rows", "fail", {"corrected": 0, "uncorrected": 1, "pending": 1, "failure": 0}),
    ("remap-failure", {"remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": 0, "failure": 1}}, {},
     "remapped_rows", "fail", {"corrected": 0, "uncorrected": 0, "pending": 0, "failure": 1}),
    ("remap-512", {"remapped_rows": {"corrected": 3, "uncorrected": 512, "pending": 0, "failure": 0}}, {},
     "remapped_rows", "ok", {"corrected": 3, "uncorrected": 512, "pending": 0, "failure": 0}),
    ("remap-513", {"remapped_rows": {"corrected": 3, "uncorrected": 513, "pending": 0, "failure": 0}}, {},
     "remapped_rows", "fail", {"corrected": 3, "uncorrected": 513, "pending": 0, "failure": 0}),
    ("xid-none", {}, {}, "xid", "ok", []),
    ("xid-79", {"xid": [{"code": 79}]}, {}, "xid", "fail", [79]),
    ("xid-94-restart-app", {"xid": [{"code": 94}]}, {}, "xid", "warn", [94]),
    ("xid-94-ignored-by-param", {"xid": [{"code": 94}]}, {"xid_ignore": [94]}, "xid", "ok", []),
    ("xid-45-info", {"xid": [{"code": 45}]}, {}, "xid", "ok", [45]),
    ("xid-13-warn", {"xid": [{"code": 13}, {"code": 13}]}, {}, "xid", "warn", [13]),
    ("xid-13-critical-by-param", {"xid": [{"code": 13}]}, {"xid_critical": [13]}, "xid", "fail", [13]),
    ("xid-mixed", {"xid": [{"code": 31}, {"code": 48}, {"code": 94}]}, {}, "xid", "fail", [31, 48, 94]),
    ("recovery-none", {}, {}, "recovery_action", "ok", "none"),
    ("recovery-gpu-reset", {"recovery_action": 1}, {}, "recovery_action", "fail", "GPU reset"),
    ("recovery-node-reboot", {"recovery_action": 2}, {}, "recovery_action", "fail", "node reboot"),
    ("recovery-not-supported", {"unsupported": ["retired_pages", "recovery_action"]}, {}, "recovery_action", "ok",
     None),
    ("pcie-x16", {}, {}, "pcie_link_width", "ok", 16),
    ("pcie-x8", {"pcie": {"gen": 5, "max_gen": 5, "width": 8, "max_width": 16}}, {}, "pcie_link_width", "fail", 8),
    ("pcie-x8-warn-param", {"pcie": {"gen": 5, "max_gen": 5, "width": 8, "max_width": 16}},
     {"pcie_width_status": "warn"}, "pcie_link_width", "warn", 8),
    ("pcie-gen3-idle", {"pcie": {"gen": 3, "max_gen": 5, "width": 16, "max_width": 16}}, {},
     "pcie_link_gen", "ok", 3),
    ("pcie-gen3-busy", {"pcie": {"gen": 3, "max_gen": 5, "width": 16, "max_width": 16}, "idle": False}, {},
     "pcie_link_gen", "warn", 3),
    ("nvlink-all-up", {}, {}, "nvlink", "ok", {"links": 18, "up": 18, "down": []}),
    ("nvlink-2-down", {"nvlink": [1, 1, 0] + [1] * 15, "nvlink_speed": [26562, 26562, None] + [26562] * 15}, {},
     "nvlink", "fail", {"links": 18, "up": 17, "down": [2]}),
    ("nvlink-none", {"nvlink": [], "name": "NVIDIA L40S"}, {}, "nvlink", "ok", {"links": 0}),
    ("temp-33", {}, {}, "temperature", "ok", 33),
    ("temp-84-warn", {"temperature": {"gpu": 84, "slowdown": 89}}, {}, "temperature", "warn", 84),
    ("temp-89-fail", {"temperature": {"gpu": 89, "slowdown": 89}}, {}, "temperature", "fail", 89),
    ("temp-own-limit", {"temperature": {"gpu": 70, "slowdown": 89}}, {"temperature_fail_c": 70},
     "temperature", "fail", 70),
    ("clock-idle", {}, {}, "clock_events", "ok", ["gpu_idle"]),
    ("clock-sw-power-cap", {"clock_event_reasons": 0x4}, {}, "clock_events", "ok", ["sw_power_cap"]),
    ("clock-app-clocks", {"clock_event_reasons": 0x2}, {}, "clock_events", "ok", ["applications_clocks_setting"]),
    ("clock-sw-thermal", {"clock_event_reasons": 0x20}, {}, "clock_events", "warn", ["sw_thermal_slowdown"]),
    ("clock-hw-thermal", {"clock_event_reasons": 0x40}, {}, "clock_events", "fail", ["hw_thermal_slowdown"]),
    ("clock-hw-slowdown", {"clock_event_reasons": 0x8 | 0x4}, {}, "clock_events", "fail",
     ["sw_power_cap", "hw_slowdown"]),
    ("clock-power-brake", {"clock_event_reasons": 0x80}, {}, "clock_events", "fail", ["hw_power_brake_slowdown"]),
    ("procs-not-idle", {"processes": [{"pid": 7, "name": "python3", "used_memory_mib": 5}]}, {},
     "processes", "ok", [{"pid": 7, "name": "python3", "used_memory_mib": 5}]),
    ("procs-idle-foreign", {"processes": [{"pid": 7, "name": "python3", "used_memory_mib": 5}]},
     {"idle_expected": True}, "processes", "fail", [{"pid": 7, "name": "python3", "used_memory_mib": 5}]),
    ("procs-idle-mps-allowed", {"processes": [{"pid": 9, "name": "nvidia-cuda-mps-server", "used_memory_mib": 30}]},
     {"idle_expected": True}, "processes", "ok", []),
    ("model-any", {}, {}, "gpu_model", "ok", "NVIDIA H100 80GB HBM3"),
    ("model-match", {}, {"expected_gpu_models": ["h100"]}, "gpu_model", "ok", "NVIDIA H100 80GB HBM3"),
    ("model-mismatch", {}, {"expected_gpu_models": ["A100", "H200"]}, "gpu_model", "fail", "NVIDIA H100 80GB HBM3"),
    ("read-error", {"errors": {"remapped_rows": "nvmlDeviceGetRemappedRows failed on GPU 3: Unknown Error"}}, {},
     "remapped_rows", "fail", None),
    ("lost", {"lost": True}, {}, "gpu_lost", "fail", True),
]


@pytest.mark.parametrize(("changes", "overrides", "name", "status", "value"),
                         [c[1:] for c in GPU_CASES], ids=[c[0] for c in GPU_CASES])
def test_gpu_check_table(changes: dict, overrides: dict, name: str, status: str, value: Any) -> None:
    checks = hc.check_gpu(gpu_with(**changes), th(**overrides), None)
    got = by_name(checks, name)
    assert (got["status"], got["value"]) == (status, value), got["message"]
    assert got["gpu"] == {"index": 3, "uuid": HEALTHY_GPU["uuid"], "pci_bus_id": "00000000:5D:00.0"}
    assert got["threshold"] is not None or name in {"gpu_model", "processes"}


def test_healthy_gpu_every_check_ok() -> None:
    checks = hc.check_gpu(gpu_with(), th(idle_expected=True, expected_gpu_models=["H100"]), None)
    assert {c["status"] for c in checks} == {"ok"}
    assert {c["name"] for c in checks} == {
        "gpu_lost", "gpu_model", "persistence_mode", "ecc_mode", "ecc_uncorrected_volatile", "ecc_corrected_volatile",
        "retired_pages", "remapped_rows", "xid", "pcie_link_width", "pcie_link_gen", "nvlink", "fabric",
        "temperature", "clock_events", "processes", "mig_layout", "recovery_action"}


def test_lost_gpu_reports_only_gpu_lost() -> None:
    checks = hc.check_gpu(gpu_with(lost=True), th(), None)
    assert [(c["name"], c["status"]) for c in checks] == [("gpu_lost", "fail")]
    assert checks[0]["message"] == ("the GPU has fallen off the bus (NVML: GPU is lost); drain the node, reboot, "
                                    "and replace the GPU if it recurs")


def test_read_error_message_names_the_metric() -> None:
    gpu = gpu_with(errors={"pcie": "nvmlDeviceGetCurrPcieLinkWidth failed on GPU 3: Unknown Error"})
    got = by_name(hc.check_gpu(gpu, th(), None), "pcie_link_width")
    assert got["message"] == "could not read pcie: nvmlDeviceGetCurrPcieLinkWidth failed on GPU 3: Unknown Error"


def test_pcie_width_message() -> None:
    gpu = gpu_with(pcie={"gen": 5, "max_gen": 5, "width": 8, "max_width": 16})
    got = by_name(hc.check_gpu(gpu, th(), None), "pcie_link_width")
    assert got["message"] == "PCIe link trained at x8, the GPU supports x16; reseat the GPU or riser"
    assert got["threshold"] == 16


# --------------------------------------------------------------------------------------------------- MIG layout

LAYOUT = {"enabled": True, "gpu_instances": [
    {"profile_name": "3g.40gb", "start": 0, "size": 4, "compute_instances": [{"name": "3g.40gb"}]},
    {"profile_name": "3g.40gb", "start": 4, "size": 4, "compute_instances": [{"name": "3g.40gb"}]}]}

MIG_CASES = [
    ("no-record", {"enabled": False, "gpu_instances": []}, None, "ok"),
    ("as-recorded", LAYOUT, LAYOUT, "ok"),
    ("order-does-not-matter", {"enabled": True, "gpu_instances": list(reversed(LAYOUT["gpu_instances"]))},
     LAYOUT, "ok"),
    ("mode-off", {"enabled": False, "gpu_instances": []}, LAYOUT, "fail"),
    ("one-missing", {"enabled": True, "gpu_instances": LAYOUT["gpu_instances"][:1]}, LAYOUT, "fail"),
    ("recorded-disabled", {"enabled": False, "gpu_instances": []}, {"current": False, "gpu_instances": []}, "ok"),
]


@pytest.mark.parametrize(("found", "recorded", "status"), [c[1:] for c in MIG_CASES], ids=[c[0] for c in MIG_CASES])
def test_mig_layout_table(found: dict, recorded: dict | None, status: str) -> None:
    got = by_name(hc.check_gpu(gpu_with(mig=found), th(), recorded), "mig_layout")
    assert got["status"] == status, got


# --------------------------------------------------------------------------------------------------- host table


def host(gpus: list[dict] | None = None, **extra: Any) -> dict[str, Any]:
    doc = {"driver_version": "570.172.08", "cuda_version": "12.8", "gpu_count": 1,
           "gpus": gpus if gpus is not None else [gpu_with()]}
    doc.update(extra)
    return doc


HOST_CASES = [
    ("count-not-set", host(), {}, "gpu_count", "ok", 1),
    ("count-match", host(), {"expected_gpu_count": 1}, "gpu_count", "ok", 1),
    ("count-missing", host(gpu_count=7), {"expected_gpu_count": 8}, "gpu_count", "fail", 7),
    ("driver-branch", host(), {"expected_driver_version": "570"}, "driver_version", "ok", "570.172.08"),
    ("driver-exact", host(), {"expected_driver_version": "570.172.08"}, "driver_version", "ok", "570.172.08"),
    ("driver-not-prefix-digit", host(), {"expected_driver_version": "57"}, "driver_version", "fail", "570.172.08"),
    ("driver-other", host(), {"expected_driver_version": "550"}, "driver_version", "fail", "570.172.08"),
    ("fm-not-expected", host(), {}, "fabric_manager", "ok", None),
    ("fm-active", host(fabric_manager="active"), {"nvswitch_expected": True}, "fabric_manager", "ok", "active"),
    ("fm-inactive", host(fabric_manager="inactive"), {"nvswitch_expected": True}, "fabric_manager", "fail",
     "inactive"),
    ("vbios-same", host([gpu_with(), gpu_with()]), {}, "vbios_consistency", "ok", ["96.00.99.00.01"]),
    ("vbios-mixed", host([gpu_with(), gpu_with(vbios_version="96.00.74.00.11")]), {}, "vbios_consistency", "fail",
     ["96.00.74.00.11", "96.00.99.00.01"]),
    ("vbios-mixed-models-ok", host([gpu_with(), gpu_with(name="NVIDIA L40S", vbios_version="95.02.5D.00.01")]), {},
     "vbios_consistency", "ok", ["95.02.5D.00.01", "96.00.99.00.01"]),
    ("vbios-expected-other", host(), {"expected_vbios_version": "96.00.74.00.11"}, "vbios_consistency", "fail",
     ["96.00.99.00.01"]),
]


@pytest.mark.parametrize(("meas", "overrides", "name", "status", "value"),
                         [c[1:] for c in HOST_CASES], ids=[c[0] for c in HOST_CASES])
def test_host_check_table(meas: dict, overrides: dict, name: str, status: str, value: Any) -> None:
    got = by_name(hc.evaluate_host(meas, th(**overrides)), name)
    assert (got["status"], got["value"], got["gpu"]) == (status, value, None), got["message"]


def test_gpu_count_message() -> None:
    got = by_name(hc.evaluate_host(host(gpu_count=7), th(expected_gpu_count=8)), "gpu_count")
    assert got["message"] == "7 GPU(s) found, 8 expected; check lspci -d 10de: and the kernel log"


def test_nvml_init_error_is_one_host_fail() -> None:
    checks = hc.evaluate_host({"init_error": "nvmlInit failed: Driver Not Loaded (NVML error 9)"}, th())
    assert checks == [{"name": "nvml", "gpu": None, "status": "fail", "level": "UNKNOWN", "action": "none",
                       "value": None, "threshold": "NVML initialised", "evidence": None,
                       "message": "nvmlInit failed: Driver Not Loaded (NVML error 9)"}]


@pytest.mark.parametrize(("statuses", "expected"), [
    ([], "ok"), (["ok", "ok"], "ok"), (["ok", "warn"], "warn"), (["warn", "fail", "ok"], "fail")])
def test_worst(statuses: list[str], expected: str) -> None:
    assert hc.worst(statuses) == expected


def test_summarize_names_failing_gpu() -> None:
    checks = hc.evaluate_host(host([gpu_with(nvlink=[1, 0])]), th())
    summary = hc.summarize(checks)
    assert summary["status"] == "fail"
    assert summary["failed"] == ["nvlink[gpu 3]"]
    assert summary["counts"]["fail"] == 1


@pytest.mark.parametrize(("mask", "names"), [
    (0, []), (0x1, ["gpu_idle"]), (0x45, ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]),
    (0x1000, ["0x1000"])])
def test_decode_clock_events(mask: int, names: list[str]) -> None:
    assert hc.decode_clock_events(mask) == names


def test_thresholds_keep_given_values_and_drop_operational_options() -> None:
    got = th(xid_window_s=60, temperature_fail_c=0, fail_on="never")
    assert got["xid_window_s"] == 60
    assert got["temperature_fail_c"] == 0
    assert "fail_on" not in got


SMOKE_CASES = [
    ("all-listed", 0, "GPU 0: NVIDIA L40S (UUID: GPU-a)\nGPU 1: NVIDIA L40S (UUID: GPU-b)\n", "", 2, "ok",
     "the GPU container sees 2 GPU(s)"),
    ("one-missing", 0, "GPU 0: NVIDIA L40S (UUID: GPU-a)\n", "", 2, "fail",
     "the GPU container sees 1 GPU(s), the host has 2"),
    ("engine-error", 125, "", "Error: unresolvable CDI devices nvidia.com/gpu=all\n", 2, "fail",
     "the GPU container exited with status 125: Error: unresolvable CDI devices nvidia.com/gpu=all"),
]


@pytest.mark.parametrize(("rc", "out", "err", "count", "status", "message"), [c[1:] for c in SMOKE_CASES],
                         ids=[c[0] for c in SMOKE_CASES])
def test_container_smoke_table(rc: int, out: str, err: str, count: int, status: str, message: str) -> None:
    got = hcmd.evaluate_container_smoke(rc, out, err, count)
    assert (got["status"], got["message"], got["threshold"]) == (status, message, count)
