"""Issue 13 (MIG apply, safe under faults) on the simulated driver: a failing or lost GPU is isolated, the host
lock serialises writers, GPU indexes are checked, and the host-side transaction restarts the GPU clients and
records the truth.

Real path: ``ansible localhost -c local -m gpufleet.nvidia.nvidia_mig`` and the role's entry point
(roles/nvidia_mig/files/gpufleet-mig-apply.py) over the simulator's ``libnvidia-ml.so.1``; faults come from the
simulator's own injection (``gpufleet_sim.hardware``: nvml-error on one call and GPU, fallen-off-bus).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mig_sim import COLLECTIONS, ROOT, VENV_PYTHON, mig_layout, new_state, run_module, sim_env, sim_lib_dir
from ansible_collections.gpufleet.nvidia.plugins.module_utils.mig_apply import host_lock

from gpufleet_sim import hardware

SCRIPT = ROOT / "roles" / "nvidia_mig" / "files" / "gpufleet-mig-apply.py"
SEVEN_1G = [{"devices": "all", "mig_enabled": True, "gpu_instances": {"1g.10gb": 7}}]
TWO_3G = [{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.40gb": 2}}]
OLD = [("1g.10gb", s, [1]) for s in range(7)]  # NVIDIA's A100 1g.10gb placements: starts 0-6
NEW = [("3g.40gb", 0, [3]), ("3g.40gb", 4, [3])]  # 3g.40gb placements: starts 0 and 4


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    return sim_lib_dir()


def apply(lib_dir: Path, state: Path, tmp: Path, layout: list[dict[str, Any]], **params: Any
          ) -> tuple[int, dict[str, Any]]:
    params.setdefault("lock_file", str(tmp / "run" / "mig.lock"))
    return run_module("nvidia_mig", {"layout": layout, **params}, lib_dir, state, tmp)


def seven_1g_host(lib_dir: Path, tmp: Path) -> Path:
    state = new_state(tmp / "state.json", "8xA100")
    rc, result = apply(lib_dir, state, tmp, SEVEN_1G)
    assert rc == 0, result.get("msg")
    assert mig_layout(state) == [OLD] * 8
    return state


def test_create_failing_on_one_gpu_leaves_only_that_gpu_short(lib_dir: Path, tmp_path: Path) -> None:
    state = seven_1g_host(lib_dir, tmp_path)
    hardware.inject("nvml-error", 5, {"function": "nvmlDeviceCreateGpuInstanceWithPlacement", "code": 999},
                    path=state)
    rc, result = apply(lib_dir, state, tmp_path, TWO_3G)
    assert rc != 0
    assert result["msg"].startswith("nvmlDeviceCreateGpuInstanceWithPlacement failed on GPU 5: Unknown Error")
    assert "(GPUs done: 0, 1, 2, 3, 4, 6, 7; failed: 5; untouched: none;" in result["msg"]
    layouts = mig_layout(state)
    assert layouts[:5] + layouts[6:] == [NEW] * 7
    assert layouts[5] == []  # only the failing GPU is short of both layouts
    hardware.clear("nvml-error", 5, path=state)
    rc, result = apply(lib_dir, state, tmp_path, TWO_3G)
    assert (rc, result["changed_gpus"]) == (0, [5]), result.get("msg")
    assert mig_layout(state) == [NEW] * 8


def test_gpu_lost_mid_apply_the_others_converge_and_the_run_names_it(lib_dir: Path, tmp_path: Path) -> None:
    state = seven_1g_host(lib_dir, tmp_path)
    hardware.inject("nvml-error", 2, {"function": "nvmlDeviceCreateGpuInstanceWithPlacement", "code": 15},
                    path=state)
    rc, result = apply(lib_dir, state, tmp_path, TWO_3G)
    assert rc != 0
    assert result["msg"].startswith("nvmlDeviceCreateGpuInstanceWithPlacement failed on GPU 2: GPU is lost "
                                    "(NVML error 15)")
    assert "failed: 2, lost: 2;" in result["msg"]
    assert [g["index"] for g in result["gpu_status"] if g["lost"]] == [2]
    layouts = mig_layout(state)
    assert layouts[:2] + layouts[3:] == [NEW] * 7


def test_gpu_off_the_bus_healthy_gpus_converge(lib_dir: Path, tmp_path: Path) -> None:
    state = seven_1g_host(lib_dir, tmp_path)
    hardware.inject("fallen-off-bus", 3, {}, path=state)
    rc, result = apply(lib_dir, state, tmp_path, TWO_3G)
    assert rc != 0
    assert result["msg"].startswith("nvmlDeviceGetHandleByIndex failed on GPU 3: GPU is lost (NVML error 15)")
    assert "(GPUs done: 0, 1, 2, 4, 5, 6, 7; failed: 3, lost: 3; untouched: none;" in result["msg"]
    layouts = mig_layout(state)
    assert layouts[:3] + layouts[4:] == [NEW] * 7
    assert layouts[3] == OLD  # the lost GPU was not touched
    rc, result = apply(lib_dir, state, tmp_path, TWO_3G, gpus=[0, 1, 2, 4, 5, 6, 7])
    assert (rc, result["changed"]) == (0, False), result.get("msg")
    assert [g["status"] for g in result["gpu_status"]] == ["untouched"] * 7


def test_boot_unit_applies_what_it_can(lib_dir: Path, tmp_path: Path) -> None:
    state = new_state(tmp_path / "state.json", "8xA100")
    hardware.inject("fallen-off-bus", 6, {}, path=state)
    record = tmp_path / "mig-state.json"
    record.write_text(json.dumps({"layout_name": "two-3g", "layout": TWO_3G, "gpu_indexes": None,
                                  "allow_reset": True, "state": "success", "gpus": []}), encoding="utf-8")
    done = boot(lib_dir, state, tmp_path, "--state", str(record))
    assert done.returncode == 1
    assert "gpufleet-mig-apply: layout 'two-3g' failed: nvmlDeviceGetHandleByIndex failed on GPU 6: GPU is lost" \
        in done.stderr
    layouts = mig_layout(state)
    assert layouts[:6] + layouts[7:] == [NEW] * 7


def test_unknown_or_repeated_gpu_index_is_refused_before_any_change(lib_dir: Path, tmp_path: Path) -> None:
    state = new_state(tmp_path / "state.json", "8xA100")
    before = state.read_bytes()
    rc, result = apply(lib_dir, state, tmp_path, TWO_3G, gpus=[99])
    assert rc != 0
    assert result["msg"] == "gpus: GPU 99 is not on this host (it has GPUs 0-7); list only its GPUs"
    rc, result = apply(lib_dir, state, tmp_path, TWO_3G, gpus=[1, 1])
    assert result["msg"] == "gpus: GPU 1 is listed twice; list each GPU once"
    assert state.read_bytes() == before


def test_second_writer_waits_then_refuses_naming_the_holder(lib_dir: Path, tmp_path: Path) -> None:
    state = new_state(tmp_path / "state.json", "8xA100")
    before = state.read_bytes()
    lock = tmp_path / "run" / "mig.lock"
    with host_lock(str(lock), 0, "test holder"):
        started = time.monotonic()
        rc, result = apply(lib_dir, state, tmp_path, TWO_3G, lock_timeout=2)
        waited = time.monotonic() - started
    assert rc != 0
    assert result["error_type"] == "LockBusy"
    assert result["msg"].startswith(f"another gpufleet MIG run holds the host lock {lock} (pid ")
    assert "(test holder) since " in result["msg"]
    assert result["msg"].endswith("waited 2 s and changed nothing; let it finish, or raise lock_timeout")
    assert waited >= 2
    assert state.read_bytes() == before
    rc, result = apply(lib_dir, state, tmp_path, TWO_3G)  # released: the next run goes through
    assert rc == 0, result.get("msg")


def boot(lib_dir: Path, state: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = sim_env(lib_dir, state, tmp, GPUFLEET_MIG_LIB=str(COLLECTIONS))
    return subprocess.run([VENV_PYTHON, str(SCRIPT), "--lock-file", str(tmp / "run" / "mig.lock"), *args],
                          env=env, capture_output=True, text=True, check=False, timeout=300)


def test_two_concurrent_applies_never_interleave(lib_dir: Path, tmp_path: Path) -> None:
    state = seven_1g_host(lib_dir, tmp_path)
    record = tmp_path / "mig-state.json"
    record.write_text(json.dumps({"layout_name": "two-3g", "layout": TWO_3G, "gpu_indexes": None,
                                  "allow_reset": True, "state": "success", "gpus": []}), encoding="utf-8")
    env = sim_env(lib_dir, state, tmp_path, GPUFLEET_MIG_LIB=str(COLLECTIONS))
    argv = [VENV_PYTHON, str(SCRIPT), "--lock-file", str(tmp_path / "run" / "mig.lock"), "--state", str(record),
            "--json"]
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=300) for p in (first, second)]
    assert (first.returncode, second.returncode) == (0, 0), outs
    results = sorted((json.loads(out)["changed"] for out, _ in outs))
    assert results == [False, True]  # one applied, the other waited and found nothing left to do
    assert mig_layout(state) == [NEW] * 8


def transaction_env(lib_dir: Path, state: Path, tmp: Path, stop_delay: float) -> dict[str, str]:
    """A ``systemctl`` on PATH that records its argv (the recorded commands are what the test checks)."""
    bin_dir = tmp / "systemctl-bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "systemctl"
    tool.write_text(f'#!/bin/sh\necho "$*" >> "{tmp}/systemctl.log"\n'
                    f'[ "$1" = stop ] && sleep {stop_delay}\nexit 0\n', encoding="utf-8")
    tool.chmod(0o755)
    env = sim_env(lib_dir, state, tmp, GPUFLEET_MIG_LIB=str(COLLECTIONS))
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env


def request(tmp: Path) -> Path:
    path = tmp / "mig-request.json"
    path.write_text(json.dumps({"managed_by": "gpufleet.nvidia.nvidia_mig", "layout_name": "two-3g",
                                "layout": TWO_3G, "gpu_indexes": None, "allow_reset": True, "gpus": []}),
                    encoding="utf-8")
    return path


def transaction_argv(tmp: Path) -> list[str]:
    return [VENV_PYTHON, str(SCRIPT), "--lock-file", str(tmp / "run" / "mig.lock"), "--transaction",
            "--request", str(request(tmp)), "--state", str(tmp / "mig-state.json"),
            "--result", str(tmp / "result.json"), "--stop-client=nvidia-persistenced",
            "--stop-client=nvidia-dcgm"]


def test_transaction_stops_applies_restarts_and_records(lib_dir: Path, tmp_path: Path) -> None:
    state = seven_1g_host(lib_dir, tmp_path)
    env = transaction_env(lib_dir, state, tmp_path, 0)
    done = subprocess.run(transaction_argv(tmp_path), env=env, capture_output=True, text=True, check=False,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "systemctl.log").read_text(encoding="utf-8").splitlines() == [
        "stop nvidia-dcgm", "stop nvidia-persistenced", "start nvidia-persistenced", "start nvidia-dcgm"]
    record = json.loads((tmp_path / "mig-state.json").read_text(encoding="utf-8"))
    assert (record["state"], record["layout_name"]) == ("success", "two-3g")
    assert [[gi["profile_name"] for gi in g["gpu_instances"]] for g in record["gpus"]] == [["3g.40gb"] * 2] * 8
    outcome = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert (outcome["failed"], outcome["stopped_clients"]) == (False, ["nvidia-dcgm", "nvidia-persistenced"])
    assert mig_layout(state) == [NEW] * 8


def test_transaction_terminated_midway_starts_the_clients_again(lib_dir: Path, tmp_path: Path) -> None:
    state = seven_1g_host(lib_dir, tmp_path)
    before = state.read_bytes()
    env = transaction_env(lib_dir, state, tmp_path, 3)
    proc = subprocess.Popen(transaction_argv(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    log = tmp_path / "systemctl.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and "stop nvidia-persistenced" in log.read_text(encoding="utf-8")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.terminate()  # what systemd sends when the unit's RuntimeMaxSec is reached or it is stopped
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "gpufleet-mig-apply: layout 'two-3g' failed: stopped by signal SIGTERM" in err
    assert log.read_text(encoding="utf-8").splitlines() == [
        "stop nvidia-dcgm", "stop nvidia-persistenced", "start nvidia-persistenced", "start nvidia-dcgm"]
    record = json.loads((tmp_path / "mig-state.json").read_text(encoding="utf-8"))
    assert record["state"] == "failed"
    assert state.read_bytes() == before  # stopped before the apply began: no GPU touched
