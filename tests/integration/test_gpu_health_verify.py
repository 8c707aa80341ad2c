"""``gpufleet verify`` (playbooks/verify.yml, the gpu_health role) over a local two-host inventory.

Each inventory host is this machine (local connection) with its own simulated driver state: the role's
``gpu_health_python`` is a small wrapper that sets ``NVML_SIM_STATE`` and ``LD_LIBRARY_PATH`` for that host and
execs the venv's Python. Host ``gpu-a`` is a healthy 8xH100, ``gpu-b`` has NVLink 5 of GPU 3 down. Report files go
to the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from gpufleet import api
from gpufleet.junit import to_junit_xml
from gpufleet.renderers.health import render_verify
from gpufleet_sim import hardware, store

ROOT = Path(__file__).resolve().parents[2]
DRIVER_VERSION = "570.172.08"
LIB_DIR = ROOT / "build" / "health" / "lib"
HOSTS = ("gpu-a", "gpu-b")
BAD_GPU = 3
# ansible-runner starts ansible-playbook from PATH: the one of this interpreter's venv.
VENV_PATH = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"


def _build_sim_library(out_dir: Path) -> Path:
    try:
        from gpufleet_sim.build import build_library
    except ImportError:
        subprocess.run(["make", "-j1", "-s", "-C", str(ROOT / "simulator/src/gpufleet_sim/native"), f"OUT={out_dir}",
                        f"DRIVER_VERSION={DRIVER_VERSION}", f"PYTHON={sys.executable}"], check=True)
        return out_dir
    return Path(build_library(out_dir, DRIVER_VERSION)).parent


@pytest.fixture(autouse=True)
def _venv_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", VENV_PATH)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The inventory file and, per host, its state file and report paths."""
    from gpufleet_sim import presets  # in-repo: a failed import is a failure, never a skip
    lib_dir = _build_sim_library(LIB_DIR)
    base = tmp_path_factory.mktemp("verify")
    hosts: dict[str, Any] = {}
    for seed, name in enumerate(HOSTS, start=1):
        home = base / name
        home.mkdir()
        doc = presets.build_state("8xH100-NVSwitch", seed)
        doc["require_root"] = False
        for gpu in doc["gpus"]:
            gpu["persistence_mode"] = 1
        state = store.create(home / "state.json", doc)
        wrapper = home / "python"
        wrapper.write_text(f"#!/bin/sh\nexport NVML_SIM_STATE={state} LD_LIBRARY_PATH={lib_dir}\n"
                           f'exec {sys.executable} "$@"\n', encoding="utf-8")
        wrapper.chmod(0o755)
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_become": False,
            "ansible_python_interpreter": sys.executable,
            "gpu_health_python": str(wrapper),
            "gpu_health_report_path": str(home / "health.json"),
            "gpu_health_textfile_path": str(home / "textfile" / "gpufleet_health.prom"),
            "gpu_health_expected_gpu_count": 8,
            "gpu_health_thresholds": {"xid_kernel_log": False},
        }
    hardware.inject("nvlink-down", str(BAD_GPU), {"link": 5}, path=base / "gpu-b" / "state.json")
    inventory = base / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}), encoding="utf-8")
    bad = store.load(base / "gpu-b" / "state.json")["gpus"][BAD_GPU]
    return {"inventory": inventory, "base": base, "hosts": hosts,
            "bad_gpu": {"index": BAD_GPU, "uuid": bad["uuid"], "pci_bus_id": bad["pci"]["bus_id"]}}


def _cli_verify(inventory: Path, junit: Path) -> tuple[int, dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PATH=VENV_PATH)
    argv = [sys.executable, "-m", "gpufleet.cli", "verify", "-i", str(inventory), "--json", "--junit", str(junit)]
    proc = subprocess.run(argv,
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"gpufleet verify printed no JSON (rc {proc.returncode}): {proc.stdout[-3000:]} "
                    f"{proc.stderr[-3000:]}")


@pytest.fixture(scope="module")
def cli_runs(fleet: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """Two ``gpufleet verify --json`` runs in a row (the second proves the report files are idempotent)."""
    return [_cli_verify(fleet["inventory"], fleet["base"] / f"junit-{run}.xml") for run in range(2)]


def test_cli_writes_junit_xml(fleet: dict[str, Any], cli_runs: list) -> None:
    del cli_runs
    root = ET.parse(fleet["base"] / "junit-0.xml").getroot()
    failures = [(c.get("classname"), c.get("name")) for c in root.iter("testcase") if c.find("failure") is not None]
    assert failures == [(f"gpu-b.gpu{BAD_GPU}", "nvlink")]


def test_verify_json_names_the_failing_gpu(fleet: dict[str, Any], cli_runs: list) -> None:
    rc, doc = cli_runs[0]
    assert rc == 2, doc
    assert doc["hosts"]["gpu-a"]["status"] in ("ok", "changed")
    assert doc["hosts"]["gpu-b"]["status"] == "failed"
    report = doc["hosts"]["gpu-b"]["module_data"]["health"]["health"]
    failing = [c for c in report["checks"] if c["status"] == "fail"]
    assert [(c["name"], c["gpu"]) for c in failing] == [("nvlink", fleet["bad_gpu"])]
    assert failing[0]["value"] == {"up": 17, "down": [5]}
    (task,) = doc["hosts"]["gpu-b"]["failed_tasks"]
    bad = fleet["bad_gpu"]
    assert f"fail nvlink[gpu {bad['index']} {bad['uuid']} {bad['pci_bus_id']}]: NVLink 5 down (17/18 up)" in task["msg"]
    assert doc["hosts"]["gpu-a"]["module_data"]["health"]["health"]["status"] == "ok"


def test_second_run_changes_nothing(cli_runs: list) -> None:
    _rc, doc = cli_runs[1]
    assert {name: doc["hosts"][name]["changed"] for name in HOSTS} == {"gpu-a": 0, "gpu-b": 0}


def test_report_files_on_the_host(fleet: dict[str, Any], cli_runs: list) -> None:
    del cli_runs
    home = fleet["base"] / "gpu-b"
    report = json.loads((home / "health.json").read_text(encoding="utf-8"))
    assert report["status"] == "fail"
    assert "time" not in json.dumps(report).lower().replace("timeout", "")
    prom = (home / "textfile" / "gpufleet_health.prom").read_text(encoding="utf-8")
    bad = fleet["bad_gpu"]
    assert (f'gpufleet_health_check_status{{check="nvlink",gpu="{BAD_GPU}",uuid="{bad["uuid"]}",'
            f'pci_bus_id="{bad["pci_bus_id"]}"}} 2') in prom.splitlines()
    assert "gpufleet_health_status 2" in prom.splitlines()
    samples = [line for line in prom.splitlines() if line and not line.startswith("#")]
    assert all(re.match(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9]+$', s) for s in samples), samples


def test_junit_xml_one_testcase_per_check(fleet: dict[str, Any]) -> None:
    result = api.verify(str(fleet["inventory"]))
    xml_text = to_junit_xml(result)
    root = ET.fromstring(xml_text)
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert sorted(suites) == list(HOSTS)
    for name in HOSTS:
        checks = result.hosts[name].health["health"]["checks"]
        cases = suites[name].findall("testcase")
        assert len(cases) == len(checks) == int(suites[name].get("tests"))
        assert len({(c.get("classname"), c.get("name")) for c in cases}) == len(cases)
    failures = [(c.get("classname"), c.get("name")) for c in root.iter("testcase") if c.find("failure") is not None]
    assert failures == [(f"gpu-b.gpu{BAD_GPU}", "nvlink")]
    assert root.get("failures") == "1"
    failure = suites["gpu-b"].find(f"testcase[@classname='gpu-b.gpu{BAD_GPU}'][@name='nvlink']/failure")
    assert failure is not None
    assert failure.get("message") == "NVLink 5 down (17/18 up)"
    assert fleet["bad_gpu"]["uuid"] in (failure.text or "")


def test_renderer_shows_the_failing_gpu(fleet: dict[str, Any]) -> None:
    result = api.verify(str(fleet["inventory"]))
    console = Console(record=True, width=400)
    render_verify(result, console)
    text = console.export_text()
    bad = fleet["bad_gpu"]
    assert (f"gpu-b gpu {BAD_GPU} {bad['uuid']} {bad['pci_bus_id']} CRITICAL nvlink [action: drain]: NVLink 5 down "
            "(17/18 up)") in text
    assert "gpu-a: health PASS" in text
    assert "gpu-b: health CRITICAL, action drain" in text
