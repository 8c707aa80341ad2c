"""``gpufleet verify``: a per-host, per-GPU table of the gpu_health checks, then every check that is not ok."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpufleet._output import register_renderer
from gpufleet.results import HostResult, RunResult

STATUS_STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red"}
STATUS_MARKS = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}
LEVEL_STYLES = {"PASS": "green", "INFO": "cyan", "WARNING": "yellow", "UNKNOWN": "bold magenta",
                "CRITICAL": "bold red"}


def health_report(host: HostResult) -> Mapping[str, Any] | None:
    """Return the gpu_health report of a host (the module result's ``health`` key), or None when it has none."""
    data = host.health
    if not isinstance(data, Mapping):
        return None
    report = data.get("health", data)
    return report if isinstance(report, Mapping) and "checks" in report else None


def _cell(status: str | None) -> Text:
    if status is None:
        return Text("-", style="dim")
    return Text(STATUS_MARKS.get(status, status), style=STATUS_STYLES.get(status, ""))


def _check_names(checks: list[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    for check in checks:
        if check.get("gpu") and check["name"] not in names:
            names.append(str(check["name"]))
    return names


def host_table(name: str, report: Mapping[str, Any]) -> Table:
    """One row per GPU (and one for the host-wide checks), one column per check, cells ok / WARN / FAIL."""
    checks: list[Mapping[str, Any]] = list(report.get("checks") or [])
    per_gpu = _check_names(checks)
    host_checks = [c for c in checks if not c.get("gpu")]
    status = str(report.get("status", "?"))
    level = str(report.get("level") or status)
    action = report.get("action")
    title = f"{name}: health {level}" + (f", action {action}" if action and action != "none" else "")
    table = Table(title=Text(title, style=LEVEL_STYLES.get(level, STATUS_STYLES.get(status, ""))),
                  title_justify="left")
    table.add_column("gpu", justify="right")
    table.add_column("uuid / pci bus id")
    for check_name in per_gpu:
        table.add_column(check_name.replace("_", " "), justify="center")
    if host_checks:
        summary = Text()
        for check in host_checks:
            summary.append(f"{check['name']} ", style="")
            summary.append_text(_cell(str(check["status"])))
            summary.append("  ")
        table.add_row("host", summary, *([""] * len(per_gpu)))
    for gpu in report.get("gpus") or []:
        mine = {c["name"]: str(c["status"]) for c in checks if c.get("gpu") and c["gpu"].get("index") == gpu["index"]}
        ident = f"{gpu.get('uuid') or '?'}\n{gpu.get('pci_bus_id') or '?'}"
        table.add_row(str(gpu["index"]), ident, *(_cell(mine.get(n)) for n in per_gpu))
    return table


def problem_lines(name: str, report: Mapping[str, Any]) -> list[Text]:
    """One line per check that is not ok (or INFO): host, GPU, level, check, action, message, value vs threshold."""
    lines = []
    for check in report.get("checks") or []:
        status = str(check.get("status"))
        level = str(check.get("level") or STATUS_MARKS.get(status, status))
        if status == "ok" and level != "INFO":
            continue
        gpu = check.get("gpu")
        where = f"gpu {gpu.get('index')} {gpu.get('uuid')} {gpu.get('pci_bus_id')}" if gpu else "host"
        line = Text(f"{name} {where} ")
        line.append(f"{level} {check.get('name')}", style=LEVEL_STYLES.get(level, STATUS_STYLES.get(status, "")))
        action = check.get("action")
        if action and action != "none":
            line.append(f" [action: {action}]", style="bold")
        line.append(f": {check.get('message')} (value {check.get('value')!r}, threshold {check.get('threshold')!r})")
        lines.append(line)
    return lines


@register_renderer("verify")
def render_verify(result: RunResult, console: Console) -> None:
    """Print each host's health table, then every warn/fail check; hosts without a report are named."""
    missing = []
    for name, host in result.hosts.items():
        report = health_report(host)
        if report is None:
            missing.append(name)
            continue
        console.print(host_table(name, report))
        for line in problem_lines(name, report):
            console.print(line)
    if missing:
        console.print(Text(f"no health report from: {', '.join(missing)}", style="bold red"))
