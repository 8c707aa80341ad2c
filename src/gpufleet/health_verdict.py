"""The verdict of a ``gpufleet verify`` run: the worst health level of its hosts, and the exit code it gives.

Levels are NVIDIA Health Validation's (see docs/health.md): PASS < INFO < WARNING < UNKNOWN < CRITICAL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.results import ExitCode, RunResult

LEVELS = ("PASS", "INFO", "WARNING", "UNKNOWN", "CRITICAL")
#: Exit code of ``gpufleet verify`` for the worst level among the hosts' reports (docs/health.md, docs/api.md).
EXIT_FOR_LEVEL = {"PASS": 0, "INFO": 0, "WARNING": 1, "UNKNOWN": int(ExitCode.FAILED), "CRITICAL": int(ExitCode.FAILED)}
#: Exit codes of the run itself that say more than any verdict (unreachable, bad input, runner or Ansible error).
_RUN_WINS = {int(ExitCode.UNREACHABLE), int(ExitCode.BAD_INPUT), int(ExitCode.RUNNER_ERROR),
             int(ExitCode.ANSIBLE_ERROR)}


def host_report(data: Any) -> Mapping[str, Any] | None:
    """The gpu_health report in a host's ``health`` module data (``{"health": report}`` or the report itself)."""
    if not isinstance(data, Mapping):
        return None
    report = data.get("health", data)
    return report if isinstance(report, Mapping) and "checks" in report else None


def report_level(report: Mapping[str, Any]) -> str:
    """The report's level; a report without a known level (an older module) is judged from its status."""
    level = report.get("level")
    if level in LEVELS:
        return str(level)
    return {"ok": "PASS", "warn": "WARNING"}.get(str(report.get("status")), "UNKNOWN")


def worst_level(result: RunResult) -> str | None:
    """The worst level among the hosts that returned a report; None when no host did."""
    levels = [report_level(r) for r in (host_report(h.health) for h in result.hosts.values()) if r is not None]
    return max(levels, key=LEVELS.index) if levels else None


def verify_exit_code(result: RunResult) -> int:
    """The run's exit code, raised to the verdict's: 0 PASS/INFO, 1 WARNING, 2 UNKNOWN/CRITICAL.

    Unreachable hosts, bad input and runner/Ansible errors keep their own code (3-6): they say more. A host whose
    health task failed without a report is already a failed host (2).
    """
    code = int(result.exit_code)
    if code in _RUN_WINS:
        return code
    level = worst_level(result)
    return max(code, EXIT_FOR_LEVEL[level]) if level is not None else code
