"""Fail closed: a health check that cannot read what it needs fails with the reason, never says ``ok`` (issue 13).

Each row is a defect found on ``main``: ECC off on a data-centre GPU passed as "not applicable", a GPU above its
shutdown temperature passed when the slowdown threshold was unreadable, an unreadable kernel log passed as "no XID
event in the window", ``temperature_fail_c: 0`` was ignored, a reading that was never made passed. The thresholds
are production's (the module's argument spec through Ansible's validator, as in test_health_checks.py); NVML brand
numbers are nvml.h's ``nvmlBrandType_t`` (2 Tesla, 5 GeForce, 14 NVIDIA data centre).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

_HERE = Path(__file__).resolve().parent
for _path in (_HERE, _HERE.parents[1] / "collections"):  # the tables' healthy GPU and thresholds; the collection
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_checks as hc  # noqa: E402
from test_health_checks import by_name, gpu_with, host, th  # noqa: E402

ECC_OFF = {"current": False, "pending": False}
ECC_ON = {"current": True, "pending": True}
BRAND_GEFORCE = 5
BRAND_TESLA = 2

# (id, gpu changes, threshold overrides, check, status, message)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], str, str, str]] = [
    # -- ECC mode against the expected mode
    ("ecc-off-data-centre", {"ecc_mode": ECC_OFF}, {}, "ecc_mode", "fail",
     "ECC is disabled but expected enabled (a data-centre GPU runs with ECC); set it with nvidia-smi -i <gpu> -e 1 "
     "and reset the GPU"),
    ("ecc-off-tesla-t4", {"ecc_mode": ECC_OFF, "brand": BRAND_TESLA}, {}, "ecc_mode", "fail",
     "ECC is disabled but expected enabled (a data-centre GPU runs with ECC); set it with nvidia-smi -i <gpu> -e 1 "
     "and reset the GPU"),
    ("ecc-off-enable-pending", {"ecc_mode": {"current": False, "pending": True}}, {}, "ecc_mode", "fail",
     "ECC is disabled but expected enabled (a data-centre GPU runs with ECC) (the change is pending a GPU reset); "
     "set it with nvidia-smi -i <gpu> -e 1 and reset the GPU"),
    ("ecc-off-brand-unreadable", {"ecc_mode": ECC_OFF, "errors": {"brand": "nvmlDeviceGetBrand failed: Unknown"}},
     {}, "ecc_mode", "fail",
     "ECC is disabled but expected enabled (the GPU's brand could not be read, so ECC is expected like on a "
     "data-centre GPU); set it with nvidia-smi -i <gpu> -e 1 and reset the GPU"),
    ("ecc-off-geforce-auto", {"ecc_mode": ECC_OFF, "brand": BRAND_GEFORCE}, {}, "ecc_mode", "ok", "ECC disabled"),
    ("ecc-off-expected-any", {"ecc_mode": ECC_OFF}, {"ecc_mode_expected": "any"}, "ecc_mode", "ok", "ECC disabled"),
    ("ecc-on-expected-disabled", {"ecc_mode": ECC_ON}, {"ecc_mode_expected": "disabled"}, "ecc_mode", "fail",
     "ECC is enabled but expected disabled (ecc_mode_expected is disabled); set it with nvidia-smi -i <gpu> -e 0 "
     "and reset the GPU"),
    ("ecc-disable-pending", {"ecc_mode": {"current": True, "pending": False}}, {}, "ecc_mode", "warn",
     "ECC is enabled and will be disabled after a GPU reset"),
    ("ecc-mode-unreadable", {"errors": {"ecc_mode": "nvmlDeviceGetEccMode failed on GPU 3: Unknown Error"}}, {},
     "ecc_mode", "fail", "could not read ecc_mode: nvmlDeviceGetEccMode failed on GPU 3: Unknown Error"),
    ("ecc-unsupported-but-expected", {"unsupported": ["ecc_mode", "ecc"]}, {"ecc_mode_expected": "enabled"},
     "ecc_mode", "fail", "ECC is expected enabled but this GPU does not support ECC (NVML: not supported)"),
    ("ecc-counts-missing-data-centre", {"unsupported": ["ecc"]}, {}, "ecc_uncorrected_volatile", "fail",
     "ECC error counts are not available (NVML: not supported) on a GPU that should count them (a data-centre GPU "
     "runs with ECC)"),
    # -- both temperature thresholds
    ("above-shutdown-slowdown-unsupported",
     {"temperature": {"gpu": 95, "slowdown": None, "shutdown": 92, "unreadable": {"slowdown": "not supported"}}},
     {}, "temperature", "fail",
     "95 C reached the shutdown temperature 92 C (slowdown threshold unreadable: not supported)"),
    ("above-shutdown-slowdown-error",
     {"temperature": {"gpu": 93, "slowdown": None, "shutdown": 92,
                      "unreadable": {"slowdown": "nvmlDeviceGetTemperatureThreshold failed: Unknown Error"}}},
     {}, "temperature", "fail",
     "93 C reached the shutdown temperature 92 C (slowdown threshold unreadable: nvmlDeviceGetTemperatureThreshold "
     "failed: Unknown Error)"),
    ("above-shutdown-own-limit-higher", {"temperature": {"gpu": 93, "slowdown": 89, "shutdown": 92}},
     {"temperature_fail_c": 100}, "temperature", "fail", "93 C reached the shutdown temperature 92 C"),
    ("no-limit-known",
     {"temperature": {"gpu": 40, "slowdown": None, "shutdown": None,
                      "unreadable": {"slowdown": "not supported", "shutdown": "not supported"}}},
     {}, "temperature", "fail",
     "40 C but no fail temperature is known (shutdown threshold unreadable: not supported; slowdown threshold "
     "unreadable: not supported); set temperature_fail_c"),
    ("slowdown-unreadable-below-shutdown",
     {"temperature": {"gpu": 40, "slowdown": None, "shutdown": 92, "unreadable": {"slowdown": "not supported"}}},
     {}, "temperature", "fail",
     "40 C but no fail temperature is known (slowdown threshold unreadable: not supported); set temperature_fail_c"),
    ("shutdown-unreadable-reported",
     {"temperature": {"gpu": 40, "slowdown": 89, "shutdown": None, "unreadable": {"shutdown": "not supported"}}},
     {}, "temperature", "warn", "40 C, below 89 C (shutdown threshold unreadable: not supported)"),
    ("temperature-not-reported", {"unsupported": ["retired_pages", "temperature"]}, {}, "temperature", "fail",
     "the GPU temperature is not reported by NVML; cannot check it"),
    # -- zero is a threshold
    ("temperature-fail-c-0", {}, {"temperature_fail_c": 0}, "temperature", "fail", "33 C reached the limit 0 C"),
    ("temperature-margin-0", {"temperature": {"gpu": 88, "slowdown": 89, "shutdown": 92}},
     {"temperature_warn_margin_c": 0}, "temperature", "ok", "88 C"),
    ("ecc-corrected-warn-0", {"ecc": {"uncorrected_volatile": 0, "corrected_volatile": 1}},
     {"ecc_corrected_volatile_warn": 0}, "ecc_corrected_volatile", "warn",
     "1 correctable ECC errors exceed 0; watch this GPU"),
    ("remapped-uncorrectable-0", {"remapped_rows": {"corrected": 0, "uncorrected": 1, "pending": 0, "failure": 0}},
     {"remapped_rows_uncorrectable_fail": 0}, "remapped_rows", "fail",
     "1 rows remapped for uncorrectable errors exceed 0"),
    ("retired-pages-warn-0", {"unsupported": [], "retired_pages": {"sbe": 1, "dbe": 0, "pending": False}},
     {"retired_pages_warn": 0}, "retired_pages", "warn", "1 retired pages exceed 0"),
    # -- a reading that was never made, or that does not parse
    ("metric-not-read", {"nvlink": None}, {}, "nvlink", "fail", "nvlink was not read; cannot check it"),
    ("malformed-pcie", {"pcie": {"gen": 5}}, {}, "pcie_link_width", "fail",
     "could not evaluate pcie_link_width: malformed reading (KeyError: 'width')"),
]


@pytest.mark.parametrize(("changes", "overrides", "name", "status", "message"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_fail_closed_table(changes: dict[str, Any], overrides: dict[str, Any], name: str, status: str,
                           message: str) -> None:
    got = by_name(hc.check_gpu(gpu_with(**changes), th(**overrides), None), name)
    assert (got["status"], got["message"]) == (status, message)


def test_identity_error_fails_every_check_that_was_not_read() -> None:
    """A GPU whose handle or UUID could not be read has no readings: nothing of it may pass."""
    gpu = {"index": 2, "uuid": None, "pci_bus_id": None, "lost": False, "values": {"idle": False},
           "unsupported": [], "errors": {"identity": "nvmlDeviceGetUUID failed on GPU 2: Unknown Error"}}
    checks = hc.check_gpu(gpu, th(), None)
    passing = sorted(c["name"] for c in checks if c["status"] == "ok")
    assert passing == ["gpu_lost", "gpu_model", "mig_layout"]


KERNEL_ERROR = "journalctl -k failed (rc 1): Failed to open journal: Permission denied"


@pytest.mark.parametrize(("xids", "status", "message"), [
    ([], "fail",
     f"the kernel log could not be read ({KERNEL_ERROR}), so XIDs of the last 7200 s are unknown (no XID seen "
     "through NVML); make the journal, /dev/kmsg or dmesg readable, or set xid_kernel_log to false to rely on "
     "NVML events of the moment only"),
    ([{"code": 13}], "fail",
     f"the kernel log could not be read ({KERNEL_ERROR}), so XIDs of the last 7200 s are unknown (seen "
     "through NVML: XID 13 (Graphics Engine Exception): restart_app); make "
     "the journal, /dev/kmsg or dmesg readable, or set xid_kernel_log to false to rely on NVML events of the "
     "moment only"),
    ([{"code": 79}], "fail",
     "XID 79 (GPU has fallen off the bus): reboot in the last 7200 s (NVIDIA's XID catalogue)"),
], ids=["nothing-seen", "warn-level-seen", "critical-seen"])
def test_unreadable_kernel_log_is_not_an_empty_window(xids: list[dict], status: str, message: str) -> None:
    meas = host([gpu_with(xid=xids)], xid_sources=[{"source": "nvml", "error": None, "wait_ms": 100},
                                                   {"source": "kernel", "error": KERNEL_ERROR, "window_s": 7200}])
    got = by_name(hc.evaluate_host(meas, th()), "xid")
    assert (got["status"], got["message"]) == (status, message)


def test_kernel_log_read_is_an_empty_window() -> None:
    meas = host(xid_sources=[{"source": "nvml", "error": None, "wait_ms": 100},
                             {"source": "kernel", "error": None, "read_from": "kmsg", "window_s": 7200}])
    got = by_name(hc.evaluate_host(meas, th()), "xid")
    assert (got["status"], got["message"]) == ("ok", "no XID event in the window (kernel log: kmsg)")


NVML_WAIT_ERROR = "nvmlEventSetWait_v2 failed: Unknown Error"


@pytest.mark.parametrize(("kernel_xids", "status", "level", "message"), [
    ([], "warn", "WARNING",
     f"NVML's XID events could not be read ({NVML_WAIT_ERROR}); the kernel log (journal) shows no XID in the last "
     "7200 s"),
    ([{"code": 79, "source": "kernel", "time": 1.0}], "fail", "CRITICAL",
     "XID 79 (GPU has fallen off the bus): reboot in the last 7200 s (NVIDIA's XID catalogue) (kernel log: journal)"),
], ids=["kernel-empty", "kernel-xid-79"])
def test_failed_nvml_wait_keeps_what_the_kernel_log_read(kernel_xids: list[dict], status: str, level: str,
                                                         message: str) -> None:
    """Issue 27: an NVML event wait that fails no longer drops the XIDs the kernel log gave, nor hides them."""
    gpu = gpu_with()
    del gpu["values"]["xid"]
    gpu["errors"]["xid"] = NVML_WAIT_ERROR
    if kernel_xids:
        gpu["values"]["xid"] = kernel_xids
    meas = host([gpu], xid_sources=[{"source": "nvml", "error": NVML_WAIT_ERROR, "wait_ms": 100},
                                    {"source": "kernel", "error": None, "read_from": "journal", "window_s": 7200}])
    got = by_name(hc.evaluate_host(meas, th()), "xid")
    assert (got["status"], got["level"], got["message"]) == (status, level, message)


def test_failed_nvml_wait_without_a_kernel_log_is_unknown() -> None:
    gpu = gpu_with()
    del gpu["values"]["xid"]
    gpu["errors"]["xid"] = NVML_WAIT_ERROR
    got = by_name(hc.evaluate_host(host([gpu], xid_sources=[]), th()), "xid")
    assert (got["status"], got["level"], got["message"]) == ("fail", "UNKNOWN",
                                                             f"could not read xid: {NVML_WAIT_ERROR}")
