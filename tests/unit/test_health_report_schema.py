"""The published JSON schema of the health report (src/gpufleet/schemas/health_report.schema.json) holds for every
report the module builds: healthy, faulty, NVML down, and arbitrary measurement documents (hypothesis)."""

from __future__ import annotations

import copy
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings

_HERE = Path(__file__).resolve().parent
for _path in (_HERE, _HERE.parents[1] / "collections"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from ansible_collections.gpufleet.nvidia.plugins.modules import gpu_health  # noqa: E402
from test_health_checks import HEALTHY_GPU, gpu_with, th  # noqa: E402
from test_health_properties import THRESHOLDS, hosts  # noqa: E402

SCHEMA = json.loads(resources.files("gpufleet").joinpath("schemas/health_report.schema.json").read_text("utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _host(*gpus: dict[str, Any]) -> dict[str, Any]:
    return {"driver_version": "570.172.08", "cuda_version": "12.8", "gpu_count": len(gpus), "gpus": list(gpus),
            "xid_sources": [{"source": "nvml", "error": None, "wait_ms": 100}]}


def _report(meas: dict[str, Any], **over: Any) -> dict[str, Any]:
    return gpu_health.build_report(meas, th(**over), [])


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


REPORTS = [
    ("healthy", lambda: _report(_host(HEALTHY_GPU))),
    ("xid-95-ten-thousand", lambda: _report(_host(gpu_with(xid=[{"code": 95, "source": "kernel", "time": 1.0}]
                                                            * 10000)))),
    ("lost-gpu", lambda: _report(_host(dict(copy.deepcopy(HEALTHY_GPU), lost=True)))),
    ("nvml-down", lambda: _report({"init_error": "nvmlInit failed: Driver Not Loaded", "gpus": [],
                                   "xid_sources": []})),
]


@pytest.mark.parametrize("build", [r[1] for r in REPORTS], ids=[r[0] for r in REPORTS])
def test_reports_validate(build: Any) -> None:
    VALIDATOR.validate(build())


def test_the_schema_refuses_a_green_level_on_a_failing_check() -> None:
    report = _report(_host(HEALTHY_GPU))
    report["checks"][0] = dict(report["checks"][0], status="fail", level="PASS")
    assert not VALIDATOR.is_valid(report)


def test_ten_thousand_xid_95_are_one_evidence_entry_and_a_critical_host() -> None:
    report = _report(_host(gpu_with(xid=[{"code": 95}] * 10000)))
    xid = next(c for c in report["checks"] if c["name"] == "xid")
    assert [(e["code"], e["count"]) for e in xid["evidence"]] == [(95, 10000)]
    assert (report["level"], report["action"], report["gpus"][0]["level"]) == ("CRITICAL", "reset_gpu", "CRITICAL")


def test_an_unreadable_check_keeps_the_host_from_pass() -> None:
    report = _report(_host(gpu_with(errors={"nvlink": "nvmlDeviceGetNvLinkState failed: Unknown Error"})))
    assert (report["status"], report["level"]) == ("fail", "UNKNOWN")


# Arbitrary measurement documents carry values of any type in the fields the report echoes from NVML (driver
# version, GPU count, identities); the verdict part of the report must hold whatever they contain.
VERDICT_KEYS = ("status", "level", "action", "counts", "failed")
VERDICT_VALIDATOR = jsonschema.Draft202012Validator(
    {**SCHEMA, "required": list(VERDICT_KEYS), "properties": {k: SCHEMA["properties"][k] for k in VERDICT_KEYS}})
CHECK_VALIDATOR = jsonschema.Draft202012Validator(
    {**SCHEMA, "$ref": "#/$defs/check", "required": [], "properties": {}})


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(meas=hosts(), overrides=THRESHOLDS)
def test_any_reports_verdict_validates(meas: dict[str, Any], overrides: dict[str, Any]) -> None:
    report = _report(meas, **overrides)
    VERDICT_VALIDATOR.validate(report)
    for check in report["checks"]:
        CHECK_VALIDATOR.validate(dict(check, gpu=None))


def test_a_negative_xid_code_is_a_malformed_reading_not_an_unknown_xid() -> None:
    """NVML's event data and the kernel's "Xid (...): N" are unsigned; -1 means the reading is broken (UNKNOWN)."""
    report = _report(_host(gpu_with(xid=[{"code": -1}])))
    jsonschema.validate(report, SCHEMA)
    xid = next(c for c in report["checks"] if c["name"] == "xid")
    assert (xid["status"], xid["level"]) == ("fail", "UNKNOWN")
    assert "malformed reading" in xid["message"]
