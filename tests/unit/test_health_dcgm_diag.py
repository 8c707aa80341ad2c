"""``dcgm_diag`` judged from ``dcgmi diag -r N -j``: DCGM 4.x's JSON (as the simulated dcgmi prints it, in the shape
NVIDIA's own tests read: NVIDIA/DCGM testing/python3/tests/test_dcgm_diag.py) and 3.x's (``DCGM GPU Diagnostic``,
``gpu_ids``); anything else is UNKNOWN, never ok. The real tool against the module: tests/integration/
test_gpu_health_dcgm_diag.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ansible_collections.gpufleet.nvidia.plugins.module_utils import health_commands as hcmd

from gpufleet_sim.tools.dcgm_checks import TestResult as DiagResult
from gpufleet_sim.tools.dcgmi import diag_json

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "src/gpufleet/schemas/health_report.schema.json"
SCHEMA = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def _doc(results: list[DiagResult]) -> str:
    answer = {"results": [r.__dict__ for r in results], "driver": "570.172.08", "version": "4.2.3",
              "device_ids": ["20B2"] * len({r.gpu for r in results})}
    return json.dumps(diag_json(answer))


DBE = "A volatile double-bit ECC error was detected on GPU 1 (2 errors)."


def test_all_pass() -> None:
    got = hcmd.evaluate_dcgm_diag(1, 0, _doc([DiagResult("Deployment", "software", 0, "Pass"),
                                              DiagResult("Deployment", "software", 1, "Pass")]))
    assert (got["status"], got["level"], got["action"], got["value"], got["message"]) == (
        "ok", "PASS", "none", [], "dcgmi diag -r 1 -j passed")


def test_failing_test_is_critical_with_the_test_and_gpu_in_the_evidence() -> None:
    results = [DiagResult("Hardware", "memory", 0, "Pass"),
               DiagResult("Hardware", "memory", 1, "Fail", [DBE],
                          [{"error_id": 4, "error_category": 10, "error_severity": 2}])]
    got = hcmd.evaluate_dcgm_diag(2, 1, _doc(results))
    assert (got["status"], got["level"], got["action"]) == ("fail", "CRITICAL", "drain")
    assert got["value"] == ["memory[gpu 1]"]
    assert got["message"] == f"dcgmi diag -r 2 -j: memory failed on GPU 1 ({DBE})"
    assert got["evidence"] == [{"category": "Hardware", "test": "memory", "gpu": 1, "status": "Fail", "warnings": [
        {"warning": DBE, "error_id": 4, "error_severity": 2, "severity": "ISOLATE"}]}]
    check_schema = {"$defs": SCHEMA["$defs"], "$ref": "#/$defs/check"}
    jsonschema.validate(got, check_schema)


def test_reset_severity_asks_for_a_gpu_reset() -> None:
    results = [DiagResult("Deployment", "software", 0, "Fail", ["pending row remap"],
                          [{"error_id": 85, "error_category": 10, "error_severity": 6}])]
    got = hcmd.evaluate_dcgm_diag(1, 1, _doc(results))
    assert (got["level"], got["action"]) == ("CRITICAL", "reset_gpu")


DCGM3 = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Integration", "tests": [
    {"name": "PCIe", "results": [{"gpu_ids": "0", "status": "Pass"},
                                 {"gpu_ids": "1", "status": "Warn", "warnings": [{"warning": "replays",
                                                                                 "error_id": 3}]}]}]}]},
    "Driver Version Detected": "535.129.03"}


def test_dcgm3_warning_is_warning() -> None:
    got = hcmd.evaluate_dcgm_diag(2, 0, json.dumps(DCGM3))
    assert (got["status"], got["level"], got["value"]) == ("warn", "WARNING", ["PCIe[gpu 1]"])
    assert got["message"] == "dcgmi diag -r 2 -j: PCIe warned on GPU 1 (replays)"


def _summary_fail() -> dict[str, Any]:
    return {"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": [
        {"name": "targeted_power", "results": [], "test_summary": {"status": "Fail"}}]}]}}


PASS_ONLY = json.dumps({"DCGM Diagnostic": {"test_categories": [
    {"category": "Deployment", "tests": [{"name": "software", "results": [{"entity_id": 0, "status": "Pass"}]}]}]}})
UNKNOWN_CASES = [
    ("table-output", 0, "| Deployment | Pass |", "",
     "dcgmi diag -r 1 -j gave no DCGM diagnostic JSON (exit 0: | Deployment | Pass |); check that the DCGM host "
     "engine runs (the nvidia_dcgm role) and run the command by hand"),
    ("no-engine", 1, "", "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.",
     "dcgmi diag -r 1 -j gave no DCGM diagnostic JSON (exit 1: Error: Unable to connect to host engine. Host "
     "engine connection invalid/disconnected.); check that the DCGM host engine runs (the nvidia_dcgm role) and run "
     "the command by hand"),
    ("runtime-error", 1, json.dumps({"DCGM Diagnostic": {"runtime_error": "The GPU list is empty"}}), "",
     "dcgmi diag -r 1 -j could not run: The GPU list is empty; fix that and rerun"),
    ("no-tests", 0, json.dumps({"DCGM Diagnostic": {"test_categories": []}}), "",
     "dcgmi diag -r 1 -j ran no test (exit 0); check the GPUs DCGM sees (dcgmi discovery -l)"),
    ("nonzero-without-failure", 226, PASS_ONLY, "",
     f"dcgmi diag -r 1 -j exited 226 but its JSON names no failing test ({PASS_ONLY}); run it by hand"),
]


@pytest.mark.parametrize(("rc", "stdout", "stderr", "message"), [c[1:] for c in UNKNOWN_CASES],
                         ids=[c[0] for c in UNKNOWN_CASES])
def test_what_is_not_a_verdict_is_unknown(rc: int, stdout: str, stderr: str, message: str) -> None:
    got = hcmd.evaluate_dcgm_diag(1, rc, stdout, stderr)
    assert (got["status"], got["level"], got["message"]) == ("fail", "UNKNOWN", message)


def test_a_failing_summary_without_a_failing_result_still_fails() -> None:
    got = hcmd.evaluate_dcgm_diag(3, 1, json.dumps(_summary_fail()))
    assert (got["level"], got["value"], got["message"]) == ("CRITICAL", ["targeted_power"],
                                                           "dcgmi diag -r 3 -j: targeted_power failed")
