# Copyright: gpufleet contributors
# SPDX-License-Identifier: Apache-2.0 (see LICENSE)
"""Host-wide checks made from a command's output: ``dcgmi diag`` and the container smoke test (pure functions)."""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.gpufleet.nvidia.plugins.module_utils.health_base import FAIL, OK, UNKNOWN, WARN, check

# DCGM's dcgmErrorSeverity_t (dcgm_errors.h) -> gpufleet's action for a failing test: ISOLATE "cannot perform
# workload, GPU should be isolated" (drain), RESET "drain and reset GPU"; others drain (fail closed).
DCGM_SEVERITY_ACTIONS = {0: "drain", 1: "drain", 2: "drain", 3: "drain", 4: "drain", 5: "drain", 6: "reset_gpu"}
DCGM_SEVERITY_NAMES = {0: "NONE", 1: "MONITOR", 2: "ISOLATE", 3: "UNKNOWN", 4: "TRIAGE", 5: "CONFIG", 6: "RESET"}
_DIAG_FAIL = "Fail"
_DIAG_WARN = "Warn"


def _diag_root(doc: Any) -> dict | None:
    """The diagnostic tree of ``dcgmi diag -j``: DCGM 4.x's ``DCGM Diagnostic`` or 3.x's ``DCGM GPU Diagnostic``."""
    if not isinstance(doc, dict):
        return None
    for key in ("DCGM Diagnostic", "DCGM GPU Diagnostic"):
        if isinstance(doc.get(key), dict):
            return doc[key]
    return None


def _entity(result: dict) -> Any:
    """The GPU a result is about: 4.x ``entity_id`` (GPU group), 3.x ``gpu_ids``; None when it names none."""
    if "entity_id" in result:
        group = result.get("entity_group", "GPU")
        return result["entity_id"] if group == "GPU" else f"{group} {result['entity_id']}"
    return result.get("gpu_ids")


def diag_findings(root: dict) -> list[dict]:
    """Every result of ``dcgmi diag -j`` that is not Pass/Skip: ``{category, test, gpu, status, warnings}``."""
    found = []
    for category in root.get("test_categories") or []:
        for test in category.get("tests") or []:
            named = []
            for result in test.get("results") or []:
                status = str(result.get("status", ""))
                if status not in (_DIAG_FAIL, _DIAG_WARN):
                    continue
                warnings = [{"warning": str(w.get("warning", "")), "error_id": w.get("error_id"),
                             "error_severity": w.get("error_severity")}
                            for w in result.get("warnings") or [] if isinstance(w, dict)]
                named.append({"category": category.get("category"), "test": test.get("name"),
                              "gpu": _entity(result), "status": status, "warnings": warnings})
            summary = (test.get("test_summary") or {}).get("status")
            if summary == _DIAG_FAIL and not any(f["status"] == _DIAG_FAIL for f in named):
                named.append({"category": category.get("category"), "test": test.get("name"), "gpu": None,
                              "status": _DIAG_FAIL, "warnings": []})
            found.extend(named)
    return found


def _describe(finding: dict) -> str:
    where = "" if finding["gpu"] is None else f" on GPU {finding['gpu']}"
    words = "; ".join(w["warning"] for w in finding["warnings"] if w["warning"])
    verb = "failed" if finding["status"] == _DIAG_FAIL else "warned"
    return f"{finding['test']} {verb}{where}" + (f" ({words})" if words else "")


def evaluate_dcgm_diag(level: int, rc: int, stdout: str, stderr: str = "") -> dict:
    """``dcgmi diag -r <level> -j``: judge DCGM's JSON (its schema: docs/health.md, "DCGM diagnostics").

    A failing test is CRITICAL (action from its warnings' DCGM severity: RESET resets the GPU, others drain), a
    warning WARNING; the evidence names each test, GPU and DCGM's words. Output that is not DCGM's JSON, a
    ``runtime_error``, no test at all, or a non-zero exit with no failing test is UNKNOWN: the diagnostic did not
    tell, so the host is not green.
    """
    threshold = f"level {level} passes"
    command = f"dcgmi diag -r {level} -j"
    last = ((stderr or "").strip() or (stdout or "").strip()).splitlines()
    said = last[-1][:300] if last else "no output"
    try:
        root = _diag_root(json.loads(stdout))
    except ValueError:
        root = None
    if root is None:
        return check("dcgm_diag", None, FAIL, rc, threshold,
                     f"{command} gave no DCGM diagnostic JSON (exit {rc}: {said}); check that the DCGM host engine "
                     "runs (the nvidia_dcgm role) and run the command by hand", level=UNKNOWN)
    if root.get("runtime_error"):
        return check("dcgm_diag", None, FAIL, rc, threshold,
                     f"{command} could not run: {root['runtime_error']}; fix that and rerun", level=UNKNOWN)
    if not root.get("test_categories"):
        return check("dcgm_diag", None, FAIL, rc, threshold,
                     f"{command} ran no test (exit {rc}); check the GPUs DCGM sees (dcgmi discovery -l)",
                     level=UNKNOWN)
    findings = diag_findings(root)
    failed = [f for f in findings if f["status"] == _DIAG_FAIL]
    value = [f"{f['test']}[gpu {f['gpu']}]" if f["gpu"] is not None else str(f["test"]) for f in findings]
    for finding in findings:
        for warning in finding["warnings"]:
            warning["severity"] = DCGM_SEVERITY_NAMES.get(warning["error_severity"])
    if failed:
        severities = [w["error_severity"] for f in failed for w in f["warnings"]]
        action = "reset_gpu" if any(DCGM_SEVERITY_ACTIONS.get(s) == "reset_gpu" for s in severities) else "drain"
        return check("dcgm_diag", None, FAIL, value, threshold,
                     f"{command}: " + "; ".join(_describe(f) for f in failed), action=action, evidence=findings)
    if rc != 0:
        return check("dcgm_diag", None, FAIL, rc, threshold,
                     f"{command} exited {rc} but its JSON names no failing test ({said}); run it by hand",
                     level=UNKNOWN, evidence=findings or None)
    if findings:
        return check("dcgm_diag", None, WARN, value, threshold,
                     f"{command}: " + "; ".join(_describe(f) for f in findings), evidence=findings)
    return check("dcgm_diag", None, OK, [], threshold, f"{command} passed")


def evaluate_container_smoke(rc: int, stdout: str, stderr: str, gpu_count: int | None) -> dict:
    """A container with every GPU must list them all with ``nvidia-smi -L``."""
    listed = len([line for line in stdout.splitlines() if line.startswith("GPU ")])
    if rc != 0:
        last = (stderr or stdout).strip().splitlines()
        return check("container_smoke", None, FAIL, listed, gpu_count,
                     f"the GPU container exited with status {rc}: {last[-1] if last else 'no output'}")
    if gpu_count is not None and listed != gpu_count:
        return check("container_smoke", None, FAIL, listed, gpu_count,
                     f"the GPU container sees {listed} GPU(s), the host has {gpu_count}")
    return check("container_smoke", None, OK, listed, gpu_count, f"the GPU container sees {listed} GPU(s)")
