"""The boot-time entry point the nvidia_mig role installs (roles/nvidia_mig/files/gpufleet-mig-apply.py) and
gpu_facts, against the simulated driver: after a "reboot" (fresh GPU state) the recorded layout comes back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mig_sim import (
    A100_MIXED,
    COLLECTIONS,
    ROOT,
    VENV_PYTHON,
    mig_layout,
    new_state,
    run_module,
    sim_env,
    sim_lib_dir,
)

from gpufleet_sim import hardware

SCRIPT = ROOT / "roles" / "nvidia_mig" / "files" / "gpufleet-mig-apply.py"
EXPECTED = [("2g.20gb", 0, [2]), ("1g.10gb", 2, [1]), ("1g.10gb", 3, [1]), ("3g.40gb", 4, [3])]


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    return sim_lib_dir()


def boot_apply(lib_dir: Path, state: Path, tmp: Path, record: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = sim_env(lib_dir, state, tmp, GPUFLEET_MIG_LIB=str(COLLECTIONS))
    return subprocess.run([VENV_PYTHON, str(SCRIPT), "--state", str(record), *args], env=env, capture_output=True,
                          text=True, check=False, timeout=120)


def write_record(path: Path, layout: list[dict[str, object]], gpu_indexes: list[int] | None = None) -> Path:
    path.write_text(json.dumps({"layout_name": "mixed", "layout": layout, "gpu_indexes": gpu_indexes,
                                "allow_reset": True, "state": "success", "gpus": []}), encoding="utf-8")
    return path


def test_boot_apply_restores_the_recorded_layout_after_a_reboot(lib_dir: Path, tmp_path: Path) -> None:
    state = new_state(tmp_path / "state.json", "8xA100")
    record = write_record(tmp_path / "mig-state.json", A100_MIXED)
    check = boot_apply(lib_dir, state, tmp_path, record, "--check")
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("gpufleet-mig-apply: layout 'mixed': would change GPU(s) 0, 1, 2, 3, 4, 5, 6, 7")
    assert mig_layout(state) == [[]] * 8
    done = boot_apply(lib_dir, state, tmp_path, record)
    assert done.returncode == 0, done.stderr
    assert mig_layout(state) == [EXPECTED] * 8
    again = boot_apply(lib_dir, state, tmp_path, record, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["changed"] is False


def test_boot_apply_reports_a_failure(lib_dir: Path, tmp_path: Path) -> None:
    state = new_state(tmp_path / "state.json", "8xH100-NVSwitch")
    hardware.add_process(1, 777, "python3", 100, path=state)
    record = write_record(tmp_path / "mig-state.json", A100_MIXED, gpu_indexes=[1])
    result = boot_apply(lib_dir, state, tmp_path, record)
    assert result.returncode == 1
    assert "gpufleet-mig-apply: layout 'mixed' failed: refusing to change MIG while processes use the GPUs" \
        in result.stderr
    assert "GPU 1 (a MIG mode change needs the whole GPU idle): PIDs 777" in result.stderr
    missing = boot_apply(lib_dir, state, tmp_path, tmp_path / "absent.json")
    assert missing.returncode == 2
    assert "cannot read the recorded MIG layout" in missing.stderr


def test_gpu_facts_reports_inventory_and_mig_state(lib_dir: Path, tmp_path: Path) -> None:
    state = new_state(tmp_path / "state.json", "8xA100")
    assert run_module("nvidia_mig", {"layout": A100_MIXED, "gpus": [0]}, lib_dir, state, tmp_path)[0] == 0
    hardware.add_process(3, 4242, "python3", 512, path=state)
    rc, facts = run_module("gpu_facts", {"processes": True}, lib_dir, state, tmp_path, check=True)
    assert rc == 0, facts.get("msg")
    assert (facts["gpu_count"], facts["driver_version"], facts["cuda_version"]) == (8, "550.163.01", "12.4")
    assert facts["mig_capable"] is True
    gpu0, gpu3 = facts["gpus"][0], facts["gpus"][3]
    assert (gpu0["model"], gpu0["pci_device_id"]) == ("A100-SXM4-80GB", "0x20B210DE")
    assert gpu0["mig"] == {"supported": True, "current": True, "pending": True}
    assert [(g["profile"], g["start"]) for g in gpu0["gpu_instances"]] == [(p, s) for p, s, _ in EXPECTED]
    assert all(ci["uuid"].startswith("MIG-") for g in gpu0["gpu_instances"] for ci in g["compute_instances"])
    assert [p["pid"] for p in gpu3["processes"]] == [4242]
    assert facts["ansible_facts"]["gpufleet_gpu_count"] == 8
    assert facts["changed"] is False


def test_gpu_facts_without_driver(lib_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-driver.json"
    rc, facts = run_module("gpu_facts", {"require_driver": False}, lib_dir, missing, tmp_path)
    assert rc == 0
    assert (facts["nvml_available"], facts["gpus"]) == (False, [])
    assert facts["nvml_error"]["code"] == 9
    rc, failed = run_module("gpu_facts", {"mig": True}, lib_dir, missing, tmp_path)
    assert rc != 0
    assert failed["msg"] == ("nvmlInit failed: Driver Not Loaded (NVML error 9); load the NVIDIA kernel driver "
                             "(apply the gpufleet.nvidia.nvidia_driver role, reboot if it asks for it).")
