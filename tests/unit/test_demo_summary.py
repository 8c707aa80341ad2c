"""The demo's pure parts (tools/demo.py): playbook choice, GPUs from module data, health phrases, live progress
lines."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet.results import Event, FailedTask, HostResult, RunResult

DEMO = Path(__file__).resolve().parents[2] / "tools" / "demo.py"
_SPEC = importlib.util.spec_from_file_location("gpufleet_demo", DEMO)
assert _SPEC is not None
assert _SPEC.loader is not None
demo = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = demo  # dataclasses look their module up by name
_SPEC.loader.exec_module(demo)
Progress, gpus_from_facts, health_summary = demo.Progress, demo.gpus_from_facts, demo.health_summary
mig_summary, pick_playbooks, summarise = demo.mig_summary, demo.pick_playbooks, demo.summarise


@pytest.mark.parametrize(("facts", "gpus"), [
    (None, None),
    ("text", None),
    ({}, None),
    ({"gpus": [{"name": "NVIDIA A30"}, {"name": "NVIDIA A30"}]}, ["NVIDIA A30", "NVIDIA A30"]),
    ({"ansible_facts": {"gpufleet_gpus": [{"name": "NVIDIA L40S"}]}}, ["NVIDIA L40S"]),
    ({"nvidia_gpus": ["NVIDIA H100 80GB HBM3"]}, ["NVIDIA H100 80GB HBM3"]),
    ({"gpus": [{"index": 0}]}, ["?"]),
])
def test_gpus_from_facts(facts: Any, gpus: list[str] | None) -> None:
    assert gpus_from_facts(facts) == gpus


@pytest.mark.parametrize(("health", "phrase"), [
    (None, "-"),
    ({"changed": False}, "-"),
    ({"health": {"status": "ok", "counts": {"ok": 57, "warn": 0, "fail": 0}, "checks": [{"status": "ok"}]}},
     "ok (57 ok)"),
    ({"health": {"status": "fail", "counts": {"ok": 50, "fail": 1},
                 "checks": [{"name": "nvlink", "status": "fail", "gpu": {"index": 3}, "message": "NVLink 5 down"},
                            {"name": "vbios", "status": "warn", "gpu": None, "message": "2 versions"}]}},
     "fail (50 ok, 1 fail); fail nvlink gpu 3: NVLink 5 down; warn vbios: 2 versions"),
])
def test_health_summary(health: Any, phrase: str) -> None:
    assert health_summary(health) == phrase


@pytest.mark.parametrize(("mig", "text"), [
    (None, ""),
    ({"layout": []}, ""),
    ({"layout": [
        {"index": 0, "enabled": True, "gpu_instances": [{"profile_name": "3g.40gb"}, {"profile_name": "1g.10gb"}]},
        {"index": 1, "enabled": True, "gpu_instances": [{"profile_name": "1g.10gb"}, {"profile_name": "3g.40gb"}]},
        {"index": 2, "enabled": False, "gpu_instances": []},
        {"index": 3, "enabled": True, "gpu_instances": []},
    ]}, "GPUs 0,1: 1g.10gb + 3g.40gb; GPUs 3: MIG on, no instances"),
])
def test_mig_summary(mig: Any, text: str) -> None:
    assert mig_summary(mig) == text


def test_pick_playbooks_prefers_site(tmp_path: Path) -> None:
    playbooks, which = pick_playbooks(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in playbooks] == [
        "molecule/_shared/prepare.yml", "molecule/testhosts/converge.yml"]
    assert which.startswith("playbooks/site.yml does not exist yet")
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yml").write_text("---\n")
    assert pick_playbooks(tmp_path) == ([tmp_path / "playbooks" / "site.yml"], "playbooks/site.yml")


def _event(kind: str, host: str | None = None, task: str | None = None, changed: bool = False,
           **data: Any) -> Event:
    return Event.from_runner({"event": kind, "event_data": {"host": host, "task": task,
                                                             "res": {"changed": changed}, **data}})


def test_progress_prints_changes_and_failures_only() -> None:
    out = io.StringIO()
    progress = Progress(out=out)
    for event in [
        _event("playbook_on_play_start", play="Node baseline"),
        _event("runner_on_ok", "h1", "Install driver", changed=True),
        _event("runner_on_ok", "h2", "Install driver"),
        _event("runner_on_skipped", "h2", "Fabric manager"),
        _event("runner_on_failed", "h2", "Start service"),
        _event("runner_on_unreachable", "h3", "Gathering Facts"),
    ]:
        progress(event)
    assert out.getvalue().splitlines() == [
        "PLAY Node baseline",
        "  h1           changed     Install driver",
        "  h2           FAILED      Start service",
        "  h3           UNREACHABLE Gathering Facts",
    ]
    assert dict(progress.changed) == {"h1": ["Install driver"]}
    assert dict(progress.done) == {"h1": 1, "h2": 3, "h3": 1}


def test_summary_counts_changes_by_role_and_names_failures() -> None:
    progress = Progress(out=io.StringIO())
    for role, task in [("nvidia_driver", "Install driver"), ("nvidia_driver", "Hold driver"),
                       (None, "Write marker"), ("gpu_health", "Write the JSON report")]:
        progress(_event("runner_on_ok", "h1", task, changed=True, **({"role": role} if role else {})))
    progress(_event("runner_on_ok", "h2", "Install driver", role="nvidia_driver"))
    facts = {"gpus": [{"name": "NVIDIA A30"}] * 4}
    result = RunResult(playbook="site.yml", status="failed", rc=2, hosts={
        "h1": HostResult(name="h1", ok=10, changed=4, module_data={"facts": facts}),
        "h2": HostResult(name="h2", ok=3, failed=1, module_data={"facts": facts},
                         failed_tasks=[FailedTask(task="Start service", action="ansible.builtin.systemd_service",
                                                  msg="unit not found")]),
    })
    out = io.StringIO()
    summarise([result], progress, out=out)
    lines = out.getvalue().splitlines()
    h1 = next(i for i, line in enumerate(lines) if line.lstrip().startswith("h1 "))
    assert lines[h1].split()[:5] == ["h1", "changed", "10", "4", "0"]
    assert "4x NVIDIA A30" in lines[h1]
    assert lines[h1 + 1].strip() == "changed by role: nvidia_driver 2, playbook 1, gpu_health 1"
    h2 = next(i for i, line in enumerate(lines) if line.lstrip().startswith("h2 "))
    assert lines[h2].split()[:5] == ["h2", "failed", "3", "0", "1"]
    assert lines[h2 + 1].strip() == "FAILED Start service: unit not found"
