"""The nvidia_gpu_sharing role for real on localhost: file written, rerun unchanged, check mode, refusals.

The host's GPUs come from ``nvidia_gpu_sharing_gpus`` (gpu_facts' shape; localhost has no NVML), the MIG layout
from the nvidia_mig role's documented inputs; the files written are loaded by the device-plugin oracle.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
A100 = "A100-SXM4-80GB"


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


def gpu(index: int, *profiles: str) -> dict[str, Any]:
    """One GPU as gpufleet.nvidia.gpu_facts reports it; MIG on when it has instances."""
    return {"index": index, "model": A100, "name": "NVIDIA A100-SXM4-80GB",
            "mig": {"supported": True, "current": bool(profiles), "pending": bool(profiles)},
            "gpu_instances": [{"profile": p, "compute_instances": [{"profile": p}]} for p in profiles]}
PLAYBOOK = """\
- name: GPU sharing config
  hosts: localhost
  gather_facts: false
  roles:
    - role: gpufleet.nvidia.nvidia_gpu_sharing
"""

pytestmark = pytest.mark.slow


def play(tmp: Path, extra: dict[str, Any], check: bool = False) -> tuple[int, dict[str, Any]]:
    book = tmp / "play.yml"
    book.write_text(PLAYBOOK, encoding="utf-8")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"))
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local", str(book),
            "-e", json.dumps({"ansible_python_interpreter": sys.executable, **extra})]
    if check:
        argv.append("--check")
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=120)
    return proc.returncode, json.loads(proc.stdout)


def test_converge_idempotence_check_mode(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "config.yaml"
    extra = {"nvidia_gpu_sharing_config_path": str(config), "nvidia_gpu_sharing_mig_strategy": "mixed",
             "nvidia_gpu_sharing_gpus": [gpu(0), gpu(1, "3g.40gb", "1g.10gb")],
             "nvidia_gpu_sharing_time_slicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4},
                                                               {"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}}
    rc, first = play(tmp_path, extra)
    assert rc == 0
    assert first["stats"]["localhost"]["changed"] == 2  # directory + file
    doc = yaml.safe_load(config.read_text(encoding="utf-8"))
    assert doc == {"version": "v1", "flags": {"migStrategy": "mixed"},
                   "sharing": {"timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": False,
                                               "resources": [{"name": "nvidia.com/gpu", "replicas": 4},
                                                             {"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}}}
    assert config.read_text(encoding="utf-8").startswith("#\n# Ansible managed")
    assert oracle.load(config.read_text(encoding="utf-8")).advertised() == {"nvidia.com/gpu": 4,
                                                                           "nvidia.com/mig-1g.10gb": 2}
    rc, second = play(tmp_path, extra)
    assert (rc, second["stats"]["localhost"]["changed"]) == (0, 0)
    extra["nvidia_gpu_sharing_time_slicing"]["resources"][0]["replicas"] = 8
    rc, checked = play(tmp_path, extra, check=True)
    assert (rc, checked["stats"]["localhost"]["changed"]) == (0, 1)
    assert "replicas: 4" in config.read_text(encoding="utf-8")


def test_refuses_time_slicing_with_mps(tmp_path: Path) -> None:
    gpu = {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}
    config = tmp_path / "config.yaml"
    rc, out = play(tmp_path, {"nvidia_gpu_sharing_config_path": str(config), "nvidia_gpu_sharing_time_slicing": gpu,
                              "nvidia_gpu_sharing_mps": gpu})
    assert rc != 0
    failed = [h for t in out["plays"][0]["tasks"] for h in t["hosts"].values() if h.get("failed")]
    assert failed[0]["msg"] == ("nvidia_gpu_sharing: nvidia_gpu_sharing_time_slicing and nvidia_gpu_sharing_mps are "
                                "mutually exclusive: the device plugin shares GPUs one way; set only one. Nothing was "
                                "changed.")
    assert not config.exists()


def failures(out: dict[str, Any]) -> list[str]:
    return [h["msg"] for t in out["plays"][0]["tasks"] for h in t["hosts"].values() if h.get("failed")]


@pytest.mark.parametrize("check", [False, True], ids=["run", "check-mode"])
def test_refuses_a_resource_the_mig_layout_lacks_before_any_change(tmp_path: Path, check: bool) -> None:
    config = tmp_path / "etc" / "config.yaml"
    # NVML shows 1g.10gb+me now, but the layout nvidia_mig applies has none: the layout is what the plugin will see.
    extra = {"nvidia_gpu_sharing_config_path": str(config), "nvidia_gpu_sharing_mig_strategy": "mixed",
             "nvidia_gpu_sharing_gpus": [gpu(0, "1g.10gb+me")],
             "nvidia_mig_layouts": {"halves": [{"devices": "all", "mig_enabled": True,
                                                "gpu_instances": {"3g.40gb": 2}}]},
             "nvidia_mig_layout": "halves",
             "nvidia_gpu_sharing_time_slicing": {"resources": [{"name": "nvidia.com/mig-1g.10gb.me", "replicas": 2}]}}
    rc, out = play(tmp_path, extra, check=check)
    assert rc != 0
    assert failures(out) == [
        "nvidia_gpu_sharing: nvidia_gpu_sharing_time_slicing.resources[0].name nvidia.com/mig-1g.10gb.me matches no "
        "device of this host (it has: nvidia.com/mig-3g.40gb); the device plugin would skip it without a word: fix "
        "the name or the MIG layout. Nothing was changed."]
    assert not config.parent.exists()


def test_refuses_mps_with_mixed_before_any_change(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "config.yaml"
    rc, out = play(tmp_path, {"nvidia_gpu_sharing_config_path": str(config), "nvidia_gpu_sharing_gpus": [gpu(0)],
                              "nvidia_gpu_sharing_mig_strategy": "mixed",
                              "nvidia_gpu_sharing_mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}})
    assert rc != 0
    assert failures(out) == [
        "nvidia_gpu_sharing: nvidia_gpu_sharing_mps cannot be used with nvidia_gpu_sharing_mig_strategy mixed: the "
        "device plugin refuses MPS with the mixed MIG strategy; use none or single. Nothing was changed."]
    assert not config.parent.exists()


def test_mps_file_and_configmap_load_in_the_plugin(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "config.yaml"
    manifest = tmp_path / "out" / "configmap.yaml"
    manifest.parent.mkdir()
    extra = {"nvidia_gpu_sharing_config_path": str(config), "nvidia_gpu_sharing_gpus": [gpu(0), gpu(1)],
             "nvidia_gpu_sharing_mps": {"rename_by_default": True,
                                        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]},
             "nvidia_gpu_sharing_configmap_path": str(manifest), "nvidia_gpu_sharing_config_name": "mps-4"}
    rc, out = play(tmp_path, extra)
    assert rc == 0
    loaded = oracle.load(config.read_text(encoding="utf-8"))  # started with only --config-file
    assert (loaded.strategy, loaded.mps_root, loaded.advertised()) == ("mps", "/run/nvidia/mps",
                                                                       {"nvidia.com/gpu.shared": 4})
    doc = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    assert (doc["apiVersion"], doc["kind"], doc["metadata"]["name"], doc["metadata"]["namespace"]) == (
        "v1", "ConfigMap", "nvidia-device-plugin-configs", "nvidia-device-plugin")
    assert list(doc["data"]) == ["mps-4"]
    assert oracle.load(doc["data"]["mps-4"]).advertised() == {"nvidia.com/gpu.shared": 4}
    facts = [h.get("ansible_facts", {}) for t in out["plays"][0]["tasks"] for h in t["hosts"].values()]
    assert {"nvidia.com/device-plugin.config": "mps-4"} in [f.get("nvidia_gpu_sharing_node_labels") for f in facts]
    rc, again = play(tmp_path, extra)
    assert (rc, again["stats"]["localhost"]["changed"]) == (0, 0)


def test_warns_when_the_plugin_service_sets_another_mig_strategy(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # localhost has no systemd: a stand-in systemctl prints the unit's Environment= as `systemctl show --value` does
    # and records its arguments; the role's parsing and warning are what is under test.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "systemctl").write_text(f'#!/bin/sh\necho "$*" >> "{tmp_path}/calls"\n'
                                    'echo "NVIDIA_VISIBLE_DEVICES=all MIG_STRATEGY=single FAIL_ON_INIT_ERROR=true"\n',
                                    encoding="utf-8")
    (fake / "systemctl").chmod(0o755)
    extra = {"nvidia_gpu_sharing_config_path": str(tmp_path / "etc" / "config.yaml"),
             "nvidia_gpu_sharing_gpus": [gpu(0, "3g.40gb")], "nvidia_gpu_sharing_mig_strategy": "mixed",
             "nvidia_gpu_sharing_time_slicing": {"resources": [{"name": "nvidia.com/mig-3g.40gb", "replicas": 2}]}}
    assert play(tmp_path, extra)[0] == 0  # the file is in place: no restart is due on the run below
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    rc, out = play(tmp_path, {**extra, "nvidia_gpu_sharing_restart_service": "nvidia-device-plugin.service"})
    assert (rc, failures(out)) == (0, [])
    messages = [h.get("msg") for t in out["plays"][0]["tasks"] for h in t["hosts"].values()]
    assert ("WARNING nvidia_gpu_sharing: the device plugin's environment sets MIG_STRATEGY=single, which overrides the "
            "config file's migStrategy mixed: remove MIG_STRATEGY from the plugin's environment or set "
            "nvidia_gpu_sharing_mig_strategy to single") in messages
    assert (tmp_path / "calls").read_text(encoding="utf-8") == (
        "show --property=Environment --value nvidia-device-plugin.service\n")
