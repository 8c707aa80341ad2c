"""The simulated nvidia-imex and nvidia-imex-ctl: daemons of one NVLink domain on loopback addresses, over real TCP.

Each node has its own root (``NVIDIA_SIM_ROOT``) with its config.cfg and nodes_config.cfg; the domain's state seen by
``nvidia-imex-ctl -N -j`` follows which daemons really answer on their addresses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _toolkit import DRIVER_VERSION, build_lib, make_state, run_tool, tool_env, write_state

from gpufleet_sim.tools.nvidia_imex import CONFIG_TEMPLATE

ADDRESSES = ["127.0.251.1", "127.0.251.2"]
PORT, CMD_PORT = 51731, 51736


def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


@pytest.fixture(scope="module")
def libdir() -> Path:
    return build_lib()


@pytest.fixture
def node_env(tmp_path: Path, libdir: Path) -> Callable[..., dict[str, str]]:
    def make(address: str, nodes: list[str], version: str = DRIVER_VERSION) -> dict[str, str]:
        root = tmp_path / address
        (root / "etc/nvidia-imex").mkdir(parents=True)
        config = CONFIG_TEMPLATE.replace("SERVER_PORT=50000", f"SERVER_PORT={PORT}")
        config = config.replace("IMEX_CMD_PORT=50005", f"IMEX_CMD_PORT={CMD_PORT}")
        config = config.replace("BIND_INTERFACE_IP=\n", f"BIND_INTERFACE_IP={address}\n")
        config = config.replace("IMEX_CMD_BIND_INTERFACE_IP=\n", f"IMEX_CMD_BIND_INTERFACE_IP={address}\n")
        (root / "etc/nvidia-imex/config.cfg").write_text(config, encoding="utf-8")
        (root / "etc/nvidia-imex/nodes_config.cfg").write_text("".join(f"{n}\n" for n in nodes), encoding="utf-8")
        state = write_state(tmp_path / f"{address}.json", make_state(4))
        return tool_env(state, libdir, NVIDIA_SIM_ROOT=str(root), GPUSIM_TOOL_VERSION=version)
    return make


@pytest.fixture
def daemons() -> Iterator[list[Path]]:
    pid_files: list[Path] = []
    yield pid_files
    for pid_file in pid_files:
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            continue


def start(env: dict[str, str], daemons: list[Path]) -> subprocess.CompletedProcess[str]:
    result = run_tool("nvidia_imex", [], env)
    daemons.append(Path(env["NVIDIA_SIM_ROOT"]) / "var/run/nvidia-imex/nv-imex.pid")
    return result


def domain(env: dict[str, str]) -> dict[str, Any]:
    result = run_tool("nvidia_imex_ctl", ["-N", "-j"], env)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def view(env: dict[str, str]) -> tuple[str, list[tuple[str, str, list[str]]]]:
    doc = domain(env)
    return doc["status"], [(n["host"], n["status"], [c["status"] for c in n["connections"].values()])
                           for n in doc["nodes"].values()]


def test_the_domain_follows_the_peers_that_really_answer(node_env: Callable[..., dict[str, str]],
                                                         daemons: list[Path]) -> None:
    a, b = (node_env(address, ADDRESSES) for address in ADDRESSES)
    assert start(a, daemons).returncode == 0
    assert view(a) == ("DEGRADED", [("127.0.251.1", "READY", ["CONNECTED", "NEVER_CONNECTED"]),
                                    ("127.0.251.2", "UNAVAILABLE", ["INVALID", "INVALID"])])

    assert start(b, daemons).returncode == 0  # a node that comes later joins without a restart of the first
    up = ("UP", [("127.0.251.1", "READY", ["CONNECTED", "CONNECTED"]),
                 ("127.0.251.2", "READY", ["CONNECTED", "CONNECTED"])])
    wait_for(lambda: view(a) == up and view(b) == up)
    node = domain(a)["nodes"]["1"]
    assert (node["version"], "hostName" in node) == (DRIVER_VERSION, False)
    assert run_tool("nvidia_imex_ctl", ["-q"], a).stdout == "READY\n"

    os.kill(int(daemons[1].read_text()), signal.SIGTERM)  # the second tray goes away
    wait_for(lambda: view(a) == ("DEGRADED", [("127.0.251.1", "READY", ["CONNECTED", "DISCONNECTED"]),
                                              ("127.0.251.2", "UNAVAILABLE", ["INVALID", "INVALID"])]), timeout=10)
    down = run_tool("nvidia_imex_ctl", ["-N", "-j"], b)
    assert (down.returncode, down.stdout, down.stderr) == (
        255, "", f"Connection to IMEX command service at 127.0.251.2:{CMD_PORT} failed: Connection refused\n")


def test_a_driver_of_another_version_is_refused(node_env: Callable[..., dict[str, str]],
                                                daemons: list[Path]) -> None:
    env = node_env(ADDRESSES[0], ADDRESSES, version="580.95.05")
    result = start(env, daemons)
    assert (result.returncode, result.stderr) == (
        1, f"NvGpu Library version 580.95.05 is not matching with current GPU driver version {DRIVER_VERSION}\n")


def test_a_node_file_entry_that_is_no_address_is_refused(node_env: Callable[..., dict[str, str]],
                                                         daemons: list[Path]) -> None:
    env = node_env(ADDRESSES[0], [ADDRESSES[0], "tray-2"])
    result = start(env, daemons)
    nodes = Path(env["NVIDIA_SIM_ROOT"]) / "etc/nvidia-imex/nodes_config.cfg"
    assert (result.returncode, result.stderr) == (
        1, f"invalid IP address 'tray-2' on line 2 of IMEX node config file {nodes}\n")
