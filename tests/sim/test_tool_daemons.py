"""The daemons: nvidia-persistenced, nv-fabricmanager, nvidia-cuda-mps-control (clients, pid files, messages)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import DRIVER_VERSION, build_lib, make_state, run_tool, tool_env, write_state

from gpufleet_sim import store


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


@pytest.fixture
def env(tmp_path: Path, libdir: Path) -> dict[str, str]:
    state = write_state(tmp_path / "state.json", make_state(2, nvswitch=True))
    return tool_env(state, libdir, NVIDIA_SIM_ROOT=str(tmp_path / "root"),
                    CUDA_MPS_PIPE_DIRECTORY=str(tmp_path / "mps"), CUDA_MPS_LOG_DIRECTORY=str(tmp_path / "mpslog"))


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


def clients(env: dict[str, str]) -> list[str]:
    return [c["name"] for c in store.load(env["NVML_SIM_STATE"])["clients"]]


def test_persistenced_forks_sets_persistence_and_cleans_up(env: dict[str, str]) -> None:
    result = run_tool("nvidia_persistenced", ["--verbose"], env)
    assert result.returncode == 0, result.stderr
    pid_file = Path(env["NVIDIA_SIM_ROOT"]) / "var/run/nvidia-persistenced/nvidia-persistenced.pid"
    pid = int(pid_file.read_text())
    try:
        gpus = store.load(env["NVML_SIM_STATE"])["gpus"]
        assert [g["persistence_mode"] for g in gpus] == [1, 1]
        assert clients(env) == ["nvidia-persistenced"]
        again = run_tool("nvidia_persistenced", [], env)
        assert (again.returncode, again.stderr) == (
            1, "nvidia-persistenced failed to initialize. Check syslog for more details.\n")
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not pid_file.exists())
    doc = store.load(env["NVML_SIM_STATE"])
    assert [g["persistence_mode"] for g in doc["gpus"]] == [0, 0]
    assert doc["clients"] == []


def test_fabricmanager_refuses_other_driver_version(env: dict[str, str]) -> None:
    result = run_tool("nv_fabricmanager", ["--foreground"], {**env, "GPUSIM_TOOL_VERSION": "550.163.01"})
    assert result.returncode == 1
    assert result.stderr == ("fabric manager NVIDIA GPU driver interface version 550.163.01 don't match with driver "
                             f"version {DRIVER_VERSION}. Please update with matching NVIDIA driver package.\n")


def test_fabricmanager_without_nvswitch_exits(env: dict[str, str]) -> None:
    doc = store.load(env["NVML_SIM_STATE"])
    del doc["nvswitch"]
    store.create(env["NVML_SIM_STATE"], doc)
    result = run_tool("nv_fabricmanager", ["--foreground"], {**env, "GPUSIM_TOOL_VERSION": DRIVER_VERSION})
    assert result.returncode == 1
    assert "[NV_WARN_NOTHING_TO_DO]" in result.stderr


def test_fabricmanager_configures_switches(env: dict[str, str], started: list[subprocess.Popen[str]]) -> None:
    proc = spawn("nv_fabricmanager", ["--foreground"], {**env, "GPUSIM_TOOL_VERSION": DRIVER_VERSION})
    started.append(proc)
    log = Path(env["NVIDIA_SIM_ROOT"]) / "var/log/fabricmanager.log"
    wait_for(lambda: log.exists() and "Successfully configured all the available NVSwitches" in log.read_text())
    assert clients(env) == ["nv-fabricmanager"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    assert clients(env) == []


def test_mps_control_daemon(env: dict[str, str]) -> None:
    assert run_tool("nvidia_cuda_mps_control", [], env, stdin="get_server_list\n").stdout == (
        "Cannot find MPS control daemon process\n")
    assert run_tool("nvidia_cuda_mps_control", ["-d"], env).returncode == 0
    pipe = Path(env["CUDA_MPS_PIPE_DIRECTORY"])
    pid = int((pipe / "nvidia-cuda-mps-control.pid").read_text())
    try:
        assert (pipe / "control").is_socket()
        commands = ("set_default_active_thread_percentage 25\nget_default_active_thread_percentage\n"
                    "set_default_device_pinned_mem_limit 0 4096M\nget_default_device_pinned_mem_limit 0\n"
                    "get_server_list\n")
        assert run_tool("nvidia_cuda_mps_control", [], env, stdin=commands).stdout == "25.0\n25.0\n4096M\n"
        connect = subprocess.run([sys.executable, "-m", "gpufleet_sim.cli", "mps-client", "connect", "--pid",
                                  str(os.getpid()), "--uid", "1000"], env=env, text=True, capture_output=True,
                                 check=False)
        assert connect.returncode == 0, connect.stderr
        server = int(run_tool("nvidia_cuda_mps_control", [], env, stdin="get_server_list\n").stdout)
        assert connect.stdout == f"client {os.getpid()} connected to MPS server {server}\n"
        clients_out = run_tool("nvidia_cuda_mps_control", [], env, stdin=f"get_client_list {server}\n").stdout
        assert clients_out == f"{os.getpid()}\n"
        procs = [p["name"] for g in store.load(env["NVML_SIM_STATE"])["gpus"] for p in g["processes"]]
        assert procs == ["nvidia-cuda-mps-server", "nvidia-cuda-mps-server"]
        assert "nvidia-cuda-mps-control" in clients(env)
        assert run_tool("nvidia_cuda_mps_control", [], env, stdin="quit\n").returncode == 0
    finally:
        wait_for(lambda: not (pipe / "nvidia-cuda-mps-control.pid").exists())
        if (pipe / "nvidia-cuda-mps-control.pid").exists():
            os.kill(pid, signal.SIGTERM)
    doc = store.load(env["NVML_SIM_STATE"])
    assert [g["processes"] for g in doc["gpus"]] == [[], []]
    assert doc["clients"] == []
    log = Path(env["CUDA_MPS_LOG_DIRECTORY"]) / "control.log"
    assert "Starting control daemon" in log.read_text()
