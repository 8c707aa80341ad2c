"""JUnit XML from a run's GPU health reports: one testsuite per host, one testcase per host-wide or per-GPU check.

CI systems (GitLab, Jenkins, GitHub test reporters) show each check as a test: ``fail`` is a ``<failure>``,
``warn`` passes with the message in ``<system-out>``, and a host that produced no report (unreachable, or a task
failed before the check) gets one ``gpu_health`` testcase with an ``<error>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from gpufleet.results import HostResult, RunResult


def _report(host: HostResult) -> Mapping[str, Any] | None:
    data = host.health
    if not isinstance(data, Mapping):
        return None
    report = data.get("health", data)
    return report if isinstance(report, Mapping) and "checks" in report else None


def _classname(host: str, check: Mapping[str, Any]) -> str:
    gpu = check.get("gpu")
    if not gpu:
        return f"{host}.host"
    return f"{host}.gpu{gpu.get('index')}"


def _testcase(suite: ET.Element, host: str, check: Mapping[str, Any]) -> str:
    case = ET.SubElement(suite, "testcase", {"classname": _classname(host, check), "name": str(check.get("name")),
                                              "time": "0"})
    gpu = check.get("gpu")
    detail = (f"value={check.get('value')!r} threshold={check.get('threshold')!r}"
              + (f" gpu={gpu.get('index')} uuid={gpu.get('uuid')} pci_bus_id={gpu.get('pci_bus_id')}" if gpu else ""))
    status = str(check.get("status"))
    if status == "fail":
        failure = ET.SubElement(case, "failure", {"message": str(check.get("message")), "type": "fail"})
        failure.text = detail
    elif status == "warn":
        out = ET.SubElement(case, "system-out")
        out.text = f"WARN: {check.get('message')} ({detail})"
    return status


def _host_suite(root: ET.Element, host: HostResult) -> None:
    suite = ET.SubElement(root, "testsuite", {"name": host.name})
    report = _report(host)
    counts = {"tests": 0, "failures": 0, "errors": 0}
    if report is None:
        case = ET.SubElement(suite, "testcase", {"classname": f"{host.name}.host", "name": "gpu_health", "time": "0"})
        reasons = "; ".join(f"{t.task}: {t.msg}" for t in host.failed_tasks) or "the gpu_health check did not run"
        error = ET.SubElement(case, "error", {"message": "no health report", "type": host.status})
        error.text = reasons
        counts["tests"], counts["errors"] = 1, 1
    else:
        for check in report.get("checks") or []:
            counts["tests"] += 1
            if _testcase(suite, host.name, check) == "fail":
                counts["failures"] += 1
    suite.set("tests", str(counts["tests"]))
    suite.set("failures", str(counts["failures"]))
    suite.set("errors", str(counts["errors"]))
    suite.set("skipped", "0")


def to_junit_xml(result: RunResult) -> str:
    """Return the JUnit XML document (UTF-8 text with an XML declaration) for a run's health reports."""
    root = ET.Element("testsuites", {"name": "gpufleet verify"})
    for host in result.hosts.values():
        _host_suite(root, host)
    totals = {key: sum(int(s.get(key, "0")) for s in root) for key in ("tests", "failures", "errors")}
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit_xml(result: RunResult, path: str) -> None:
    """Write :func:`to_junit_xml` to ``path``."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(to_junit_xml(result))
