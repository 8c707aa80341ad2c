"""Simulated NVML across processes: a concurrent create race, and mutations refused to non-root callers."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

RACERS = 10

RACE = """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
go = os.environ["NVML_SIM_STATE"] + ".go"
while not os.path.exists(go):
    time.sleep(0.005)
try:
    i = N.nvmlGpuInstanceGetInfo(N.nvmlDeviceCreateGpuInstance(h, 19))
    R["result"] = [0, i.id, i.placement.start]
except N.NVMLError as e:
    R["result"] = [e.value]
"""


def test_ten_processes_race_for_seven_1g_slots(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    sim = nvml_sim("2xA100-40GB", seed="race")
    sim.write(mig_on(sim.read(), 0))
    procs = [subprocess.Popen(sim.command(RACE), env=sim.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(RACERS)]
    time.sleep(0.5)
    sim.state_path.with_name("state.json.go").touch()
    results = []
    for proc in procs:
        out, errs = proc.communicate(timeout=60)
        assert proc.returncode == 0, errs
        results.append(out)
    ok = [r for r in results if '"result": [0,' in r]
    refused = [r for r in results if '"result": [23]' in r]
    assert (len(ok), len(refused)) == (7, 3)
    gis = sim.read()["gpus"][0]["mig"]["gpu_instances"]
    assert sorted((g["id"], g["start"], g["size"], g["profile_id"]) for g in gis) == [
        (7 + s, s, 1, 19) for s in range(7)]
    assert not list(sim.state_path.parent.glob("state.json.tmp.*"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a scenario as nobody")
def test_non_root_can_read_but_not_change(nvml_sim: Callable[..., Any], mig_on: Callable[..., Any]) -> None:
    sim = nvml_sim("8xA100", public=True)
    sim.write(mig_on(sim.read(), 1))
    before = sim.state_path.read_bytes()
    r = sim.run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(1)
        R["read"] = [N.nvmlDeviceGetName(h), N.nvmlDeviceGetMigMode(h), os.geteuid()]
        R["set_mig"] = err(N.nvmlDeviceSetMigMode, h, 0)
        R["create"] = err(N.nvmlDeviceCreateGpuInstance, h, 19)
        R["persistence"] = err(N.nvmlDeviceSetPersistenceMode, h, 1)
        R["compute_mode"] = code(N.nvmlDeviceSetComputeMode, h, 3)
        R["power"] = code(N.nvmlDeviceSetPowerManagementLimit, h, 300000)
    """, user="nobody")
    assert r == {"read": ["NVIDIA A100-SXM4-80GB", [1, 1], 65534], "set_mig": [4, "Insufficient Permissions"],
                 "create": [4, "Insufficient Permissions"], "persistence": [4, "Insufficient Permissions"],
                 "compute_mode": 4, "power": 4}
    assert sim.state_path.read_bytes() == before
    # the file permissions alone also refuse, when the state does not ask for root
    with sim.edit() as doc:
        doc["require_root"] = False
    r = sim.run("""
        N.nvmlInit()
        R["persistence"] = err(N.nvmlDeviceSetPersistenceMode, N.nvmlDeviceGetHandleByIndex(0), 1)
    """, user="nobody")
    assert r == {"persistence": [4, "Insufficient Permissions"]}
    r = sim.run("""
        N.nvmlInit()
        N.nvmlDeviceSetPersistenceMode(N.nvmlDeviceGetHandleByIndex(0), 1)
        R["root"] = N.nvmlDeviceGetPersistenceMode(N.nvmlDeviceGetHandleByIndex(0))
    """)
    assert r == {"root": 1}
    assert oct(sim.state_path.stat().st_mode & 0o777) == "0o644"
