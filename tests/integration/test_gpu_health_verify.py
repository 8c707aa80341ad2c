"""``gpufleet verify`` (playbooks/verify.yml, the gpu_health role) over a local two-host inventory.

Each inventory host is this machine (local connection) with its own simulated driver state: the role's
``gpu_health_python`` is a small wrapper that sets ``NVML_SIM_STATE`` and ``LD_LIBRARY_PATH`` for that host and
execs the venv's Python. Host ``gpu-a`` is a healthy 8xH100, ``gpu-b`` has NVLink 5 of GPU 3 down, ``gpu-c`` is a
healthy 2xA100 with MIG layouts (:data:`MIG_LAYOUTS`, made with the simulated ``nvidia-smi mig``) and ``gpu-d`` a
4xA30 with MIG layouts and too many corrected ECC errors on GPU 3 (WARNING). Report files go to the test's
temporary directory. ``tests/integration/test_fleet_report.py`` draws this fleet's run as the HTML report.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
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
HOSTS = ("gpu-a", "gpu-b", "gpu-c", "gpu-d")
PRESETS = {"gpu-a": "8xH100-NVSwitch", "gpu-b": "8xH100-NVSwitch", "gpu-c": "2xA100-40GB", "gpu-d": "4xA30"}
BAD_GPU = 3
#: host -> GPU index -> ``nvidia-smi mig -cgi`` argument (profile[:placement start], ...), each with ``-C``.
MIG_LAYOUTS = {"gpu-c": {0: "3g.20gb:4,2g.10gb:0,1g.5gb:3", 1: "7g.40gb"},
               "gpu-d": {0: "2g.12gb:2,1g.6gb:0", 1: "1g.6gb:0,1g.6gb:1,1g.6gb:2,1g.6gb:3"}}
#: gpu-d's GPU with corrected ECC errors above the warn threshold (10000) and below the fail threshold.
WARN_GPU = ("gpu-d", 3)
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
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The inventory file and, per host, its state file and report paths.

    The NVSwitch hosts run their fabric manager, as provisioned hosts do: a live driver client named
    ``nv-fabricmanager`` (a process held for the module's tests), which the simulated NVML needs to report the GPUs'
    fabric "Completed" (nvmlsim_fabric.c)."""
    from gpufleet_sim import presets  # in-repo: a failed import is a failure, never a skip
    lib_dir = _build_sim_library(LIB_DIR)
    base = tmp_path_factory.mktemp("verify")
    hosts: dict[str, Any] = {}
    fabric_manager = subprocess.Popen(["sleep", "infinity"])
    for seed, name in enumerate(HOSTS, start=1):
        home = base / name
        home.mkdir()
        doc = presets.build_state(PRESETS[name], seed)
        doc["require_root"] = False
        for gpu in doc["gpus"]:
            gpu["persistence_mode"] = 1
            if gpu["index"] in MIG_LAYOUTS.get(name, {}):  # MIG mode on since the last GPU reset
                gpu["mig"]["current"] = gpu["mig"]["pending"] = 1
        if WARN_GPU[0] == name:
            doc["gpus"][WARN_GPU[1]]["ecc"]["volatile"]["corrected"]["dram"] = 20000
        state = store.create(home / "state.json", doc)
        if doc.get("nvswitch", {}).get("count"):
            hardware.register_client(fabric_manager.pid, "nv-fabricmanager", path=state)
        for index, layout in MIG_LAYOUTS.get(name, {}).items():
            env = dict(os.environ, NVML_SIM_STATE=str(state), LD_LIBRARY_PATH=str(lib_dir))
            subprocess.run([sys.executable, "-m", "gpufleet_sim.tools.nvidia_smi", "mig", "-i", str(index), "-cgi",
                            layout, "-C"], env=env, check=True, capture_output=True, text=True, timeout=60)
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
            "gpu_health_expected_gpu_count": len(doc["gpus"]),
            "gpu_health_thresholds": {"xid_kernel_log": False},
        }
    hardware.inject("nvlink-down", str(BAD_GPU), {"link": 5}, path=base / "gpu-b" / "state.json")
    inventory = base / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}), encoding="utf-8")
    bad = store.load(base / "gpu-b" / "state.json")["gpus"][BAD_GPU]
    yield {"inventory": inventory, "base": base, "hosts": hosts,
           "bad_gpu": {"index": BAD_GPU, "uuid": bad["uuid"], "pci_bus_id": bad["pci"]["bus_id"]},
           "states": {name: store.load(base / name / "state.json") for name in HOSTS}}
    fabric_manager.kill()
    fabric_manager.wait(10)


def _cli_verify(inventory: Path, junit: Path, html: Path) -> tuple[int, dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PATH=VENV_PATH)
    argv = [sys.executable, "-m", "gpufleet.cli", "verify", "-i", str(inventory), "--json", "--junit", str(junit),
            "--html", str(html)]
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
    return [_cli_verify(fleet["inventory"], fleet["base"] / f"junit-{run}.xml", fleet["base"] / f"fleet-{run}.html")
            for run in range(2)]


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
    assert failing[0]["value"] == {"links": 18, "up": 17, "down": [5]}
    (task,) = doc["hosts"]["gpu-b"]["failed_tasks"]
    bad = fleet["bad_gpu"]
    assert f"fail nvlink[gpu {bad['index']} {bad['uuid']} {bad['pci_bus_id']}]: NVLink 5 down (17/18 up)" in task["msg"]
    assert doc["hosts"]["gpu-a"]["module_data"]["health"]["health"]["status"] == "ok"


def test_second_run_changes_nothing(cli_runs: list) -> None:
    _rc, doc = cli_runs[1]
    assert {name: doc["hosts"][name]["changed"] for name in HOSTS} == dict.fromkeys(HOSTS, 0)


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
    assert failure.get("message") == ("NVLink 5 down (17/18 up): NCCL falls back to slower paths; drain and check the "
                                      "baseboard")
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
    assert "gpu-c: health PASS" in text
    assert "gpu-d: health WARNING" in text
    assert "gpu-b: health CRITICAL, action drain" in text


# ------------------------------------------------------------------------------------------ the fleet report


def _expected_mig(state: dict[str, Any]) -> dict[int, tuple[int, set[tuple[str, int, int, str]]]]:
    """From the simulator's state: GPU index -> (memory slices, {(profile, start, size, MIG UUID)})."""
    out = {}
    for gpu in state["gpus"]:
        mig = gpu["mig"]
        if not mig.get("current"):
            continue
        names = {p["id"]: p["name"] for p in mig["gi_profiles"]}
        slots = max(start + size for p in mig["gi_profiles"] for start, size in p["placements"])
        out[gpu["index"]] = (slots, {(names[gi["profile_id"]], gi["start"], gi["size"],
                                      " ".join(ci["uuid"] for ci in gi["compute_instances"]))
                                     for gi in mig["gpu_instances"]})
    return out


def test_fleet_report_in_chromium(fleet: dict[str, Any], cli_runs: list) -> None:
    """verify --html's page, opened by headless Chromium: a tile per GPU, the failing one CRITICAL with its action,
    every MIG instance at its placement, nothing fetched from outside; the screenshot goes to build/."""
    from _chromium import dump_dom, png_pixels, screenshot

    del cli_runs
    page = fleet["base"] / "fleet-0.html"
    dom = dump_dom(page)
    assert [s.attrs["data-host"] for s in dom.iter("section")] == list(HOSTS)
    assert [(s.attrs["data-host"], s.attrs["data-level"]) for s in dom.iter("section")] == [
        ("gpu-a", "PASS"), ("gpu-b", "CRITICAL"), ("gpu-c", "PASS"), ("gpu-d", "WARNING")]
    for name in HOSTS:
        (section,) = dom.iter("section", data_host=name)
        tiles = [t for t in section.iter("div") if t.has_class("gpu")]
        state = fleet["states"][name]
        assert [(t.attrs["data-gpu-index"], t.attrs["data-uuid"]) for t in tiles] == [
            (str(g["index"]), g["uuid"]) for g in state["gpus"]]
        levels = {int(t.attrs["data-gpu-index"]): t.attrs["data-level"] for t in tiles}
        bad = {BAD_GPU: "CRITICAL"} if name == "gpu-b" else {WARN_GPU[1]: "WARNING"} if name == WARN_GPU[0] else {}
        assert levels == {g["index"]: bad.get(g["index"], "PASS") for g in state["gpus"]}
        expected = _expected_mig(state)
        for tile in tiles:
            index = int(tile.attrs["data-gpu-index"])
            svgs = tile.iter("svg")
            if index not in expected:
                assert (tile.attrs["data-mig"], svgs) == ("off", [])
                continue
            (svg,) = svgs
            slots, instances = expected[index]
            assert int(svg.attrs["data-slots"]) == slots
            drawn = svg.iter("g")
            assert {(g.attrs["data-profile"], int(g.attrs["data-start"]), int(g.attrs["data-size"]),
                     g.attrs["data-uuid"]) for g in drawn} == instances
            for g in drawn:  # drawn where the placement is: x in slice widths, the UUIDs in the tooltip
                (rect,) = g.iter("rect")
                width = int(svg.attrs["width"]) / slots
                assert round((float(rect.attrs["x"]) - 1) / width) == int(g.attrs["data-start"])
                assert round((float(rect.attrs["width"]) + 2) / width) == int(g.attrs["data-size"])
                assert all(u in g.iter("title")[0].all_text() for u in g.attrs["data-uuid"].split())
    (critical,) = [t for t in dom.iter("div", data_level="CRITICAL") if t.has_class("gpu")]
    assert (critical.attrs["data-uuid"], critical.attrs["data-action"]) == (fleet["bad_gpu"]["uuid"], "drain")
    model = fleet["states"]["gpu-b"]["gpus"][BAD_GPU]["name"]
    assert [c.all_text() for c in critical.children] == [f"GPU {BAD_GPU}", model, "CRITICAL · drain",
                                                         critical.attrs["data-uuid"]]
    (row,) = dom.iter("tr", data_level="CRITICAL")
    assert (row.attrs["data-check"], row.attrs["data-gpu"], row.attrs["data-action"]) == ("nvlink", str(BAD_GPU),
                                                                                          "drain")
    assert "NVLink 5 down (17/18 up)" in row.all_text()
    assert dom.iter("dd", data_meta="inventory")[0].all_text() == str(fleet["inventory"])
    assert [e.tag for e in dom.iter() if e.tag in ("script", "link", "img", "iframe", "object")] == []
    assert not [e.attrs for e in dom.iter() if {"src", "href"} & set(e.attrs)]
    png = screenshot(page, ROOT / "build" / "fleet-report.png", width=1200, height=1500)
    width, height, pixels = png_pixels(png)
    assert (width, height) == (1200, 1500)
    red = sum(1 for p in pixels if p == (0xC6, 0x28, 0x28))  # the CRITICAL tile's fill, drawn
    assert red > 10000, f"{red} CRITICAL-red pixels in {png}"


def test_report_command_reads_a_saved_result(fleet: dict[str, Any], cli_runs: list) -> None:
    """``gpufleet report verify.json --html`` draws what ``verify --html`` drew, and a line per host in the terminal."""
    _rc, doc = cli_runs[0]
    saved = fleet["base"] / "verify.json"
    saved.write_text(json.dumps(doc), encoding="utf-8")
    page = fleet["base"] / "report.html"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PATH=VENV_PATH)
    proc = subprocess.run([sys.executable, "-m", "gpufleet.cli", "report", str(saved), "--html", str(page)],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("fleet 4 hosts, 22 GPUs: CRITICAL")
    assert lines[-1] == f"wrote {page}"
    mig = _expected_mig(fleet["states"]["gpu-c"])
    cells = []
    for index in sorted(mig):
        slots, instances = mig[index]
        row = ["·"] * slots
        for profile, start, size, _uuid in instances:
            row[start:start + size] = [profile.split("g")[0]] * size
        cells.append(f"{index}[{''.join(row)}]")
    assert "gpu-c  PASS       " + " ".join(cells) in lines
    assert "gpu-b  CRITICAL  drain   0■ 1■ 2■ 3■ 4■ 5■ 6■ 7■" in lines
    assert (f"  GPU {BAD_GPU} CRITICAL nvlink [action: drain]: NVLink 5 down (17/18 up): NCCL falls back to slower "
            "paths; drain and check the baseboard") in lines

    def without_time(text: str) -> str:
        return re.sub(r'data-meta="report written">[^<]*<', "", text)

    assert without_time(page.read_text(encoding="utf-8")) == without_time(
        (fleet["base"] / "fleet-0.html").read_text(encoding="utf-8"))
