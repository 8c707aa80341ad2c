"""gpufleet.nvidia.gpu_health against the simulated driver: one fault at a time, the right check fails.

Fast real path: real Ansible (ad-hoc ``ansible localhost -m gpufleet.nvidia.gpu_health``, local connection), real
pynvml, the simulator's ``libnvidia-ml.so.1`` (``LD_LIBRARY_PATH``) and a temporary state file
(``NVML_SIM_STATE``); faults are injected with ``gpufleet_sim.hardware`` exactly as ``gpusim`` does.

Replayed real nodes are judged in test_gpu_health_replayed.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _health_sim import DRIVER_VERSION, LIB_DIR, ROOT, VENV_PYTHON, build_sim_library

from gpufleet_sim import hardware, store

ANSIBLE = str(Path(sys.executable).with_name("ansible"))
PRESET = "8xH100-NVSwitch"


# --------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def sim_lib_dir() -> Path:
    lib = build_sim_library(LIB_DIR, DRIVER_VERSION)
    assert lib.is_file()
    return lib.parent


@pytest.fixture
def state(tmp_path: Path) -> Path:
    from gpufleet_sim import presets  # in-repo: a failed import is a failure, never a skip
    doc = presets.build_state(PRESET, 1)
    for gpu in doc["gpus"]:  # a provisioned host: nvidia-persistenced has turned persistence mode on
        gpu["persistence_mode"] = 1
    # ... and the fabric manager runs (this test process stands in for it), so every GPU's fabric is Completed
    hardware.register_client_in(doc, os.getpid(), "nv-fabricmanager")
    doc["require_root"] = False
    return store.create(tmp_path / "state.json", doc)


def fake_tool(directory: Path, name: str, script: str) -> None:
    """Put an executable shell script ``name`` in ``directory`` (prepended to PATH by :func:`run_health`)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    path.chmod(0o755)


def run_health(lib_dir: Path, state: Path, tmp: Path, fake_bin: Path | None = None, check_mode: bool = False,
               **params: Any) -> tuple[int, dict[str, Any]]:
    """Run the module once on localhost; return (ansible's rc, the module result)."""
    args = {"mig_state_file": str(tmp / "no-mig-state.json"), "previous_report": str(tmp / "no-report.json"),
            "xid_kernel_log": False, "xid_wait_ms": 50, "fail_on": "never"}
    args.update(params)
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib_dir), NVML_SIM_STATE=str(state),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"))
    if fake_bin is not None:
        env["PATH"] = f"{fake_bin}:{env['PATH']}"
    argv = [ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-m", "gpufleet.nvidia.gpu_health",
            "-a", json.dumps(args), "-e", f"ansible_python_interpreter={VENV_PYTHON}"]
    if check_mode:
        argv.append("--check")
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=120)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON from ansible (rc {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return proc.returncode, doc["plays"][0]["tasks"][0]["hosts"]["localhost"]


def checks_of(result: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [c for c in result["health"]["checks"] if c["name"] == name]


def only_failure(result: dict[str, Any]) -> dict[str, Any]:
    """The single failing check of a report (fails the test when there are none or several)."""
    failing = [c for c in result["health"]["checks"] if c["status"] == "fail"]
    assert len(failing) == 1, [(c["name"], c["gpu"], c["message"]) for c in failing]
    return failing[0]


def gpu_identity(state: Path, index: int) -> dict[str, Any]:
    gpu = store.load(state)["gpus"][index]
    return {"index": index, "uuid": gpu["uuid"], "pci_bus_id": gpu["pci"]["bus_id"]}


# --------------------------------------------------------------------------------------------------- healthy


def test_healthy_8xh100_every_check_ok(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    rc, result = run_health(sim_lib_dir, state, tmp_path, expected_gpu_count=8, expected_gpu_models=["H100"],
                            expected_driver_version="570", idle_expected=True, fail_on="fail")
    assert rc == 0, result.get("msg")
    report = result["health"]
    bad = [(c["name"], c["gpu"], c["message"]) for c in report["checks"] if c["status"] != "ok"]
    assert bad == []
    assert report["status"] == "ok"
    assert report["gpu_count"] == 8
    assert report["driver_version"] == DRIVER_VERSION
    per_gpu = [c for c in report["checks"] if c["gpu"]]
    assert {c["gpu"]["index"] for c in per_gpu} == set(range(8))
    # every H100 SXM5's 18 NVLinks up at NVLink 4's line rate (the numbers NVIDIA publishes: 900 GB/s, 26.562 GB/s)
    assert [(c["gpu"]["index"], c["level"], c["message"]) for c in checks_of(result, "nvlink")] == [
        (index, "PASS", "18 of 18 NVLinks up at 26562 MB/s (NVLink 4)") for index in range(8)]
    assert result["changed"] is False


def test_check_mode_reports_the_same(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    hardware.inject("nvlink-down", "2", {"link": 0}, path=state)
    rc, result = run_health(sim_lib_dir, state, tmp_path, check_mode=True)
    assert rc == 0
    assert only_failure(result)["name"] == "nvlink"


# --------------------------------------------------------------------------------------------------- fault matrix

FAULTS = [
    # (id, fault, gpu, args, module params, check, expected value)
    ("ecc-uncorrectable", "ecc-uncorrectable", 1, {"count": 3}, {}, "ecc_uncorrected_volatile", 3),
    ("remap-failure", "remap-failure", 4, {}, {}, "remapped_rows",
     {"corrected": 0, "uncorrected": 0, "pending": 0, "failure": 1}),
    ("remap-pending", "remap-pending", 5, {}, {}, "remapped_rows",
     {"corrected": 0, "uncorrected": 1, "pending": 1, "failure": 0}),
    ("pcie-x8", "pcie-downgrade", 6, {"width": 8}, {}, "pcie_link_width", 8),
    ("nvlink-down", "nvlink-down", 7, {"link": 3}, {}, "nvlink", {"links": 18, "up": 17, "down": [3]}),
    ("foreign-process", "process", 2, {"pid": 4242, "name": "python3", "used_memory_mib": 2048},
     {"idle_expected": True}, "processes", [{"pid": 4242, "name": "python3", "used_memory_mib": 2048}]),
    ("nvml-read-error", "nvml-error", 3, {"function": "nvmlDeviceGetRemappedRows", "code": 999}, {},
     "remapped_rows", None),
]


@pytest.mark.parametrize(("fault", "index", "args", "params", "check", "value"), [f[1:] for f in FAULTS],
                         ids=[f[0] for f in FAULTS])
def test_fault_fails_its_check(sim_lib_dir: Path, state: Path, tmp_path: Path, fault: str, index: int,
                               args: dict[str, Any], params: dict[str, Any], check: str, value: Any) -> None:
    hardware.inject(fault, str(index), args, path=state)
    rc, result = run_health(sim_lib_dir, state, tmp_path, **params, fail_on="fail")
    assert rc != 0, "the module must fail the host"
    got = only_failure(result)
    assert (got["name"], got["gpu"], got["value"]) == (check, gpu_identity(state, index), value), got["message"]
    assert result["health"]["failed"] == [f"{check}[gpu {index}]"]
    assert result["msg"] == f"health fail: {check}[gpu {index}]"


def test_nvlink_down_names_the_gpu_and_the_link(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    hardware.inject("nvlink-down", "6", {"link": 13}, path=state)
    hardware.inject("nvlink-down", "6", {"link": 2}, path=state)
    rc, result = run_health(sim_lib_dir, state, tmp_path, fail_on="fail")
    assert rc != 0
    got = only_failure(result)
    assert (got["name"], got["gpu"], got["level"], got["action"]) == ("nvlink", gpu_identity(state, 6), "CRITICAL",
                                                                      "drain")
    assert got["message"] == ("NVLinks 2, 13 down (16/18 up): NCCL falls back to slower paths; drain and check the "
                              "baseboard")
    assert got["threshold"] == {"links": 18, "speed_mbps": 26562, "wiring": "switch", "model": "H100-SXM5-80GB"}


def test_slow_nvlink_warns_with_expected_and_seen_speed(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    hardware.inject("nvlink-slow", "4", {"link": 9, "mbps": 13281}, path=state)
    rc, result = run_health(sim_lib_dir, state, tmp_path, fail_on="fail")
    assert rc == 0, "a slow link warns; it does not fail the host"
    warned = [c for c in result["health"]["checks"] if c["status"] != "ok"]
    assert [(c["name"], c["gpu"], c["level"], c["value"]) for c in warned] == [
        ("nvlink", gpu_identity(state, 4), "WARNING", {"links": 18, "up": 18, "down": [], "slow": {"9": 13281}})]
    assert warned[0]["message"] == ("NVLink 9 at 13281 MB/s, expected 26562 MB/s (H100-SXM5-80GB, NVLink 4): trained "
                                    "down, or a reduced NVLink bandwidth mode")
    assert result["health"]["status"] == "warn"
    rc, _result = run_health(sim_lib_dir, state, tmp_path, fail_on="warn")
    assert rc != 0


def test_nvlink_speed_unreadable_is_unknown_not_ok(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    hardware.inject("nvml-error", "1", {"function": "nvmlDeviceGetFieldValues", "code": 999}, path=state)
    rc, result = run_health(sim_lib_dir, state, tmp_path, fail_on="fail")
    assert rc != 0
    (got,) = [c for c in checks_of(result, "nvlink") if c["gpu"]["index"] == 1]
    assert (got["status"], got["level"]) == ("fail", "UNKNOWN")
    assert got["message"].startswith("could not read the NVLink speeds: ")
    assert "nvlink[gpu 1]" in result["health"]["failed"]


def test_fabric_stuck_in_progress_fails_that_gpus_fabric(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    hardware.inject("fabric-stuck", "5", {}, path=state)
    rc, result = run_health(sim_lib_dir, state, tmp_path, fail_on="fail")
    assert rc != 0
    got = only_failure(result)
    assert (got["name"], got["gpu"], got["value"]["state"]) == ("fabric", gpu_identity(state, 5), "In Progress")
    assert result["health"]["failed"] == ["fabric[gpu 5]"]


def test_no_fabric_manager_leaves_every_fabric_not_started(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    with store.transaction(state) as doc:  # the fabric manager stops
        hardware.unregister_client_in(doc, os.getpid())
    _rc, result = run_health(sim_lib_dir, state, tmp_path)
    failing = [(c["name"], c["gpu"]["index"], c["value"]["state"]) for c in result["health"]["checks"]
               if c["status"] == "fail"]
    assert failing == [("fabric", index, "Not Started") for index in range(8)]


def test_foreign_process_passes_when_idle_not_expected(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    hardware.inject("process", "2", {"pid": 4242}, path=state)
    _rc, result = run_health(sim_lib_dir, state, tmp_path)
    assert result["health"]["status"] == "ok"


def test_thermal_slowdown_fails_clocks_and_temperature(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    hardware.inject("thermal-slowdown", "0", {}, path=state)
    slowdown = store.load(state)["gpus"][0]["temperature"]["slowdown"]
    _rc, result = run_health(sim_lib_dir, state, tmp_path)
    failing = {c["name"]: c for c in result["health"]["checks"] if c["status"] == "fail"}
    assert sorted(failing) == ["clock_events", "temperature"]
    assert failing["clock_events"]["value"] == ["hw_thermal_slowdown"]
    assert failing["clock_events"]["message"] == "clocks slowed by hw_thermal_slowdown; check cooling and power"
    assert failing["temperature"]["value"] == slowdown
    assert failing["temperature"]["gpu"] == gpu_identity(state, 0)


def test_persistence_off(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    with store.transaction(state) as doc:
        doc["gpus"][3]["persistence_mode"] = 0
    _rc, result = run_health(sim_lib_dir, state, tmp_path)
    got = only_failure(result)
    assert (got["name"], got["value"], got["gpu"]) == ("persistence_mode", "disabled", gpu_identity(state, 3))
    assert got["message"] == "persistence mode is disabled; enable nvidia-persistenced"


def test_gpu_off_the_bus_named_from_the_previous_report(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    _rc, healthy = run_health(sim_lib_dir, state, tmp_path)
    previous = tmp_path / "health.json"
    previous.write_text(json.dumps(healthy["health"]), encoding="utf-8")
    hardware.inject("fallen-off-bus", "5", {}, path=state)
    rc, result = run_health(sim_lib_dir, state, tmp_path, previous_report=str(previous), fail_on="fail")
    assert rc != 0
    got = only_failure(result)
    assert (got["name"], got["value"], got["gpu"]) == ("gpu_lost", True, gpu_identity(state, 5))
    assert [c["name"] for c in result["health"]["checks"] if c["gpu"] and c["gpu"]["index"] == 5] == ["gpu_lost"]


# --------------------------------------------------------------------------------------------------- XID


def test_xid_79_raised_during_the_check_fails(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    """NVML delivers XIDs raised while the call's event set is registered: keep raising one until it ends."""
    stop = threading.Event()

    def raise_xids() -> None:
        while not stop.is_set():
            hardware.append_event("4", 79, path=state)
            time.sleep(0.1)

    thread = threading.Thread(target=raise_xids, daemon=True)
    thread.start()
    try:
        _rc, result = run_health(sim_lib_dir, state, tmp_path, xid_wait_ms=1500)
    finally:
        stop.set()
        thread.join()
    got = only_failure(result)
    assert (got["name"], got["value"], got["gpu"]) == ("xid", [79], gpu_identity(state, 4))
    # The thread raises XID 79 until the check ends: every event is counted in one entry, not repeated.
    assert [(e["code"], e["level"], e["action"], e["sources"]) for e in got["evidence"]] == [
        (79, "CRITICAL", "reboot", ["nvml"])]
    count = got["evidence"][0]["count"]
    times = f" x{count}" if count > 1 else ""
    assert got["message"] == (f"XID 79 (GPU has fallen off the bus){times}: reboot in the last 7200 s "
                              "(NVIDIA's XID catalogue)")
    assert (got["level"], got["action"]) == ("CRITICAL", "reboot")


def test_xid_before_the_check_is_not_seen_through_nvml(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    """The documented limit of the NVML source: an XID raised before registration is the kernel log's job."""
    hardware.inject("xid", "4", {"code": 79}, path=state)
    _rc, result = run_health(sim_lib_dir, state, tmp_path)
    assert checks_of(result, "xid")[4]["status"] == "ok"


def test_xid_from_the_kernel_log_in_the_window(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    bus = store.load(state)["gpus"][2]["pci"]["bus_id"]  # 00000000:BB:DD.F -> kernel spelling 0000:BB:DD
    kernel_bus = bus[4:].rsplit(".", 1)[0]
    now = int(time.time())
    lines = [f"{now - 60}.000001 host kernel: NVRM: Xid (PCI:{kernel_bus}): 48, pid=1234, DBE",
             f"{now - 30}.000002 host kernel: NVRM: Xid (PCI:{kernel_bus}): 94, pid=1234, Contained",
             f"{now - 20}.000003 host kernel: nvidia-nvswitch0: something else"]
    fake_tool(tmp_path / "bin", "journalctl", "cat <<'EOF'\n" + "\n".join(lines) + "\nEOF\n")
    _rc, result = run_health(sim_lib_dir, state, tmp_path, fake_bin=tmp_path / "bin", xid_kernel_log=True)
    got = only_failure(result)
    assert (got["name"], got["value"], got["gpu"]) == ("xid", [48, 94], gpu_identity(state, 2))
    assert [(e["code"], e["count"], e["level"], e["action"], e["sources"]) for e in got["evidence"]] == [
        (48, 1, "CRITICAL", "reset_gpu", ["kernel"]), (94, 1, "WARNING", "restart_app", ["kernel"])]
    assert {"source": "kernel", "read_from": "journal", "error": None, "tried": {},
            "window_s": 7200} in result["health"]["xid_sources"]
    schema = json.loads(resources.files("gpufleet").joinpath("schemas/health_report.schema.json").read_text("utf-8"))
    jsonschema.Draft202012Validator(schema).validate(result["health"])  # the real module's report, as published


# --------------------------------------------------------------------------------------------------- host-wide


@pytest.mark.parametrize(("answer", "status"), [("active", "ok"), ("failed", "fail")])
def test_fabric_manager_on_nvswitch_host(sim_lib_dir: Path, state: Path, tmp_path: Path, answer: str,
                                         status: str) -> None:
    fake_tool(tmp_path / "bin", "systemctl", f'[ "$1 $2" = "is-active nvidia-fabricmanager" ] && echo {answer}\n')
    _rc, result = run_health(sim_lib_dir, state, tmp_path, fake_bin=tmp_path / "bin", nvswitch_expected=True)
    (got,) = checks_of(result, "fabric_manager")
    assert (got["status"], got["value"], got["gpu"]) == (status, answer, None)


def test_expected_count_and_driver_mismatch(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    _rc, result = run_health(sim_lib_dir, state, tmp_path, expected_gpu_count=7, expected_driver_version="550")
    failing = {c["name"]: c for c in result["health"]["checks"] if c["status"] == "fail"}
    assert sorted(failing) == ["driver_version", "gpu_count"]
    assert failing["driver_version"]["message"] == (f"driver {DRIVER_VERSION} is loaded but 550 is expected; install "
                                                    "the pinned driver and reboot")
    assert failing["gpu_count"]["value"] == 8


def test_vbios_mismatch(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    with store.transaction(state) as doc:
        doc["gpus"][7]["vbios_version"] = "96.00.74.00.11"
    _rc, result = run_health(sim_lib_dir, state, tmp_path)
    got = only_failure(result)
    assert got["name"] == "vbios_consistency"
    assert "96.00.74.00.11" in got["value"]


def test_driver_not_loaded_is_one_host_failure(sim_lib_dir: Path, tmp_path: Path) -> None:
    rc, result = run_health(sim_lib_dir, tmp_path / "missing-state.json", tmp_path, fail_on="fail")
    assert rc != 0
    (got,) = result["health"]["checks"]
    assert (got["name"], got["status"]) == ("nvml", "fail")
    assert "Driver Not Loaded" in got["message"]


@pytest.fixture(autouse=True)
def _no_leftover_threads() -> Iterator[None]:
    before = threading.active_count()
    yield
    assert threading.active_count() == before


def test_mig_layout_against_the_nvidia_mig_record(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    """The record's ``gpus`` (the nvidia_mig module's ``layout``) is compared by UUID; a GPU not in it is skipped."""
    gpus = store.load(state)["gpus"]
    record = {"layout_name": "all-disabled", "state": "success", "gpus": [
        {"index": 0, "uuid": gpus[0]["uuid"], "enabled": False, "pending": False, "gpu_instances": []},
        {"index": 1, "uuid": gpus[1]["uuid"], "enabled": True, "pending": True, "gpu_instances": [
            {"profile_name": "3g.40gb", "gi_id": 1, "start": 0, "size": 4,
             "compute_instances": [{"name": "3g.40gb", "ci_id": 0, "uuid": "MIG-x"}]}]}]}
    path = tmp_path / "mig-state.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    _rc, result = run_health(sim_lib_dir, state, tmp_path, mig_state_file=str(path))
    by_gpu = {c["gpu"]["index"]: c for c in checks_of(result, "mig_layout")}
    assert by_gpu[0]["status"] == "ok"
    assert by_gpu[1]["status"] == "fail"
    assert by_gpu[1]["value"] == {"enabled": False, "gpu_instances": []}
    assert by_gpu[1]["threshold"] == {"enabled": True, "gpu_instances": [["3g.40gb", 0, 4, ["3g.40gb"]]]}
    assert by_gpu[2]["message"] == "no recorded MIG layout for this GPU; not checked"


# --------------------------------------------------------------------------------------------------- fail closed
# Each of these passed as "ok" before issue 13: the check could not see what it needed and said nothing was wrong.


def test_ecc_disabled_on_a_data_centre_gpu_fails(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    with store.transaction(state) as doc:  # nvidia-smi -e 0 and a reset: ECC off now and after the next reset
        doc["gpus"][2]["ecc"].update({"current": 0, "pending": 0})
    rc, result = run_health(sim_lib_dir, state, tmp_path, fail_on="fail")
    assert rc != 0
    got = only_failure(result)
    assert (got["name"], got["gpu"], got["value"], got["threshold"]) == (
        "ecc_mode", gpu_identity(state, 2), {"current": "disabled", "pending": "disabled"}, "enabled")
    assert got["message"] == ("ECC is disabled but expected enabled (a data-centre GPU runs with ECC); set it with "
                              "nvidia-smi -i <gpu> -e 1 and reset the GPU")


def test_ecc_disabled_passes_when_the_operator_expects_it(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    with store.transaction(state) as doc:
        doc["gpus"][2]["ecc"].update({"current": 0, "pending": 0})
    rc, result = run_health(sim_lib_dir, state, tmp_path, ecc_mode_expected="disabled", fail_on="fail")
    assert rc != 0, "the seven GPUs with ECC on now differ from the expected mode"
    failing = sorted(c["gpu"]["index"] for c in result["health"]["checks"] if c["status"] == "fail")
    assert failing == [0, 1, 3, 4, 5, 6, 7]


def test_above_shutdown_fails_with_the_slowdown_threshold_unreadable(sim_lib_dir: Path, state: Path,
                                                                     tmp_path: Path) -> None:
    with store.transaction(state) as doc:  # the board does not report a slowdown threshold (NOT_SUPPORTED)
        temp = doc["gpus"][1]["temperature"]
        del temp["slowdown"]
        temp["gpu"] = int(temp["shutdown"]) + 1
        shutdown = int(temp["shutdown"])
    rc, result = run_health(sim_lib_dir, state, tmp_path, fail_on="fail")
    assert rc != 0
    got = only_failure(result)
    assert (got["name"], got["gpu"], got["value"]) == ("temperature", gpu_identity(state, 1), shutdown + 1)
    assert got["threshold"] == {"warn": None, "fail": None, "shutdown": shutdown}
    assert got["message"] == (f"{shutdown + 1} C reached the shutdown temperature {shutdown} C (slowdown threshold "
                              "unreadable: not supported)")


def test_thresholds_nvml_cannot_read_fail_the_temperature(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    hardware.inject("nvml-error", "6", {"function": "nvmlDeviceGetTemperatureThreshold", "code": 999}, path=state)
    current = store.load(state)["gpus"][6]["temperature"]["gpu"]
    _rc, result = run_health(sim_lib_dir, state, tmp_path)
    got = only_failure(result)
    assert (got["name"], got["gpu"]) == ("temperature", gpu_identity(state, 6))
    error = ("nvmlDeviceGetTemperatureThreshold failed on GPU 6: Unknown Error (NVML error 999); check the driver "
             "state with nvidia-smi")
    assert got["message"] == (f"{current} C but no fail temperature is known (shutdown threshold unreadable: {error}; "
                              f"slowdown threshold unreadable: {error}); set temperature_fail_c")


def test_temperature_fail_c_zero_is_a_limit(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    rc, result = run_health(sim_lib_dir, state, tmp_path, temperature_fail_c=0, fail_on="fail")
    assert rc != 0
    temps = checks_of(result, "temperature")
    assert [(c["status"], c["threshold"]["fail"]) for c in temps] == [("fail", 0)] * 8
    assert result["health"]["failed"] == [f"temperature[gpu {i}]" for i in range(8)]


def test_unreadable_kernel_log_fails_the_xid_window(sim_lib_dir: Path, state: Path, tmp_path: Path) -> None:
    fake_tool(tmp_path / "bin", "journalctl", "echo 'Failed to open journal: Permission denied' >&2\nexit 1\n")
    rc, result = run_health(sim_lib_dir, state, tmp_path, fake_bin=tmp_path / "bin", xid_kernel_log=True,
                            xid_kernel_log_sources=["journal"], fail_on="fail")
    assert rc != 0
    error = "journalctl -k failed (rc 1): Failed to open journal: Permission denied"
    assert {"source": "kernel", "read_from": None, "error": f"journal: {error}", "tried": {"journal": error},
            "window_s": 7200} in result["health"]["xid_sources"]
    xids = checks_of(result, "xid")
    assert [(c["gpu"]["index"], c["status"]) for c in xids] == [(i, "fail") for i in range(8)]
    assert xids[0]["message"] == (f"the kernel log could not be read (journal: {error}), so XIDs of the last 7200 s "
                                  "are unknown (no XID seen through NVML); make the journal, /dev/kmsg or dmesg "
                                  "readable, or set xid_kernel_log to false to rely on NVML events of the moment "
                                  "only")
    assert result["health"]["failed"] == [f"xid[gpu {i}]" for i in range(8)]


def test_a_failing_journal_falls_back_to_this_machines_dev_kmsg(sim_lib_dir: Path, state: Path,
                                                                 tmp_path: Path) -> None:
    """Issue 27: the real ring buffer (/dev/kmsg, a character device read record by record without blocking) is
    read when the journal cannot be: the window is known, so the check passes (no simulated GPU logs there)."""
    assert Path("/dev/kmsg").is_char_device()
    fake_tool(tmp_path / "bin", "journalctl", "echo 'Failed to open journal: Permission denied' >&2\nexit 1\n")
    _rc, result = run_health(sim_lib_dir, state, tmp_path, fake_bin=tmp_path / "bin", xid_kernel_log=True)
    (kernel,) = [s for s in result["health"]["xid_sources"] if s["source"] == "kernel"]
    assert (kernel["read_from"], kernel["error"]) == ("kmsg", None)
    assert kernel["tried"] == {"journal": "journalctl -k failed (rc 1): Failed to open journal: Permission denied"}
    assert {c["message"] for c in checks_of(result, "xid")} == {"no XID event in the window (kernel log: kmsg)"}


# --------------------------------------------------------------------------------------------------- recovery action


def test_the_drivers_recovery_action_is_read_through_field_230(sim_lib_dir: Path, state: Path,
                                                                tmp_path: Path) -> None:
    """NVML field 230 (nvmlDeviceGetFieldValues): absent from the driver -> not applicable; set -> its action."""
    _rc, result = run_health(sim_lib_dir, state, tmp_path)
    assert {(c["status"], c["value"]) for c in checks_of(result, "recovery_action")} == {("ok", None)}
    with store.transaction(state) as doc:  # the driver now asks GPU 3 for a node reboot (nvml.h value 2)
        doc["gpus"][3]["recovery_action"] = 2
    _rc, result = run_health(sim_lib_dir, state, tmp_path)
    got = only_failure(result)
    assert (got["name"], got["gpu"], got["value"], got["level"], got["action"]) == (
        "recovery_action", gpu_identity(state, 3), "node reboot", "CRITICAL", "reboot")
    assert result["health"]["gpus"][3]["action"] == "reboot"
