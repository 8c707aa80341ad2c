"""gpu_health's ``dcgm_diag`` check with the simulated DCGM: the real module (ad-hoc Ansible, local connection) runs
the simulated ``dcgmi diag -r 2 -j`` against a simulated ``nv-hostengine`` on a free port, which judges the simulated
driver's state. A fault DCGM's memory test sees makes the check CRITICAL with the test and the GPU in the evidence;
no host engine makes it UNKNOWN. The JSON's shape is DCGM 4.x's (docs/health.md, "DCGM diagnostics")."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gpu_health_faults import build_sim_library, fake_tool, run_health

from gpufleet_sim import hardware, store

ROOT = Path(__file__).resolve().parents[2]
LIB_DIR = ROOT / "build" / "health" / "lib"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    return build_sim_library(LIB_DIR, "570.172.08").parent


@pytest.fixture
def state(tmp_path: Path) -> Path:
    from gpufleet_sim import presets

    doc = presets.build_state("2xA100-40GB", "dcgm")
    doc["require_root"] = False
    for gpu in doc["gpus"]:
        gpu["persistence_mode"] = 1
    return store.create(tmp_path / "state.json", doc)


@pytest.fixture
def engine(state: Path, lib_dir: Path, tmp_path: Path) -> Iterator[str]:
    """A simulated nv-hostengine on a free loopback port; the module finds the simulated ``dcgmi`` on PATH."""
    port = _free_port()
    env = {"PATH": "/usr/bin:/bin", "NVML_SIM_STATE": str(state), "LD_LIBRARY_PATH": str(lib_dir),
           "PYTHONPATH": f"{ROOT / 'simulator' / 'src'}"}
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet_sim.tools.nv_hostengine", "-n", "-p", str(port),
                             "--bind-interface", "127.0.0.1"], env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while True:
        assert proc.poll() is None, proc.communicate()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            assert time.monotonic() < deadline, "nv-hostengine did not listen"
            time.sleep(0.05)
    fake_tool(tmp_path / "bin", "dcgmi", f'exec {sys.executable} -m gpufleet_sim.tools.dcgmi "$@"\n')
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


def _diag(result: dict) -> dict:
    (check,) = [c for c in result["health"]["checks"] if c["name"] == "dcgm_diag"]
    return check


def test_healthy_gpus_pass_dcgm_diag(engine: str, lib_dir: Path, state: Path, tmp_path: Path) -> None:
    _rc, result = run_health(lib_dir, state, tmp_path, fake_bin=tmp_path / "bin", dcgm_diag_level=2,
                             dcgm_host=engine)
    got = _diag(result)
    assert (got["status"], got["level"], got["message"]) == ("ok", "PASS", "dcgmi diag -r 2 -j passed")


def test_memory_test_failure_is_critical_with_the_test_in_the_evidence(engine: str, lib_dir: Path, state: Path,
                                                                      tmp_path: Path) -> None:
    hardware.inject("ecc-uncorrectable", "1", {"count": 2}, path=state)
    _rc, result = run_health(lib_dir, state, tmp_path, fake_bin=tmp_path / "bin", dcgm_diag_level=2,
                             dcgm_host=engine)
    got = _diag(result)
    # The injected double-bit error also raised XID 48, which DCGM's software test reports with severity RESET.
    assert (got["status"], got["level"], got["action"]) == ("fail", "CRITICAL", "reset_gpu")
    assert got["value"] == ["software[gpu 1]", "memory[gpu 1]"]
    memory = [e for e in got["evidence"] if e["test"] == "memory"]
    assert [(e["category"], e["gpu"], e["status"]) for e in memory] == [("Hardware", 1, "Fail")]
    assert memory[0]["warnings"][0]["warning"] == "A volatile double-bit ECC error was detected on GPU 1 (2 errors)."
    assert "memory failed on GPU 1 (A volatile double-bit ECC error was detected on GPU 1 (2 errors).)" in (
        got["message"])
    assert result["health"]["level"] == "CRITICAL"


def test_no_host_engine_is_unknown(lib_dir: Path, state: Path, tmp_path: Path) -> None:
    fake_tool(tmp_path / "bin", "dcgmi", f'exec {sys.executable} -m gpufleet_sim.tools.dcgmi "$@"\n')
    _rc, result = run_health(lib_dir, state, tmp_path, fake_bin=tmp_path / "bin", dcgm_diag_level=1,
                             dcgm_host=f"127.0.0.1:{_free_port()}")
    got = _diag(result)
    assert (got["status"], got["level"]) == ("fail", "UNKNOWN")
    assert got["message"] == (
        "dcgmi diag -r 1 -j gave no DCGM diagnostic JSON (exit 1: Error: Unable to connect to host engine. Host "
        "engine connection invalid/disconnected.); check that the DCGM host engine runs (the nvidia_dcgm role) and "
        "run the command by hand")
