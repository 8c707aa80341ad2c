"""nvidia_gpu_sharing on a simulated 8xA100 host (real Ansible over the local connection, real pynvml on the
simulator's libnvidia-ml): the device list comes from gpu_facts and from the layout nvidia_mig applies, the file
written is loaded by the device-plugin oracle, and a config naming a device the host will not have is refused
before the sharing role changes anything."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mig_sim import ANSIBLE_PLAYBOOK, ROOT, fleet, fleet_env, mig_layout, run_module, sim_lib_dir

pytestmark = pytest.mark.slow


def _oracle() -> ModuleType:
    spec = importlib.util.spec_from_file_location("device_plugin_oracle",
                                                  ROOT / "tests" / "unit" / "device_plugin_oracle" / "oracle.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


oracle = _oracle()
LAYOUTS = {"mixed": [{"devices": "all", "mig_enabled": True,
                      "gpu_instances": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}}]}
PLAYBOOK = """
- name: MIG layout
  hosts: gpu_nodes
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.nvidia_mig
      when: with_mig | default(true) | bool
- name: Device plugin sharing config
  hosts: gpu_nodes
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.nvidia_gpu_sharing
"""
HOST = "share-a100"


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path]:
    inventory = fleet(tmp_path, {HOST: "8xA100"}, sim_lib_dir(),
                      {"nvidia_mig_layouts": LAYOUTS, "nvidia_mig_layout": "mixed",
                       "nvidia_gpu_sharing_mig_strategy": "mixed",
                       "nvidia_gpu_sharing_config_path": str(tmp_path / HOST / "dp" / "config.yaml")})
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK, encoding="utf-8")
    return inventory, playbook


def play(site: tuple[Path, Path], tmp: Path, extra: dict[str, Any], check: bool = False) -> tuple[int, dict[str, Any]]:
    env = dict(fleet_env(tmp), ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    argv = [ANSIBLE_PLAYBOOK, "-i", str(site[0]), str(site[1]), "-e", json.dumps(extra)] + (["--check"] if check
                                                                                             else [])
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=600)
    return proc.returncode, json.loads(proc.stdout)


def failures(out: dict[str, Any]) -> list[str]:
    return [h["msg"] for p in out["plays"] for t in p["tasks"] for h in t["hosts"].values() if h.get("failed")]


TS = {"nvidia_gpu_sharing_time_slicing": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 4},
                                                        {"name": "nvidia.com/mig-3g.40gb", "replicas": 2}]}}


def test_check_mode_checks_against_the_layout_nvidia_mig_would_apply(site: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    # MIG is not applied in check mode; the sharing role checks against the layout nvidia_mig would apply.
    rc, out = play(site, tmp_path, TS, check=True)
    assert (rc, failures(out)) == (0, [])
    assert not (tmp_path / HOST / "dp").exists()
    assert mig_layout(tmp_path / HOST / "state.json") == [[]] * 8


def test_devices_from_nvml_once_the_layout_is_applied(site: tuple[Path, Path], tmp_path: Path) -> None:
    config = tmp_path / HOST / "dp" / "config.yaml"
    rc, result = run_module("nvidia_mig", {"layout": LAYOUTS["mixed"]}, sim_lib_dir(), tmp_path / HOST / "state.json",
                            tmp_path)
    assert rc == 0, result.get("msg")
    extra = {"with_mig": False, "nvidia_mig_layout": None, **TS}
    rc, out = play(site, tmp_path, extra, check=True)
    assert (rc, failures(out)) == (0, [])
    assert not config.exists()
    rc, out = play(site, tmp_path, extra)
    assert (rc, failures(out)) == (0, [])
    loaded = oracle.load(config.read_text(encoding="utf-8"))
    assert (loaded.strategy, loaded.mig_strategy) == ("time-slicing", "mixed")
    assert loaded.advertised() == {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-3g.40gb": 2}
    rc, out = play(site, tmp_path, extra)
    assert (rc, out["stats"][HOST]["changed"]) == (0, 0)


def test_a_device_the_layout_lacks_is_refused_before_any_change(site: tuple[Path, Path], tmp_path: Path) -> None:
    extra = {"with_mig": False,
             "nvidia_gpu_sharing_time_slicing": {"resources": [{"name": "nvidia.com/mig-1g.10gb.me",
                                                                "replicas": 2}]}}
    rc, out = play(site, tmp_path, extra)
    assert rc != 0
    assert failures(out) == [
        "nvidia_gpu_sharing: nvidia_gpu_sharing_time_slicing.resources[0].name nvidia.com/mig-1g.10gb.me matches no "
        "device of this host (it has: nvidia.com/mig-1g.10gb, nvidia.com/mig-2g.20gb, nvidia.com/mig-3g.40gb); the "
        "device plugin would skip it without a word: fix the name or the MIG layout. Nothing was changed."]
    assert not (tmp_path / HOST / "dp").exists()


def test_without_a_layout_the_devices_are_what_nvml_shows(site: tuple[Path, Path], tmp_path: Path) -> None:
    # No MIG layout: the sim's GPUs are whole GPUs, so a MIG resource under mixed names nothing.
    rc, out = play(site, tmp_path, {"with_mig": False, "nvidia_mig_layout": None, **TS})
    assert rc != 0
    assert failures(out) == [
        "nvidia_gpu_sharing: nvidia_gpu_sharing_time_slicing.resources[0].name nvidia.com/mig-1g.10gb matches no "
        "device of this host (it has: nvidia.com/gpu); the device plugin would skip it without a word: fix the name "
        "or the MIG layout; nvidia_gpu_sharing_time_slicing.resources[1].name nvidia.com/mig-3g.40gb matches no "
        "device of this host (it has: nvidia.com/gpu); the device plugin would skip it without a word: fix the name "
        "or the MIG layout. Nothing was changed."]
    assert not (tmp_path / HOST / "dp").exists()


def test_after_nvidia_mig_applies_the_layout(site: tuple[Path, Path], tmp_path: Path) -> None:
    # site.yml's order: the MIG play, then the sharing play; a second run changes nothing.
    rc, out = play(site, tmp_path, TS)
    assert (rc, failures(out)) == (0, []), failures(out)
    assert mig_layout(tmp_path / HOST / "state.json")[0] != []
    loaded = oracle.load((tmp_path / HOST / "dp" / "config.yaml").read_text(encoding="utf-8"))
    assert loaded.advertised() == {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-3g.40gb": 2}
    rc, out = play(site, tmp_path, TS)
    assert (rc, out["stats"][HOST]["changed"]) == (0, 0)
