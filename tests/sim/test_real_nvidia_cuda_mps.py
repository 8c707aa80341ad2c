"""NVIDIA's own nvidia-cuda-mps-control (535.261.03, Debian bookworm non-free) on a simulated host.

The control daemon links neither NVML nor CUDA: it starts, answers its control commands and stops on the simulated
host as on a real one. The MPS server it launches for a user (``nvidia-cuda-mps-server``) dlopens ``libcuda.so.1``
and calls ``cuGetExportTable``; the simulator provides no CUDA driver library, so that server exits with status 1
at once - what docs/simulator.md's client table says. tests/sim/_realclients.py fetches the package (a failed fetch
fails these tests, never skips them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _realclients import DRIVER_VERSION, REPO, RealClientError, RealClients, fetch

from gpufleet_sim.presets import build_state

CONTROL = "nvidia-cuda-mps-control"


@pytest.fixture(scope="module")
def real() -> RealClients:
    """NVIDIA's unpacked clients; a fetch failure is a test failure, never a skip."""
    try:
        return fetch()
    except RealClientError as exc:
        pytest.fail(f"NVIDIA's nvidia-cuda-mps could not be fetched: {exc}")


@pytest.fixture(scope="module")
def lib535() -> Path:
    from gpufleet_sim.build import build_library

    return build_library(REPO / "build" / "sim-test-535", DRIVER_VERSION).parent


def _wait_for(check: Callable[[], bool], seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class MpsHost:
    """A simulated host (state file) with private MPS pipe and log directories."""

    real: RealClients
    libdir: Path
    state: Path
    pipe: Path
    log: Path

    def env(self) -> dict[str, str]:
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe), "CUDA_MPS_LOG_DIRECTORY": str(self.log)}

    def control(self, *commands: str, rc: int | None = 0) -> subprocess.CompletedProcess[str]:
        """Send ``commands`` to the daemon through NVIDIA's front end (stdin); fail unless it exits ``rc`` (any
        exit code when ``rc`` is None)."""
        proc = self.real.run(CONTROL, [], self.libdir, self.state, timeout=30,
                             input="".join(f"{c}\n" for c in commands), extra_env=self.env())
        assert rc is None or proc.returncode == rc, f"{commands}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
        return proc

    def control_log(self) -> str:
        path = self.log / "control.log"
        return path.read_text(encoding="utf-8") if path.exists() else ""


@pytest.fixture
def mps_host(real: RealClients, lib535: Path) -> Iterator[MpsHost]:
    # a unix socket path holds 108 bytes: a short private folder, not pytest's deep tmp_path
    base = Path(tempfile.mkdtemp(prefix="mps-"))
    (base / "pipe").mkdir()
    (base / "log").mkdir()
    state = base / "state.json"
    state.write_text(json.dumps(build_state("2xA100-40GB", "mps")), encoding="utf-8")
    host = MpsHost(real, lib535, state, base / "pipe", base / "log")
    yield host
    # a daemon a failed test left behind: stop the one this test started, by its pid in its own log
    for pid in {int(p) for p in re.findall(r"Control +(\d+)\]", host.control_log())}:
        if _alive(pid):
            os.kill(pid, 15)
    shutil.rmtree(base, ignore_errors=True)


def test_without_a_daemon_both_front_ends_say_so(mps_host: MpsHost) -> None:
    theirs = mps_host.control("get_server_list", rc=1)
    env = {**mps_host.real.env(mps_host.libdir, mps_host.state, mps_host.env()),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    ours = subprocess.run([sys.executable, "-m", "gpufleet_sim.tools.nvidia_cuda_mps_control"],
                          input="get_server_list\n", env=env, capture_output=True, text=True, timeout=30, check=False)
    assert (theirs.stdout + theirs.stderr).strip() == "Cannot find MPS control daemon process"
    assert [ours.returncode, (ours.stdout + ours.stderr).strip()] == [1, "Cannot find MPS control daemon process"]


def _start_daemon(mps_host: MpsHost) -> int:
    """Start NVIDIA's control daemon (``-d``, it forks); return its pid from its log."""
    started = subprocess.run([str(mps_host.real.path(CONTROL)), "-d"],
                             env=mps_host.real.env(mps_host.libdir, mps_host.state, mps_host.env()),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, timeout=30, check=False)
    assert started.returncode == 0, started.stderr
    assert _wait_for(lambda: (mps_host.pipe / "control").is_socket())
    line = r"Control +(\d+)\] Starting control daemon using socket " + re.escape(str(mps_host.pipe / "control"))
    assert _wait_for(lambda: re.search(line, mps_host.control_log()) is not None), mps_host.control_log()
    match = re.search(line, mps_host.control_log())
    assert match
    daemon = int(match.group(1))
    assert _alive(daemon)
    return daemon


def test_nvidias_control_daemon_runs_on_the_simulated_host(mps_host: MpsHost) -> None:
    before = mps_host.state.read_bytes()
    daemon = _start_daemon(mps_host)
    assert mps_host.control("get_server_list").stdout == ""
    assert mps_host.control("get_default_active_thread_percentage").stdout == "100.0\n"
    assert mps_host.control("set_default_active_thread_percentage 25").stdout == "25.0\n"
    assert mps_host.control("get_default_active_thread_percentage").stdout == "25.0\n"
    mps_host.control("quit")
    assert _wait_for(lambda: not _alive(daemon)), "the control daemon did not stop on quit"
    assert mps_host.state.read_bytes() == before  # the control daemon never touches the GPUs


def test_nvidias_mps_server_cannot_start_without_libcuda(mps_host: MpsHost) -> None:
    """The server needs the CUDA driver library, which the simulator does not provide: the daemon launches it,
    logs its exit (status 1), lists no server, and still stops on quit."""
    daemon = _start_daemon(mps_host)
    mps_host.control(f"start_server -uid {os.getuid()}")
    assert _wait_for(lambda: re.search(r"Server \d+ exited with status 1", mps_host.control_log()) is not None), \
        mps_host.control_log()
    assert re.search(rf"Starting new server \d+ for user {os.getuid()}", mps_host.control_log())
    assert mps_host.control("get_server_list").stdout == ""
    server = mps_host.real.run("nvidia-cuda-mps-server", [], mps_host.libdir, mps_host.state, timeout=30,
                               extra_env=mps_host.env())
    assert server.returncode == 1
    assert b"libcuda.so.1\x00" in mps_host.real.path("nvidia-cuda-mps-server").read_bytes()
    assert not (mps_host.libdir / "libcuda.so.1").exists()
    # its exit status after a failed server is 1 or 0 depending on the commands in between: not asserted
    mps_host.control("quit", rc=None)
    assert _wait_for(lambda: not _alive(daemon)), "the control daemon did not stop on quit"
