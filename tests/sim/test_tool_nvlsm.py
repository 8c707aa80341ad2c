"""The simulated NVLink Subnet Manager (nvlsm) and the NVSwitch-generation-aware fabric manager on an HGX B200:
the fabric manager waits for nvlsm, and the GPUs' fabric completes (through the unmodified pynvml) only once both run.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import DRIVER_VERSION, build_lib, run_tool, tool_env, write_state

from gpufleet_sim import store
from gpufleet_sim.presets import build_state

CONFIGURED = "Successfully configured all the available NVSwitches"
WAITING = ("waiting for the NVLink Subnet Manager (nvlsm): no subnet manager is running; the GPUs' fabric "
           "registration stays in progress until it runs")
FABRIC_STATES = """
import json, ctypes, pynvml as N
N.nvmlInit()
out = []
for i in range(N.nvmlDeviceGetCount()):
    info = N.c_nvmlGpuFabricInfoV_t()
    N.nvmlDeviceGetGpuFabricInfoV(N.nvmlDeviceGetHandleByIndex(i), ctypes.byref(info))
    out.append(info.state)
print(json.dumps(out))
"""


def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


@pytest.fixture(scope="module")
def libdir() -> Path:
    return build_lib()


def _env(tmp_path: Path, libdir: Path, preset: str) -> dict[str, str]:
    state = write_state(tmp_path / "state.json", build_state(preset, "hgx-1"))
    return tool_env(state, libdir, NVIDIA_SIM_ROOT=str(tmp_path / "root"), GPUSIM_TOOL_VERSION=DRIVER_VERSION)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def spawn(module: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", f"gpufleet_sim.tools.{module}", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def fabric_states(env: dict[str, str]) -> list[int]:
    proc = subprocess.run([sys.executable, "-c", FABRIC_STATES], env=env, capture_output=True, text=True,
                          check=True, timeout=60)
    return list(json.loads(proc.stdout))


def clients(env: dict[str, str]) -> list[str]:
    return sorted(c["name"] for c in store.load(env["NVML_SIM_STATE"])["clients"])


def test_nvlsm_refuses_a_driver_of_another_version(tmp_path: Path, libdir: Path) -> None:
    env = _env(tmp_path, libdir, "8xB200-NVSwitch")
    result = run_tool("nvlsm", [], {**env, "GPUSIM_TOOL_VERSION": "580.105.08"})
    assert (result.returncode, result.stderr) == (
        1, f"nvlsm: NVLSM version 580.105.08 does not match the NVIDIA driver version {DRIVER_VERSION}; install the "
           "nvlsm package of the driver's version.\n")


@pytest.mark.parametrize("preset", ["8xH100-NVSwitch", "1xH200"])
def test_nvlsm_refuses_a_system_without_nvlink5_switches(tmp_path: Path, libdir: Path, preset: str) -> None:
    env = _env(tmp_path, libdir, preset)
    result = run_tool("nvlsm", [], env)
    assert (result.returncode, result.stderr) == (
        1, "nvlsm: no NVSwitch management port found: this system has no NVLink 5 switch (NVLSM is for "
           "fourth-generation NVSwitch systems)\n")


def test_fabric_manager_waits_for_nvlsm_on_nvlink5(tmp_path: Path, libdir: Path,
                                                   started: list[subprocess.Popen[str]]) -> None:
    env = _env(tmp_path, libdir, "8xB200-NVSwitch")
    fm_log = Path(env["NVIDIA_SIM_ROOT"]) / "var/log/fabricmanager.log"
    fm = spawn("nv_fabricmanager", ["--foreground"], env)
    started.append(fm)
    wait_for(lambda: fm_log.exists() and WAITING in fm_log.read_text())
    assert CONFIGURED not in fm_log.read_text()
    assert fabric_states(env) == [2] * 8                      # In Progress on every GPU
    sm = spawn("nvlsm", [], env)
    started.append(sm)
    wait_for(lambda: CONFIGURED in fm_log.read_text())
    assert clients(env) == ["nv-fabricmanager", "nvlsm"]
    assert fabric_states(env) == [3] * 8                      # Completed
    assert "SUBNET UP: 2 NVSwitch devices discovered and configured" in (
        Path(env["NVIDIA_SIM_ROOT"]) / "var/log/nvlsm.log").read_text()
    sm.send_signal(signal.SIGTERM)
    assert sm.wait(20) == 0
    assert fabric_states(env) == [2] * 8                      # the subnet manager gone: back in progress
    fm.send_signal(signal.SIGTERM)
    assert fm.wait(20) == 0
    assert clients(env) == []
    assert fabric_states(env) == [1] * 8                      # Not Started


def test_fabric_manager_on_hopper_needs_no_nvlsm(tmp_path: Path, libdir: Path,
                                                 started: list[subprocess.Popen[str]]) -> None:
    env = _env(tmp_path, libdir, "8xH100-NVSwitch")
    fm_log = Path(env["NVIDIA_SIM_ROOT"]) / "var/log/fabricmanager.log"
    fm = spawn("nv_fabricmanager", ["--foreground"], env)
    started.append(fm)
    wait_for(lambda: fm_log.exists() and CONFIGURED in fm_log.read_text())
    assert "NVLink Subnet Manager" not in fm_log.read_text()
    assert fabric_states(env) == [3] * 8
