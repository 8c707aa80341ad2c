"""``gpufleet verify`` exit codes follow the health verdict (src/gpufleet/health_verdict.py), through the real CLI."""

from __future__ import annotations

import io
from typing import Any

import pytest

from gpufleet import cli
from gpufleet.results import HostResult, RunResult


def _report(level: str | None, status: str) -> dict[str, Any]:
    report: dict[str, Any] = {"status": status, "checks": [], "gpus": []}
    if level is not None:
        report["level"] = level
    return report


def _result(*reports: dict[str, Any] | None, rc: int = 0, unreachable: bool = False) -> RunResult:
    hosts = {}
    for i, report in enumerate(reports):
        data = {"health": {"health": report}} if report is not None else {}
        hosts[f"h{i}"] = HostResult(f"h{i}", ok=3, unreachable=int(unreachable and i == 0),
                                    failed=int(rc == 2 and i == 0), module_data=data)
    return RunResult("/c/playbooks/verify.yml", "successful" if rc == 0 else "failed", rc, hosts)


CASES = [
    ("all-pass", [_report("PASS", "ok"), _report("PASS", "ok")], 0, 0),
    ("info-is-still-0", [_report("INFO", "ok")], 0, 0),
    ("a-warning-is-1", [_report("PASS", "ok"), _report("WARNING", "warn")], 0, 1),
    ("unknown-is-2-even-if-the-run-passed", [_report("UNKNOWN", "fail")], 0, 2),
    ("critical-is-2-with-fail-on-never", [_report("CRITICAL", "fail"), _report("PASS", "ok")], 0, 2),
    ("old-report-without-level-warn", [_report(None, "warn")], 0, 1),
    ("no-report-keeps-the-runs-code", [None], 0, 0),
    ("failed-host-stays-2-over-a-warning", [_report("WARNING", "warn")], 2, 2),
]


@pytest.mark.parametrize(("reports", "rc", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_verify_exit_code_follows_the_worst_level(monkeypatch: pytest.MonkeyPatch, reports: list, rc: int,
                                                  code: int) -> None:
    result = _result(*reports, rc=rc)
    monkeypatch.setitem(cli.USE_CASES, "verify", lambda *_a, **_k: result)
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["verify", "-i", "inv", "-q", "--json"], stdout=out, stderr=err) == code


def test_unreachable_wins_over_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    result = _result(_report("CRITICAL", "fail"), rc=2, unreachable=True)
    assert int(result.exit_code) == 3
    monkeypatch.setitem(cli.USE_CASES, "verify", lambda *_a, **_k: result)
    assert cli.main(["verify", "-i", "inv", "-q", "--json"], stdout=io.StringIO(), stderr=io.StringIO()) == 3


def test_other_commands_ignore_health_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    result = _result(_report("WARNING", "warn"))
    monkeypatch.setitem(cli.USE_CASES, "facts", lambda *_a, **_k: result)
    assert cli.main(["facts", "-i", "inv", "-q", "--json"], stdout=io.StringIO(), stderr=io.StringIO()) == 0


def test_the_text_rendering_names_level_and_action() -> None:
    from rich.console import Console

    from gpufleet.renderers.health import render_verify

    check = {"name": "remapped_rows", "gpu": {"index": 5, "uuid": "GPU-5", "pci_bus_id": "00000000:9A:00.0"},
             "status": "fail", "level": "CRITICAL", "action": "rma", "value": {"failure": 1}, "threshold": {},
             "message": "a row remapping failed", "evidence": None}
    report = {"status": "fail", "level": "CRITICAL", "action": "rma", "checks": [check],
              "gpus": [{"index": 5, "uuid": "GPU-5", "pci_bus_id": "00000000:9A:00.0", "status": "fail"}]}
    result = RunResult("/c/playbooks/verify.yml", "failed", 2,
                       {"gpu-b": HostResult("gpu-b", ok=1, module_data={"health": {"health": report}})})
    buf = io.StringIO()
    render_verify(result, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "gpu-b: health CRITICAL, action rma" in text
    assert "gpu-b gpu 5 GPU-5 00000000:9A:00.0 CRITICAL remapped_rows [action: rma]: a row remapping failed" in text
