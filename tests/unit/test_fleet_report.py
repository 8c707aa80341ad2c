"""The fleet report's model and its refusals: fail closed on hosts without a report, clear errors on bad input.

The report drawn from a real ``gpufleet verify`` run, opened by Chromium, is tested in
``tests/integration/test_gpu_health_verify.py``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpufleet import cli
from gpufleet.errors import InputError
from gpufleet.fleet_report import fleet_from_result, load_result
from gpufleet.renderers.fleet_html import render_html
from gpufleet.renderers.fleet_text import mig_cells, render_fleet_text


def _host(report: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    host: dict[str, Any] = {"status": "ok", "failed_tasks": [], "module_data": {}, **extra}
    if report is not None:
        host["module_data"]["health"] = {"health": report}
    return host


def _report(level: str, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "ok", "level": level, "action": "none", "checks": [], "gpus": gpus, "driver_version": "570"}


GPU0 = {"index": 0, "uuid": "GPU-0", "pci_bus_id": "0:1", "name": "A", "level": "PASS", "action": "none", "mig": None}


def test_unreachable_host_is_unknown_with_the_reason_never_pass() -> None:
    doc = {"playbook": "/x/verify.yml", "hosts": {
        "a": _host(_report("PASS", [GPU0])),
        "b": _host(None, status="unreachable", unreachable=1,
                   failed_tasks=[{"task": "Gathering", "msg": "ssh: connect to host b port 22: No route to host"}]),
    }}
    fleet = fleet_from_result(doc, generated_at="t")
    assert [(h["name"], h["level"]) for h in fleet["hosts"]] == [("a", "PASS"), ("b", "UNKNOWN")]
    assert fleet["level"] == "UNKNOWN"
    assert fleet["hosts"][1]["error"] == ("unreachable: ssh: connect to host b port 22: No route to host; check the "
                                          "host and rerun gpufleet verify")
    page = render_html(fleet)
    assert '<section class="host" data-host="b" data-level="UNKNOWN"' in page
    console = Console(record=True, width=300)
    render_fleet_text(fleet, console)
    assert "b  UNKNOWN   unreachable: ssh: connect to host b port 22" in console.export_text()


def test_host_whose_health_task_failed_before_a_report() -> None:
    doc = {"hosts": {"a": _host(None, status="failed", failed=1,
                                failed_tasks=[{"task": "Install nvidia-ml-py", "msg": "No package matching"}])}}
    (host,) = fleet_from_result(doc)["hosts"]
    assert (host["level"], host["error"]) == ("UNKNOWN", "no health report: task 'Install nvidia-ml-py' failed: No "
                                                         "package matching; fix it and rerun gpufleet verify")


def test_gpu_without_a_known_level_is_unknown() -> None:
    gpu = {**GPU0, "level": None}
    (host,) = fleet_from_result({"hosts": {"a": _host(_report("PASS", [gpu]))}})["hosts"]
    assert host["gpus"][0]["level"] == "UNKNOWN"


def test_mig_cells_follow_placements_and_leave_free_slices() -> None:
    mig = {"slots": 8, "instances": [{"profile": "3g.40gb", "start": 4, "size": 4},
                                     {"profile": "1g.10gb", "start": 1, "size": 1}]}
    assert mig_cells(mig) == "·1··3333"


def test_older_report_without_slots_draws_the_instances_extent() -> None:
    gpu = {**GPU0, "mig": {"enabled": True, "gpu_instances": [
        {"id": 1, "profile_name": "2g.10gb", "start": 2, "size": 2, "compute_instances": []}]}}
    (host,) = fleet_from_result({"hosts": {"a": _host(_report("PASS", [gpu]))}})["hosts"]
    assert (host["gpus"][0]["mig"]["slots"], host["gpus"][0]["mig"]["slots_known"]) == (4, False)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); pass the "
              "file gpufleet verify --json wrote"),
        ("[]", "is not a gpufleet verify result; pass the file gpufleet verify --json wrote"),
        ('{"playbook": "/p/facts.yml", "hosts": {}}',
         "is the result of /p/facts.yml, not of verify.yml; run gpufleet verify --json"),
    ],
)
def test_bad_result_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_result(str(path))
    assert str(info.value) == f"{path} {message}"


def test_result_without_hosts() -> None:
    with pytest.raises(InputError) as info:
        fleet_from_result({"playbook": "verify.yml"})
    assert str(info.value) == "not a gpufleet verify result: no 'hosts' mapping; write one with gpufleet verify --json"


def test_report_command_exit_codes(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["report", str(tmp_path / "none.json")], stdout=out, stderr=err) == 4
    assert err.getvalue() == (f"gpufleet: error: cannot read {tmp_path / 'none.json'}: No such file or directory; "
                              "pass the file gpufleet verify --json wrote\n")
    saved = tmp_path / "v.json"
    saved.write_text(json.dumps({"playbook": "/p/verify.yml", "hosts": {"a": _host(_report("PASS", [GPU0]))}}),
                     encoding="utf-8")
    out = io.StringIO()
    assert cli.main(["report", str(saved), "--html", str(tmp_path / "f.html")], stdout=out, stderr=err) == 0
    assert out.getvalue().splitlines()[1] == "a  PASS       0■"
    assert (tmp_path / "f.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_verify_html_into_a_missing_directory_is_refused_before_any_run(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    def never(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("verify ran")

    monkeypatch.setitem(cli.USE_CASES, "verify", never)
    out, err = io.StringIO(), io.StringIO()
    page = tmp_path / "no" / "fleet.html"
    assert cli.main(["verify", "-i", "x", "--html", str(page)], stdout=out, stderr=err) == 4
    assert err.getvalue() == (f"gpufleet: error: --html {page}: not a file in an existing directory; name the page's "
                              "file, e.g. fleet.html\n")


@pytest.mark.parametrize("where", ["missing-dir", "a-directory"])
def test_verify_junit_that_cannot_be_written_is_refused_before_any_run(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path, where: str) -> None:
    """Issue 27: --junit /nonexistent/x.xml (or a directory) ended in a traceback after the run."""
    def never(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("verify ran")

    monkeypatch.setitem(cli.USE_CASES, "verify", never)
    out, err = io.StringIO(), io.StringIO()
    target = tmp_path / "no" / "x.xml" if where == "missing-dir" else tmp_path
    assert cli.main(["verify", "-i", "x", "--junit", str(target)], stdout=out, stderr=err) == 4
    assert err.getvalue() == (f"gpufleet: error: --junit {target}: not a file in an existing directory; name the "
                              "report's file, e.g. health.xml\n")


def test_a_host_that_is_a_vm_says_so_on_the_page_and_in_the_terminal() -> None:
    """Issue 27: a GPU passed through to a VM is a first-class case; the report and fleet page name it."""
    vm_gpu = dict(GPU0, virtualization_mode="Pass-Through")
    metal_gpu = dict(GPU0, virtualization_mode="None")
    doc = {"playbook": "/x/verify.yml", "hosts": {"vm": _host(_report("PASS", [vm_gpu])),
                                                  "metal": _host(_report("PASS", [metal_gpu]))}}
    fleet = fleet_from_result(doc, generated_at="t")
    assert {h["name"]: h["virtualization"] for h in fleet["hosts"]} == {"vm": "Pass-Through", "metal": None}
    page = render_html(fleet)
    assert "VM: Pass-Through" in page
    assert page.count("VM: ") == 1
    console = Console(record=True, width=300)
    render_fleet_text(fleet, console)
    lines = console.export_text().splitlines()
    assert [line for line in lines if "VM:" in line] == ["vm  PASS       0■  VM: Pass-Through"]


def _port(hca: str, level: str, state: str = "ACTIVE", rate: str = "400 Gb/sec (4X NDR)") -> dict[str, Any]:
    return {"hca": hca, "port": 1, "pci_bus_id": None, "state": state, "phys_state": "LinkUp", "rate": rate,
            "rate_gbps": 400.0, "link_layer": "InfiniBand", "level": level, "failed": []}


def test_network_findings_sit_beside_the_gpus_of_the_same_host() -> None:
    """Issue 30: a host whose report has RDMA checks gets a network row (a cell per port, coloured by the port's
    checks, and nvidia_peermem); a port's finding is listed under the port's name, not as "host"."""
    down = {"name": "rdma_port_state", "gpu": None, "status": "fail", "level": "CRITICAL", "action": "drain",
            "value": "DOWN / Polling", "threshold": "ACTIVE / LinkUp", "message": "mlx5_1 port 1 is DOWN",
            "evidence": {"hca": "mlx5_1", "port": 1, "rate": "400 Gb/sec (4X NDR)"}}
    report = dict(_report("CRITICAL", [GPU0]), checks=[down],
                  network={"expected": True, "nvidia_peermem_loaded": False, "level": "CRITICAL",
                           "failed": ["rdma_port_state"], "gpus": [],
                           "ports": [_port("mlx5_0", "PASS"), _port("mlx5_1", "CRITICAL", state="DOWN")]})
    doc = {"playbook": "/x/verify.yml", "hosts": {"rdma": _host(report), "plain": _host(_report("PASS", [GPU0]))}}
    fleet = fleet_from_result(doc, generated_at="t")
    rdma, plain = fleet["hosts"][1], fleet["hosts"][0]
    assert plain["name"] == "plain"
    assert plain["network"] is None
    assert [(p["name"], p["level"]) for p in rdma["network"]["ports"]] == [("mlx5_0 port 1", "PASS"),
                                                                          ("mlx5_1 port 1", "CRITICAL")]
    assert (rdma["network"]["level"], rdma["network"]["peermem"]) == ("CRITICAL", "not loaded")
    assert [p["port"] for p in rdma["problems"]] == ["mlx5_1 port 1"]
    page = render_html(fleet)
    assert page.count('class="network"') == 1
    assert 'data-hca="mlx5_1" data-port="1" data-level="CRITICAL" data-state="DOWN"' in page
    assert 'data-peermem="not loaded"' in page
    assert "<td>mlx5_1 port 1</td><td>rdma_port_state</td>" in page
    console = Console(record=True, width=300)
    render_fleet_text(fleet, console)
    lines = console.export_text().splitlines()
    assert lines[1:5] == ["plain  PASS       0■", "rdma  CRITICAL   0■",
                          "  network CRITICAL mlx5_0■ mlx5_1■  nvidia_peermem not loaded",
                          "  mlx5_1 port 1 CRITICAL rdma_port_state [action: drain]: mlx5_1 port 1 is DOWN"]


def test_report_command_keeps_a_long_finding_on_one_line_in_a_pipe(tmp_path: Path) -> None:
    """``gpufleet report result.json | grep ...``: a finding longer than any terminal is one line, not wrapped."""
    message = "mlx5_2 port 1 is DOWN (physical state Polling); " + "x" * 300
    check = {"name": "rdma_port_state", "gpu": None, "status": "fail", "level": "CRITICAL", "action": "drain",
             "value": None, "threshold": None, "message": message,
             "evidence": {"hca": "mlx5_2", "port": 1, "rate": None}}
    saved = tmp_path / "verify.json"
    saved.write_text(json.dumps({"playbook": "/x/verify.yml", "hosts": {
        "h": _host(dict(_report("CRITICAL", [GPU0]), checks=[check]))}}), encoding="utf-8")
    out = io.StringIO()
    assert cli.main(["report", str(saved)], stdout=out, stderr=io.StringIO()) == 0
    assert f"  mlx5_2 port 1 CRITICAL rdma_port_state [action: drain]: {message}" in out.getvalue().splitlines()
