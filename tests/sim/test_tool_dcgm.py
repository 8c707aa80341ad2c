"""DCGM: nv-hostengine + dcgmi (discovery, diag judged from the state, health watches) and dcgm-exporter."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import DRIVER_VERSION, build_lib, free_port, make_state, run_tool, tool_env, write_state

from gpufleet_sim import hardware, store
from gpufleet_sim.tools import dcgm_checks


def wait_port(port: int, proc: subprocess.Popen[str], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


@pytest.fixture(scope="module")
def libdir() -> Path:
    return build_lib()


@pytest.fixture
def env(tmp_path: Path, libdir: Path) -> dict[str, str]:
    state = write_state(tmp_path / "state.json", make_state(2, nvswitch=True))
    return tool_env(state, libdir, NVIDIA_SIM_ROOT=str(tmp_path / "root"))


@pytest.fixture
def engine(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet_sim.tools.nv_hostengine", "-n", "-p", str(port),
                             "--bind-interface", "127.0.0.1"], env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        wait_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    assert proc.returncode == 0
    assert store.load(env["NVML_SIM_STATE"])["clients"] == []


def dcgmi(env: dict[str, str], *args: str) -> Any:
    return run_tool("dcgmi", list(args), env)


def test_dcgmi_without_host_engine(env: dict[str, str]) -> None:
    result = dcgmi(env, "discovery", "-l", "--host", f"127.0.0.1:{free_port()}")
    assert (result.returncode, result.stdout) == (1, (
        "Error: unable to establish a connection to the specified host: 127.0.0.1\n"
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"))


def test_discovery_and_client(env: dict[str, str], engine: str) -> None:
    assert [c["name"] for c in store.load(env["NVML_SIM_STATE"])["clients"]] == ["nv-hostengine"]
    out = dcgmi(env, "discovery", "-l", "--host", engine).stdout.splitlines()
    assert out[0] == "2 GPUs found."
    assert out[4] == f"| 0      | {'Name: NVIDIA A100-SXM4-80GB':<68} |"
    assert "6 NvSwitches found." in out


def test_diag_pass_then_fail(env: dict[str, str], engine: str) -> None:
    ok = dcgmi(env, "diag", "-r", "1", "--host", engine)
    assert ok.returncode == 0, ok.stdout
    assert f"| Driver Version Detected   | {DRIVER_VERSION:<46} |" in ok.stdout.splitlines()
    hardware.inject("ecc-uncorrectable", "1", {"count": 2}, env["NVML_SIM_STATE"])
    failed = dcgmi(env, "diag", "-r", "2", "-j", "--host", engine)
    assert failed.returncode == 1
    doc = json.loads(failed.stdout)
    # DCGM 4.x's keys (NVIDIA/DCGM testing/python3/tests/test_dcgm_diag.py): plugin names, entity results, summary
    tests = {t["name"]: t for c in doc["DCGM Diagnostic"]["test_categories"] for t in c["tests"]}
    assert [(r["entity_group"], r["entity_id"], r["status"]) for r in tests["memory"]["results"]] == [
        ("GPU", 0, "Pass"), ("GPU", 1, "Fail")]
    assert tests["memory"]["test_summary"] == {"status": "Fail"}
    # DCGM_FR_VOLATILE_DBE_DETECTED (4), DCGM_FR_EC_HARDWARE_MEMORY (10), DCGM_ERROR_ISOLATE (2): dcgm_errors.h
    assert tests["memory"]["results"][1]["warnings"] == [
        {"warning": "A volatile double-bit ECC error was detected on GPU 1 (2 errors).", "error_id": 4,
         "error_category": 10, "error_severity": 2}]
    assert [r["status"] for r in tests["software"]["results"]] == ["Pass", "Fail"]
    assert doc["metadata"]["Driver Version Detected"] == DRIVER_VERSION
    assert doc["metadata"]["version"]
    assert [e["entity_id"] for e in doc["entity_groups"][0]["entities"]] == [0, 1]


def test_health_watches(env: dict[str, str], engine: str) -> None:
    assert dcgmi(env, "health", "-s", "a", "--host", engine).stdout == "Health monitor systems set successfully.\n"
    healthy = json.loads(dcgmi(env, "health", "-c", "--json", "--host", engine).stdout)
    assert healthy["overall_health"] == "Healthy"
    hardware.inject("nvlink-down", "0", {"link": 3}, env["NVML_SIM_STATE"])
    report = dcgmi(env, "health", "-c", "--host", engine).stdout
    assert "| Overall Health            | Failure" in report
    assert "GPU 0's NvLink link 3 is currently down." in report
    bad = dcgmi(env, "health", "-s", "z", "--host", engine)
    assert (bad.returncode, bad.stdout) == (1, "Error: Invalid health system 'z'\n")


def _gpu(**changes: Any) -> dict[str, Any]:
    doc = make_state(1)
    gpu = doc["gpus"][0]
    for path, value in changes.items():
        target = gpu
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "level", "failing"),
    [
        (_gpu(), 3, []),
        (_gpu(lost=True), 1, ["software"]),
        (_gpu(remapped_rows__failure=1), 2, ["memory"]),
        (_gpu(remapped_rows__pending=1), 1, ["software"]),
        (_gpu(pcie__gen=2), 1, []),
        (_gpu(pcie__gen=2), 2, ["pcie"]),
        (_gpu(clock_event_reasons=0x40), 3, ["diagnostic", "targeted_power"]),
        (_gpu(events=[{"seq": 1, "type": 8, "data": 79}]), 1, ["software"]),
        (_gpu(events=[{"seq": 1, "type": 8, "data": 13}]), 1, []),
    ],
)
def test_diag_rules(doc: dict[str, Any], level: int, failing: list[str]) -> None:
    assert [r.name for r in dcgm_checks.diag(doc, level) if r.status == "Fail"] == failing


def test_exporter_metrics(env: dict[str, str], tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("# test counters\nDCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
                        "DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n"
                        "DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.\n"
                        "DCGM_FI_DRIVER_VERSION, label, Driver Version\n")
    hardware.append_event(1, 43, env["NVML_SIM_STATE"])
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet_sim.tools.dcgm_exporter", "-f", str(counters), "-a",
                             f"127.0.0.1:{port}"], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_port(port, proc)
        assert [c["name"] for c in store.load(env["NVML_SIM_STATE"])["clients"]] == ["dcgm-exporter"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    doc = store.load(env["NVML_SIM_STATE"])
    gpu = doc["gpus"][1]
    labels = (f'gpu="1",UUID="{gpu["uuid"]}",pci_bus_id="00000000:17:00.0",device="nvidia1",'
              f'modelName="NVIDIA A100-SXM4-80GB",Hostname="{socket.gethostname()}",'
              f'DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"')
    lines = body.splitlines()
    assert lines[:2] == ["# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).", "# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
    assert f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 31" in lines
    assert f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} 43" in lines
    assert f"DCGM_FI_DEV_FB_USED{{{labels}}} 595" in lines
    assert "DCGM_FI_DEV_POWER_USAGE" not in body
    assert doc["clients"] == []
