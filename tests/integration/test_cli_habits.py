"""Ansible's habits through gpufleet (real runs against a local host): the working directory's ansible.cfg and
ANSIBLE_CONFIG, -v shows Ansible's output, --list-hosts, --artifact-dir keeps ansible-runner's artifacts, and the
--json document carries times and per-host durations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from gpufleet import api
from gpufleet.results import ExitCode

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "tests" / "fixtures" / "runner" / "playbooks"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(f"node-1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return path


def gpufleet(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.pop("ANSIBLE_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "gpufleet.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300, check=False)


def test_the_working_directorys_ansible_cfg_then_ansible_config(inventory: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    playbook = PLAYBOOKS / "config_check.yml"
    # Without a local file: the collection's ansible.cfg (forks = 20).
    assert api.run(playbook, inventory, extravars={"expected_forks": 20}).exit_code is ExitCode.OK
    (tmp_path / "ansible.cfg").write_text("[defaults]\nforks = 7\n")
    assert api.run(playbook, inventory, extravars={"expected_forks": 7}).exit_code is ExitCode.OK
    (tmp_path / "site.cfg").write_text("[defaults]\nforks = 3\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "site.cfg"))
    assert api.run(playbook, inventory, extravars={"expected_forks": 3}).exit_code is ExitCode.OK
    # and the check can fail: the wrong expectation is a failed host
    assert api.run(playbook, inventory, extravars={"expected_forks": 7}).exit_code is ExitCode.FAILED


def test_verbose_shows_ansibles_output(inventory: Path, tmp_path: Path):
    proc = gpufleet("run", str(PLAYBOOKS / "ok.yml"), "-i", str(inventory), "-v", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "TASK [Say hello]" in proc.stdout
    assert "PLAY RECAP" in proc.stdout


def test_list_hosts_lists_and_runs_nothing(inventory: Path, tmp_path: Path):
    proc = gpufleet("run", str(PLAYBOOKS / "ok.yml"), "-i", str(inventory), "--list-hosts", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "hosts (1):" in proc.stdout
    assert "node-1" in proc.stdout
    assert "TASK [Say hello]" not in proc.stdout


def test_artifact_dir_and_json_times(inventory: Path, tmp_path: Path):
    artifacts = tmp_path / "artifacts"
    proc = gpufleet("run", str(PLAYBOOKS / "ok.yml"), "-i", str(inventory), "--json", "--artifact-dir",
                    str(artifacts), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = list(artifacts.iterdir())
    assert "PLAY RECAP" in (run_dir / "stdout").read_text()
    assert (run_dir / "rc").read_text().strip() == "0"
    kinds = {json.loads(p.read_text())["event"] for p in (run_dir / "job_events").iterdir()}
    assert {"playbook_on_start", "runner_on_ok", "playbook_on_stats"} <= kinds
    document = json.loads(proc.stdout)
    started, ended = (datetime.fromisoformat(document[k]) for k in ("started_at", "ended_at"))
    assert started <= ended
    host = document["hosts"]["node-1"]
    assert host["duration_s"] >= 0
    assert datetime.fromisoformat(host["started_at"]) <= datetime.fromisoformat(host["ended_at"])
    assert (document["inventory"], document["limit"]) == ([str(inventory)], None)


def test_a_play_for_the_controller_needs_no_inventory_host(tmp_path: Path):
    (tmp_path / "login.ini").write_text("[login]\nlogin-1 ansible_host=192.0.2.1\n")
    result = api.run(PLAYBOOKS / "controller.yml", tmp_path / "login.ini",
                     extravars={"ansible_python_interpreter": sys.executable})
    assert (result.exit_code, result.error, list(result.hosts)) == (ExitCode.OK, None, ["localhost"])
