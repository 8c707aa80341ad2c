"""The nvidia_mig role on two simulated hosts over the local connection: apply, second run changed=0 (no service
touched), check mode changes nothing, and an invalid layout fails in preflight with the validator's message."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mig_sim import fleet, fleet_env, mig_layout, sim_lib_dir

from gpufleet import api

pytestmark = pytest.mark.slow

LAYOUTS = {"mixed": [
    {"model": "A100-SXM4-80GB", "mig_enabled": True, "gpu_instances": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}},
    {"model": "H100-SXM5-80GB", "mig_enabled": True, "gpu_instances": {"7g.80gb": 1}},
]}
PLAYBOOK = """
- name: Apply the MIG layout
  hosts: gpu_nodes
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.nvidia_mig
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    inventory = fleet(tmp_path, {"role-a100": "8xA100", "role-h100": "8xH100-NVSwitch"}, sim_lib_dir(),
                      {"nvidia_mig_layouts": LAYOUTS, "nvidia_mig_layout": "mixed"})
    playbook = tmp_path / "site.yml"
    playbook.write_text(PLAYBOOK, encoding="utf-8")
    monkeypatch.setenv("PATH", fleet_env(tmp_path)["PATH"])
    return inventory, playbook


def run(site: tuple[Path, Path], check: bool = False, **extravars: Any) -> api.RunResult:
    return api.run(site[1], site[0], check=check, extravars=extravars, timeout=600)


def test_role_applies_then_changes_nothing(site: tuple[Path, Path], tmp_path: Path) -> None:
    states = {h: tmp_path / h / "state.json" for h in ("role-a100", "role-h100")}
    check = run(site, check=True)
    assert check.ok, [t.msg for h in check.hosts.values() for t in h.failed_tasks]
    assert all(mig_layout(s) == [[]] * 8 for s in states.values())
    first = run(site)
    assert first.ok, [t.msg for h in first.hosts.values() for t in h.failed_tasks]
    assert mig_layout(states["role-a100"]) == [[("2g.20gb", 0, [2]), ("1g.10gb", 2, [1]), ("1g.10gb", 3, [1]),
                                                ("3g.40gb", 4, [3])]] * 8
    assert mig_layout(states["role-h100"]) == [[("7g.80gb", 0, [7])]] * 8
    record = json.loads((tmp_path / "role-h100" / "mig-state.json").read_text(encoding="utf-8"))
    assert (record["state"], record["layout_name"]) == ("success", "mixed")
    assert [g["gpu_instances"][0]["profile_name"] for g in record["gpus"]] == ["7g.80gb"] * 8
    before = {h: s.read_bytes() for h, s in states.items()}
    second = run(site)
    assert second.ok
    assert {h.name: h.changed for h in second.hosts.values()} == {"role-a100": 0, "role-h100": 0}
    assert {h: s.read_bytes() for h, s in states.items()} == before
    again = run(site, check=True)
    assert {h.name: h.changed for h in again.hosts.values()} == {"role-a100": 0, "role-h100": 0}


def test_invalid_layout_fails_in_preflight(site: tuple[Path, Path], tmp_path: Path) -> None:
    bad = {"mixed": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"7g.80gb": 2}}]}
    result = run(site, nvidia_mig_layouts=bad)
    assert not result.ok
    message = result.hosts["role-a100"].failed_tasks[-1].msg
    assert message.startswith("nvidia_mig: layout 'mixed' does not fit the GPUs of role-a100: ")
    assert "GPU 0 (A100-SXM4-80GB): 2 x 7g.80gb requested, but A100-SXM4-80GB offers at most 1 x 7g.80gb" in message
    assert mig_layout(tmp_path / "role-a100" / "state.json") == [[]] * 8
