"""`gpufleet mig apply` over a simulated H200 host (local connection, the simulator's NVML; tests/integration/_mig_sim):
without a terminal and without --yes it refuses before anything runs; with --yes it plans, shows the plan and applies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mig_sim import fleet, fleet_env, mig_layout, mig_modes, sim_lib_dir

REPO = Path(__file__).resolve().parents[2]
LAYOUTS = {"two": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.71gb": 2}}]}
pytestmark = pytest.mark.slow


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    return fleet(tmp_path, {"sim-h200": "1xH200"}, sim_lib_dir(),
                 {"nvidia_mig_layouts": LAYOUTS, "nvidia_mig_layout": "two", "nvidia_mig_unload_nvidia_drm": False})


def mig_apply(inventory: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = fleet_env(tmp)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.pop("ANSIBLE_CONFIG")  # gpufleet picks the collection's own
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "mig", "apply", "-i", str(inventory), *extra],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=tmp, timeout=600, check=False,
    )


def test_without_terminal_or_yes_refuses_and_changes_nothing(inventory: Path, tmp_path: Path):
    state = tmp_path / "sim-h200" / "state.json"
    before = (mig_modes(state), mig_layout(state))
    proc = mig_apply(inventory, tmp_path)
    assert proc.returncode == 4
    assert proc.stderr == (
        "gpufleet: error: refusing to apply MIG layouts without a confirmation: there is no terminal to ask at; "
        "review `gpufleet mig plan` and pass --yes to apply\n"
    )
    assert (mig_modes(state), mig_layout(state)) == before == ([(0, 0)], [[]])


def test_with_yes_plans_then_applies(inventory: Path, tmp_path: Path):
    state = tmp_path / "sim-h200" / "state.json"
    proc = mig_apply(inventory, tmp_path, "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hosts"]["sim-h200"]["status"] == "changed"
    assert "(check mode)" in proc.stderr  # the plan was shown first (on stderr with --json)
    # NVIDIA's MIG user guide, H200 141GB: 3g.71gb takes 4 memory slices and may start at slice 0 or 4.
    assert mig_layout(state) == [[("3g.71gb", 0, [3]), ("3g.71gb", 4, [3])]]
