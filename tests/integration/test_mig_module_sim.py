"""gpufleet.nvidia.nvidia_mig against the simulated driver: apply, idempotence, minimal changes, check mode,
busy GPUs, reset refusals and an NVML failure in the middle of an apply.

Fast real path (no podman): ``ansible localhost -c local -m gpufleet.nvidia.nvidia_mig`` with the simulator's
library and a temporary state; faults and processes are injected with ``gpufleet_sim.hardware``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mig_sim import A100_MIXED, mig_layout, mig_modes, new_state, run_module, sim_lib_dir

from gpufleet_sim import hardware, store

H100_MIXED = [{"devices": "all", "mig_enabled": True,
               "gpu_instances": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}]
ALL_3G = [{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.40gb": 2}}]
SIX_3G_TWO_7G = [
    {"devices": [0, 1, 2, 3, 4, 5], "mig_enabled": True, "gpu_instances": {"3g.40gb": 2}},
    {"devices": [6, 7], "mig_enabled": True, "gpu_instances": {"7g.80gb": 1}},
]
MIXED_EXPECTED = [("2g.20gb", 0, [2]), ("1g.10gb", 2, [1]), ("1g.10gb", 3, [1]), ("3g.40gb", 4, [3])]


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    return sim_lib_dir()


def fresh(tmp_path: Path, preset: str) -> Path:
    return new_state(tmp_path / "state.json", preset)


def apply(lib_dir: Path, state: Path, tmp_path: Path, layout: list[dict[str, Any]], check: bool = False,
          **params: Any) -> tuple[int, dict[str, Any]]:
    return run_module("nvidia_mig", {"layout": layout, **params}, lib_dir, state, tmp_path, check=check)


def uuids(result: dict[str, Any]) -> dict[int, list[str]]:
    return {g["index"]: [ci["uuid"] for gi in g["gpu_instances"] for ci in gi["compute_instances"]]
            for g in result["layout"]}


# --------------------------------------------------------------------------------------------------- apply


@pytest.mark.parametrize(("preset", "layout", "resets"), [("8xA100", A100_MIXED, list(range(8))),
                                                          ("8xH100-NVSwitch", H100_MIXED, [])])
def test_apply_then_reapply_changes_nothing(lib_dir: Path, tmp_path: Path, preset: str,
                                            layout: list[dict[str, Any]], resets: list[int]) -> None:
    state = fresh(tmp_path, preset)
    rc, result = apply(lib_dir, state, tmp_path, layout)
    assert rc == 0, result.get("msg")
    assert result["changed"] is True
    assert result["changed_gpus"] == list(range(8))
    assert result["reset_gpus"] == resets  # Ampere needs a reset to enable MIG, Hopper does not
    assert result["reboot_required"] is False
    assert mig_layout(state) == [MIXED_EXPECTED] * 8
    assert mig_modes(state) == [(1, 1)] * 8
    for gpu in result["layout"]:
        assert gpu["enabled"] is True
        assert all(ci["uuid"].startswith("MIG-") for gi in gpu["gpu_instances"] for ci in gi["compute_instances"])
        assert len(gpu["gpu_instances"]) == 4
    kinds = [a["action"] for a in result["actions"]]
    assert kinds.index("create_gi") > max(i for i, k in enumerate(kinds) if k == "set_mig_mode")
    before = state.read_bytes()
    rc, again = apply(lib_dir, state, tmp_path, layout)
    assert rc == 0, again.get("msg")
    assert (again["changed"], again["actions"], again["msg"]) == (False, [], "MIG layout already applied")
    assert state.read_bytes() == before
    assert uuids(again) == uuids(result)


def test_changing_layout_touches_only_the_gpus_that_differ(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xA100")
    rc, first = apply(lib_dir, state, tmp_path, ALL_3G)
    assert rc == 0, first.get("msg")
    rc, second = apply(lib_dir, state, tmp_path, SIX_3G_TWO_7G)
    assert rc == 0, second.get("msg")
    assert second["changed_gpus"] == [6, 7]
    assert {a["gpu"] for a in second["actions"]} == {6, 7}
    assert "set_mig_mode" not in {a["action"] for a in second["actions"]}
    assert second["reset_gpus"] == []
    before, after = uuids(first), uuids(second)
    assert [after[i] for i in range(6)] == [before[i] for i in range(6)]  # MIG devices on GPUs 0-5 untouched
    assert mig_layout(state)[5:] == [[("3g.40gb", 0, [3]), ("3g.40gb", 4, [3])], [("7g.80gb", 0, [7])],
                                     [("7g.80gb", 0, [7])]]


def test_check_mode_changes_nothing(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xA100")
    before = state.read_bytes()
    rc, result = apply(lib_dir, state, tmp_path, A100_MIXED, check=True)
    assert rc == 0, result.get("msg")
    assert result["changed"] is True
    assert result["changed_gpus"] == list(range(8))
    assert [p["actions"][0]["action"] for p in result["plan"]] == ["set_mig_mode"] * 8
    assert len(result["actions"]) == 8 * 9
    assert state.read_bytes() == before


def test_disable_mig_destroys_instances_first(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xH100-NVSwitch")
    assert apply(lib_dir, state, tmp_path, ALL_3G)[0] == 0
    rc, result = apply(lib_dir, state, tmp_path, [{"devices": "all", "mig_enabled": False}])
    assert rc == 0, result.get("msg")
    assert mig_modes(state) == [(0, 0)] * 8
    assert mig_layout(state) == [[]] * 8
    gpu0 = [a["action"] for a in result["actions"] if a.get("gpu") == 0]
    assert gpu0 == ["destroy_ci", "destroy_gi", "destroy_ci", "destroy_gi", "set_mig_mode"]


def test_mig_parted_config_label(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xH100-NVSwitch")
    config = {"version": "v1", "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
    rc, result = run_module("nvidia_mig", {"mig_parted_config": config, "selected": "all-1g.10gb"}, lib_dir, state,
                            tmp_path)
    assert rc == 0, result.get("msg")
    assert mig_layout(state) == [[("1g.10gb", s, [1]) for s in range(7)]] * 8


def test_gpus_filter_changes_only_those(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xH100-NVSwitch")
    rc, result = apply(lib_dir, state, tmp_path, ALL_3G, gpus=[1, 2])
    assert rc == 0, result.get("msg")
    assert [g["index"] for g in result["layout"]] == [1, 2]
    assert [bool(g) for g in mig_layout(state)] == [False, True, True] + [False] * 5


# --------------------------------------------------------------------------------------------------- refusals


def test_invalid_layout_fails_before_anything(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xA100")
    before = state.read_bytes()
    rc, result = apply(lib_dir, state, tmp_path, [{"devices": "all", "mig_enabled": True,
                                                   "gpu_instances": {"4g.40gb": 1, "3g.40gb": 2}}])
    assert rc != 0
    assert result["error_type"] == "InvalidLayout"
    assert "GPU 0 (A100-SXM4-80GB): 4g.40gb x1 + 3g.40gb x2 need 10 compute slices; A100-SXM4-80GB has 7" \
        in result["msg"]
    assert state.read_bytes() == before


def test_busy_gpu_stops_the_run_and_changes_nothing(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xA100")
    assert apply(lib_dir, state, tmp_path, ALL_3G)[0] == 0
    gpu6 = store.load(state)["gpus"][6]
    gi = gpu6["mig"]["gpu_instances"][0]
    hardware.add_process(6, 4242, "trainer", 2048, gi["id"], gi["compute_instances"][0]["id"], path=state)
    before = state.read_bytes()
    rc, result = apply(lib_dir, state, tmp_path, SIX_3G_TWO_7G)
    assert rc != 0
    assert result["error_type"] == "BusyError"
    assert result["msg"] == (
        "refusing to change MIG while processes use the GPUs, nothing was changed: GPU 6 (they run on MIG "
        "instances that the layout removes): PIDs 4242 (trainer); drain the workloads (or set force_destroy_busy: "
        "true) and retry")
    assert [(b["gpu"], b["pids"]) for b in result["busy"]] == [(6, [4242])]
    assert result["actions"] == []
    assert state.read_bytes() == before  # GPU 7 (idle) was not changed either


def test_busy_gpu_mode_change_names_every_pid(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xA100")
    hardware.add_process(0, 100, "python3", 512, path=state)
    hardware.add_process(0, 101, "python3", 512, path=state)
    rc, result = apply(lib_dir, state, tmp_path, A100_MIXED)
    assert rc != 0
    assert "GPU 0 (a MIG mode change needs the whole GPU idle): PIDs 100 (python3), 101 (python3)" in result["msg"]
    assert mig_modes(state) == [(0, 0)] * 8


def test_reset_refused_by_a_client_then_reboot_path(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xA100")
    hardware.register_client(os.getpid(), "nvidia-persistenced", path=state)  # a live client holds every GPU
    rc, result = apply(lib_dir, state, tmp_path, ALL_3G)
    assert rc != 0
    assert result["error_type"] == "ResetError"
    assert result["msg"].startswith("GPU reset for the MIG mode change of GPUs 0, 1, 2, 3, 4, 5, 6, 7 was refused")
    assert "In use by another client" in result["msg"]
    assert mig_modes(state) == [(0, 1)] * 8  # the mode change is pending
    rc, result = apply(lib_dir, state, tmp_path, ALL_3G, allow_reset=False)
    assert rc == 0, result.get("msg")
    assert (result["changed"], result["reboot_required"]) == (False, True)
    assert result["reboot_required_gpus"] == list(range(8))
    assert "waits for a GPU reset: reboot the host or run again with allow_reset: true" in result["msg"]
    hardware.unregister_client(os.getpid(), path=state)
    rc, result = apply(lib_dir, state, tmp_path, ALL_3G)
    assert rc == 0, result.get("msg")
    assert result["reset_gpus"] == list(range(8))
    assert mig_layout(state) == [[("3g.40gb", 0, [3]), ("3g.40gb", 4, [3])]] * 8


def test_without_reset_a100_reports_reboot_required(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xA100")
    rc, result = apply(lib_dir, state, tmp_path, ALL_3G, allow_reset=False)
    assert rc == 0, result.get("msg")
    assert (result["changed"], result["reboot_required"]) == (True, True)
    assert [a["action"] for a in result["actions"]] == ["set_mig_mode"] * 8
    assert mig_modes(state) == [(0, 1)] * 8
    assert mig_layout(state) == [[]] * 8


# --------------------------------------------------------------------------------------------------- failures


def test_nvml_error_mid_apply_then_rerun_converges(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xH100-NVSwitch")
    hardware.inject("nvml-error", 3, {"function": "nvmlDeviceCreateGpuInstanceWithPlacement", "code": 999},
                    path=state)
    rc, result = apply(lib_dir, state, tmp_path, A100_MIXED)
    assert rc != 0
    assert result["msg"].startswith("nvmlDeviceCreateGpuInstanceWithPlacement failed on GPU 3: Unknown Error "
                                    "(NVML error 999)")
    assert "(GPUs done: 0, 1, 2, 4, 5, 6, 7; failed: 3; untouched: none;" in result["msg"]
    assert result["nvml_error"] == {"function": "nvmlDeviceCreateGpuInstanceWithPlacement", "code": 999,
                                    "message": "Unknown Error", "gpu": 3}
    assert result["changed"] is True
    assert [(g["index"], g["status"]) for g in result["gpu_status"]] == [
        (0, "done"), (1, "done"), (2, "done"), (3, "failed"), (4, "done"), (5, "done"), (6, "done"), (7, "done")]
    assert "plan" not in result  # the failed result is trimmed
    layouts = mig_layout(state)
    assert layouts[:3] + layouts[4:] == [MIXED_EXPECTED] * 7
    assert layouts[3] == []
    hardware.clear("nvml-error", 3, path=state)
    rc, result = apply(lib_dir, state, tmp_path, A100_MIXED)
    assert rc == 0, result.get("msg")
    assert result["changed_gpus"] == [3]
    assert mig_layout(state) == [MIXED_EXPECTED] * 8
    rc, result = apply(lib_dir, state, tmp_path, A100_MIXED)
    assert (rc, result["changed"]) == (0, False)


def test_diff_mode_shows_before_and_after(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "1xH200")
    rc, result = run_module("nvidia_mig", {"layout": [{"devices": "all", "mig_enabled": True,
                                                       "gpu_instances": {"7g.141gb": 1}}]},
                            lib_dir, state, tmp_path, diff=True)
    assert rc == 0, result.get("msg")
    assert result["diff"] == {"before": "GPU 0 (H200-141GB): MIG off\n",
                              "after": "GPU 0 (H200-141GB): MIG on: 7g.141gb@0 [7g.141gb]\n"}


def test_partial_change_keeps_the_instances_the_layout_still_wants(lib_dir: Path, tmp_path: Path) -> None:
    state = fresh(tmp_path, "8xH100-NVSwitch")
    first_layout = [{"devices": [0], "mig_enabled": True, "gpu_instances": {"2g.20gb": 1, "1g.10gb": 1}},
                    {"devices": [1, 2, 3, 4, 5, 6, 7], "mig_enabled": False}]
    rc, first = apply(lib_dir, state, tmp_path, first_layout)
    assert rc == 0, first.get("msg")
    assert mig_layout(state)[0] == [("2g.20gb", 0, [2]), ("1g.10gb", 2, [1])]
    second_layout = [dict(first_layout[0], gpu_instances={"2g.20gb": 2, "1g.10gb": 1}), first_layout[1]]
    rc, second = apply(lib_dir, state, tmp_path, second_layout)
    assert rc == 0, second.get("msg")
    assert [(a["action"], a["profile"], a.get("gi_start")) for a in second["actions"]] == [
        ("create_gi", "2g.20gb", None), ("create_ci", "2g.20gb", 4)]
    assert second["actions"][0]["start"] == 4
    assert mig_layout(state)[0] == [("2g.20gb", 0, [2]), ("1g.10gb", 2, [1]), ("2g.20gb", 4, [2])]
    assert uuids(second)[0][:2] == uuids(first)[0]  # the kept MIG devices keep their UUIDs
