"""playbooks/mig_reconfigure.yml over four simulated hosts (local connection, one state per host, fake
scontrol/sinfo/kubectl): planning, invalid layouts, serial rollout, max-fail behaviour, drain hooks and the summary.

Runs through ``gpufleet.api.run`` (real ansible-runner, real ansible-playbook) so the assertions use typed results.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mig_sim import fleet, fleet_env, mig_layout, mig_modes, sim_lib_dir

from gpufleet import api
from gpufleet_sim import hardware

HOSTS = {"sim-a": "8xA100", "sim-b": "8xH100-NVSwitch", "sim-c": "1xH200", "sim-d": "8xH100-NVSwitch"}
LAYOUTS = {
    "half": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.40gb": 1}}],
    "h200": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.71gb": 2}}],
}
pytestmark = pytest.mark.slow

ROLE_VARS = {"nvidia_mig_layouts": LAYOUTS, "nvidia_mig_layout": "half", "nvidia_mig_unload_nvidia_drm": False}
FAULT = {"function": "nvmlDeviceCreateGpuInstanceWithPlacement", "code": 999}


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    return sim_lib_dir()


@pytest.fixture
def inventory(tmp_path: Path, lib_dir: Path) -> Path:
    path = fleet(tmp_path, HOSTS, lib_dir, ROLE_VARS)
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["all"]["children"]["gpu_nodes"]["hosts"]["sim-c"]["nvidia_mig_layout"] = "h200"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def reconfigure(inventory: Path, tmp: Path, check: bool = False, **extravars: Any) -> api.RunResult:
    # the fake scheduler tools and the simulated nvidia-smi are on the controller's PATH (autouse fixture)
    return api.run("mig_reconfigure", inventory, extravars={"gpufleet_mig_drain_slurm": True, **extravars},
                   check=check, module_keys={"ansible.builtin.set_fact": "set_fact"}, timeout=600)


def summary(result: api.RunResult) -> dict[str, dict[str, Any]]:
    rows = result.hosts["localhost"].module_data["set_fact"]["ansible_facts"]["gpufleet_mig_summary"]
    return {row["host"]: row for row in rows}


def calls(tmp: Path) -> list[str]:
    log = tmp / "calls.log"
    return [line for line in log.read_text(encoding="utf-8").splitlines() if not line.startswith("kubectl get")] \
        if log.exists() else []


@pytest.fixture(autouse=True)
def _controller_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", fleet_env(tmp_path)["PATH"])


def test_serial_rollout_stops_after_a_failed_host(inventory: Path, tmp_path: Path) -> None:
    hardware.inject("nvml-error", 2, FAULT, path=tmp_path / "sim-b" / "state.json")
    result = reconfigure(inventory, tmp_path, gpufleet_mig_serial=1, gpufleet_mig_max_fail_percentage=0)
    assert result.failed_hosts == ["sim-b"]
    rows = summary(result)
    assert rows["sim-a"]["status"] == "changed"
    assert rows["sim-a"]["changed_gpus"] == list(range(8))
    assert rows["sim-b"]["status"] == "failed"
    assert "nvmlDeviceCreateGpuInstanceWithPlacement failed on GPU 2: Unknown Error (NVML error 999)" \
        in rows["sim-b"]["message"]
    assert [rows[h]["status"] for h in ("sim-c", "sim-d")] == ["not run", "not run"]
    assert mig_modes(tmp_path / "sim-c" / "state.json") == [(0, 0)]
    assert mig_layout(tmp_path / "sim-d" / "state.json") == [[]] * 8
    assert mig_layout(tmp_path / "sim-a" / "state.json") == [[("3g.40gb", 0, [3])]] * 8
    # both touched nodes were drained; sim-a is back in service, the failed sim-b stays drained with the failure as
    # its reason (no job lands on a half-applied GPU); the others were never drained
    updates = [c for c in calls(tmp_path) if c.startswith("scontrol update")]
    assert [" ".join(c.split()[2:4]) for c in updates] == [
        "nodename=sim-a state=drain", "nodename=sim-a state=resume",
        "nodename=sim-b state=drain", "nodename=sim-b state=drain"]
    assert updates[3].startswith("scontrol update nodename=sim-b state=drain reason=gpufleet MIG reconfiguration "
                                 "failed - nvidia_mig: applying layout 'half' failed: ")
    record = json.loads((tmp_path / "sim-b" / "mig-state.json").read_text(encoding="utf-8"))
    assert (record["state"], record["layout_name"]) == ("failed", "half")
    failure = result.hosts["sim-b"].failed_tasks[-1]
    assert failure.task == "Fail the host with the reason"
    assert failure.msg.startswith("MIG reconfiguration failed: nvidia_mig: applying layout 'half' failed: ")


def test_failures_within_max_fail_percentage_let_the_rollout_go_on(inventory: Path, tmp_path: Path) -> None:
    """Also: a node drained before the run (sim-a, by an admin) is neither drained again nor resumed (a test of its
    own until issue 33, which paid a whole four-host apply for it)."""
    hardware.inject("nvml-error", 2, FAULT, path=tmp_path / "sim-b" / "state.json")
    (tmp_path / "slurm-node-sim-a").write_text(
        "NodeName=sim-a Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Reason=disk swap [admin@2026-11-20T10:00:00]\n",
        encoding="utf-8")
    result = reconfigure(inventory, tmp_path, gpufleet_mig_serial=2, gpufleet_mig_max_fail_percentage=50)
    assert result.failed_hosts == ["sim-b"]
    rows = summary(result)
    assert {h: r["status"] for h, r in rows.items()} == {"sim-a": "changed", "sim-b": "failed",
                                                         "sim-c": "changed", "sim-d": "changed"}
    updates = [c for c in calls(tmp_path) if c.startswith("scontrol update")]
    assert not [c for c in updates if "nodename=sim-a " in c]
    assert [c for c in updates if "nodename=sim-d " in c] == [
        "scontrol update nodename=sim-d state=drain reason=gpufleet MIG reconfiguration",
        "scontrol update nodename=sim-d state=resume"]
    assert rows["sim-c"]["changed_gpus"] == [0]
    assert mig_layout(tmp_path / "sim-c" / "state.json") == [[("3g.71gb", 0, [3]), ("3g.71gb", 4, [3])]]
    record = json.loads((tmp_path / "sim-d" / "mig-state.json").read_text(encoding="utf-8"))
    assert record["state"] == "success"
    assert [g["gpu_instances"][0]["profile_name"] for g in record["gpus"]] == ["3g.40gb"] * 8
    # the second run changes nothing on the converged hosts and drains none of them
    hardware.clear("nvml-error", 2, path=tmp_path / "sim-b" / "state.json")
    (tmp_path / "calls.log").unlink()
    again = reconfigure(inventory, tmp_path, gpufleet_mig_serial=2)
    assert again.ok
    rows = summary(again)
    assert {h: r["status"] for h, r in rows.items()} == {"sim-a": "ok", "sim-b": "changed",
                                                         "sim-c": "ok", "sim-d": "ok"}
    assert [c for c in calls(tmp_path) if c.startswith("scontrol")] == [
        "scontrol show node --oneliner sim-b",
        "scontrol update nodename=sim-b state=drain reason=gpufleet MIG reconfiguration",
        "scontrol update nodename=sim-b state=resume"]
    for host in ("sim-a", "sim-c", "sim-d"):
        assert again.hosts[host].changed == 0, host


def test_a_drain_that_times_out_fails_the_host_and_puts_it_back(inventory: Path, tmp_path: Path) -> None:
    (tmp_path / "fake-bin" / "sinfo").write_text(f'#!/bin/sh\necho "sinfo $*" >> "{tmp_path}/calls.log"\n'
                                                 'echo draining\n', encoding="utf-8")
    before = (tmp_path / "sim-c" / "state.json").read_bytes()
    result = reconfigure(inventory, tmp_path, gpufleet_mig_hosts="sim-c", gpufleet_mig_drain_retries=2,
                         gpufleet_mig_drain_delay=1)
    assert result.failed_hosts == ["sim-c"]
    assert summary(result)["sim-c"]["status"] == "failed"
    assert (tmp_path / "sim-c" / "state.json").read_bytes() == before
    assert [c for c in calls(tmp_path) if c.startswith("scontrol update")] == [
        "scontrol update nodename=sim-c state=drain reason=gpufleet MIG reconfiguration",
        "scontrol update nodename=sim-c state=resume"]
    assert len([c for c in calls(tmp_path) if c.startswith("sinfo")]) == 3  # the first try and two retries


def test_invalid_layout_on_one_host_stops_everything(inventory: Path, tmp_path: Path) -> None:
    before = {h: (tmp_path / h / "state.json").read_bytes() for h in HOSTS}
    result = reconfigure(inventory, tmp_path, nvidia_mig_layouts={**LAYOUTS, "h200": LAYOUTS["half"]})
    assert not result.ok
    message = result.hosts["sim-a"].failed_tasks[-1].msg
    assert message.startswith("MIG reconfiguration stopped before any change: 1 host(s) cannot be planned - sim-c: "
                              "nvidia_mig: layout 'h200' does not fit the GPUs of sim-c: GPU 0 (H200-141GB): profile "
                              "'3g.40gb' is not offered by this GPU (its driver's MIG profile table); it offers: "
                              "1g.18gb x7, 1g.18gb+me x1, 1g.35gb x4, 2g.35gb x3, 3g.71gb x2, 4g.71gb x1, 7g.141gb x1")
    assert {h: (tmp_path / h / "state.json").read_bytes() for h in HOSTS} == before
    assert calls(tmp_path) == []


def test_plan_only_changes_nothing(inventory: Path, tmp_path: Path) -> None:
    before = {h: (tmp_path / h / "state.json").read_bytes() for h in HOSTS}
    result = reconfigure(inventory, tmp_path, gpufleet_mig_plan_only=True)
    assert result.ok
    rows = summary(result)
    assert rows["sim-c"]["line"] == "sim-c: would change GPUs 0"
    assert rows["sim-a"]["status"] == "planned"
    assert result.hosts["sim-b"].mig["changed"] is True  # the plan (check mode) is the host's module data
    assert {h: (tmp_path / h / "state.json").read_bytes() for h in HOSTS} == before
    assert calls(tmp_path) == []
