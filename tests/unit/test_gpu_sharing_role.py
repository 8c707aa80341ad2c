"""The nvidia_gpu_sharing role for real on localhost: file written, rerun unchanged, check mode, refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
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
                                "mutually exclusive: the device plugin shares GPUs one way; set only one")
    assert not config.exists()
