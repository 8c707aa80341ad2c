"""The host's table is the last word, through the nvidia_mig role on simulated hosts (issue 15): real Ansible over
the local connection (the fleet of tests/integration/test_mig_role_sim.py), real pynvml into the simulated driver.

* ``lab``: two GPUs of a board that only the simulator knows (``_mig_sim.make_lab_board``: a name, PCI id and
  6-slice geometry absent from gpufleet's catalogue) are planned and applied from the profile table their driver
  reports; a second run changes nothing; a profile the board lacks fails in preflight naming the GPU, the profile
  and what the board offers, with the host unchanged.
* ``gb200``: a layout written with GB200's early ``1g.24gb`` applies on a GB200 whose driver says ``1g.23gb``, and
  the role's result (``nvidia_mig_result``) names the driver's name.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mig_sim import LAB_BOARD_NAME, fleet, fleet_env, make_lab_board, mig_layout, mig_modes, sim_lib_dir

from gpufleet import api

pytestmark = pytest.mark.slow

LAYOUTS = {"site": [
    {"model": LAB_BOARD_NAME, "mig_enabled": True, "gpu_instances": {"3g.18gb": 1, "2g.12gb": 1, "1g.6gb": 1}},
    {"model": "GB200-186GB", "mig_enabled": True, "gpu_instances": {"1g.24gb": 6, "1g.24gb+me": 1}},
]}
PLAYBOOK = """
- name: Apply the MIG layout
  hosts: gpu_nodes
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.nvidia_mig
  post_tasks:
    - name: Keep the role's result for the test
      ansible.builtin.copy:
        content: "{{ nvidia_mig_result | to_json }}"
        dest: "{{ playbook_dir }}/result-{{ inventory_hostname }}.json"
        mode: "0644"
      changed_when: false  # the test's own copy of the result, not a change on the host
      when: not ansible_check_mode
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    inventory = fleet(tmp_path, {"lab": "2xH100-NVL", "gb200": "4xGB200"}, sim_lib_dir(),
                      {"nvidia_mig_layouts": LAYOUTS, "nvidia_mig_layout": "site"})
    make_lab_board(tmp_path / "lab" / "state.json")
    playbook = tmp_path / "site.yml"
    playbook.write_text(PLAYBOOK, encoding="utf-8")
    monkeypatch.setenv("PATH", fleet_env(tmp_path)["PATH"])
    return inventory, playbook


def run(site: tuple[Path, Path], check: bool = False, **extravars: Any) -> api.RunResult:
    return api.run(site[1], site[0], check=check, extravars=extravars, timeout=600)


def failures(result: api.RunResult) -> list[str]:
    return [t.msg for h in result.hosts.values() for t in h.failed_tasks]


def test_unknown_board_and_gb200_alias_through_the_role(site: tuple[Path, Path], tmp_path: Path) -> None:
    lab, gb200 = tmp_path / "lab" / "state.json", tmp_path / "gb200" / "state.json"
    first = run(site)
    assert first.ok, failures(first)
    assert mig_modes(lab) == [(1, 1)] * 2
    # the board's table: 3g.18gb starts 0 or 3, 2g.12gb 0, 2 or 4; so the 2g goes to 4 and the 1g to 3
    assert mig_layout(lab) == [[("3g.18gb", 0, [3]), ("1g.6gb", 3, [1]), ("2g.12gb", 4, [2])]] * 2
    for gpu in mig_layout(gb200):  # the driver's names, one instance on each of the 7 one-slice starts
        assert sorted(name for name, _, _ in gpu) == ["1g.23gb"] * 6 + ["1g.23gb+me"]
        assert sorted(start for _, start, _ in gpu) == list(range(7))
    lab_result = json.loads((tmp_path / "result-lab.json").read_text(encoding="utf-8"))
    assert [d["model"] for d in lab_result["desired"]] == [LAB_BOARD_NAME] * 2
    assert lab_result["profile_names"] == []
    gb200_result = json.loads((tmp_path / "result-gb200.json").read_text(encoding="utf-8"))
    assert gb200_result["profile_names"] == [{"gpu": i, "layout": layout, "driver": driver} for i in range(4)
                                             for layout, driver in (("1g.24gb", "1g.23gb"),
                                                                    ("1g.24gb+me", "1g.23gb+me"))]
    assert "the driver's names for the layout's profiles: GPU 0 1g.24gb -> 1g.23gb, " in gb200_result["msg"]
    before = {h: (tmp_path / h / "state.json").read_bytes() for h in ("lab", "gb200")}
    second = run(site)
    assert second.ok, failures(second)
    assert {h.name: h.changed for h in second.hosts.values()} == {"lab": 0, "gb200": 0}
    assert {h: (tmp_path / h / "state.json").read_bytes() for h in ("lab", "gb200")} == before


def test_profile_the_unknown_board_lacks_fails_in_preflight(site: tuple[Path, Path], tmp_path: Path) -> None:
    lab = tmp_path / "lab" / "state.json"
    before = lab.read_bytes()
    bad = {"site": [{"devices": "all", "mig_enabled": True, "gpu_instances": {"3g.18gb": 1, "4g.24gb": 1}}]}
    result = run(site, nvidia_mig_layouts=bad)
    assert not result.ok
    message = result.hosts["lab"].failed_tasks[-1].msg
    offers = "1g.6gb x6, 2g.12gb x3, 3g.18gb x2, 6g.48gb x1"
    assert message == (
        "nvidia_mig: layout 'site' does not fit the GPUs of lab: 2 problems in the MIG layout:\n"
        f"- GPU 0 ({LAB_BOARD_NAME}): profile '4g.24gb' is not offered by this GPU (its driver's MIG profile "
        f"table); it offers: {offers}\n"
        f"- GPU 1 ({LAB_BOARD_NAME}): profile '4g.24gb' is not offered by this GPU (its driver's MIG profile "
        f"table); it offers: {offers}")
    assert lab.read_bytes() == before
    assert mig_modes(lab) == [(0, 0)] * 2
